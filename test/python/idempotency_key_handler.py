#!/usr/bin/env python3
# Copyright: eo authors.  See README.
#
# The Idempotency-Key handler of docs/guides.md ("HTTP APIs with an
# Idempotency-Key"), as a program: test/t/041_python_examples.pl checks that
# the page's ```python block is in this file word for word, and runs it.
#
# Below the page's code, a stand-in for a web server: one request a line on
# standard input (JSON: method, path, headers, body), its answer a line on
# standard output (JSON: status, body, headers), all on the one connection,
# as a server process handles request after request.  It needs python3 and
# psycopg 3 (Debian: python3-psycopg), and a table orders (id, item, qty).
#
#   echo '{"method": "POST", "path": "/orders", "headers": {"Idempotency-Key": "7f3c"},
#          "body": "{\"item\": \"tea\", \"qty\": 2}"}' |
#   EO_DSN='dbname=app' python3 test/python/idempotency_key_handler.py

import hashlib
import os

import psycopg
from psycopg.types.json import Jsonb

# autocommit=True: each `with conn.transaction()` is a transaction of its own,
# committed at the end of the block. With psycopg's default (autocommit off) the
# first statement outside such a block, the eo_http_error_status query of a
# request without a key, opens a transaction that nothing ends: every later
# `with conn.transaction()` is only a savepoint in it, answers 201, and no order
# is ever committed.
conn = psycopg.connect(os.environ["EO_DSN"], autocommit=True)


def create_order(request):
    key = request.headers.get("Idempotency-Key")
    fp = hashlib.md5(request.method.encode() + request.path.encode() + request.data).hexdigest()
    try:
        with conn.transaction():
            result, code, retry = conn.execute(
                "SELECT c.result, a.http_status, a.retry_after"
                "  FROM eo_claim(%s, fingerprint => %s) c,"
                "       eo_http_answer(c.status, c.result, c.lease_expires_at) a",
                ("orders:" + key if key else None, fp)).fetchone()
            if code is not None:                  # duplicate, busy or dead: answer, change nothing
                headers = {"Retry-After": str(retry)} if retry else {}
                return (result or {}).get("body", {}), code, headers
            order_id = conn.execute("INSERT INTO orders (item, qty) VALUES (%s, %s) RETURNING id",
                                    (request.json["item"], request.json["qty"])).fetchone()[0]
            answer = {"http_status": 201, "body": {"id": order_id}}
            conn.execute("SELECT eo_complete(%s, %s)", ("orders:" + key, Jsonb(answer)))
        return answer["body"], 201, {}
    except psycopg.Error as e:                    # an error eo_claim raised about the key?
        code = conn.execute("SELECT eo_http_error_status(%s)", (e.sqlstate,)).fetchone()[0]
        if code is None:
            raise
        return {"error": e.diag.message_primary}, code, {}


# ---- not in the page: the stand-in for the web server ---------------------

import json  # noqa: E402
import sys  # noqa: E402


class Request:
    """What create_order reads of a request, under the names Flask's request has."""

    def __init__(self, method, path, headers, body):
        self.method = method
        self.path = path
        self.headers = headers
        self.data = body.encode()

    @property
    def json(self):
        return json.loads(self.data)


def main():
    for line in sys.stdin:
        r = json.loads(line)
        request = Request(r["method"], r["path"], r.get("headers", {}), r.get("body", ""))
        body, status, headers = create_order(request)
        print(json.dumps({"status": status, "body": body, "headers": headers}), flush=True)


if __name__ == "__main__":
    main()
