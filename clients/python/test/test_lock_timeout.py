"""lock_timeout seen by the handler's own statements, after the middleware's eo_status and claim
waits (Flask runs eo_status inside its transaction; Starlette before it; Django outside an atomic
block), with a lock_timeout the role has (ALTER ROLE ... SET) and one the database owner set."""
import json
import threading
import time

import psycopg
import psycopg2
import pytest
from flask import Flask, g, jsonify

from eo_client.flask import IdempotencyKey


def flask_app(connect):
    app = Flask(__name__)
    IdempotencyKey(app, connect=connect, caller=lambda r: r.headers.get("X-Caller"), wait=0.5)

    @app.post("/lt")
    def lt():
        conn = g.eo_conn
        cur = conn.cursor()
        cur.execute("SHOW lock_timeout")
        v = cur.fetchone()[0]
        cur.close()
        return jsonify(lock_timeout=v), 201
    return app


@pytest.fixture
def role_lock_timeout(admin, admin_dsn):
    db = psycopg.conninfo.conninfo_to_dict(admin_dsn)["dbname"]
    admin.execute(f"ALTER ROLE eo_py_app IN DATABASE {db} SET lock_timeout = '7s'")
    yield
    admin.execute(f"ALTER ROLE eo_py_app IN DATABASE {db} RESET lock_timeout")


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
def test_flask_handler_lock_timeout(role_lock_timeout, dsn, driver):
    connect = {"psycopg": lambda: psycopg.connect(dsn), "psycopg2": lambda: psycopg2.connect(dsn)}[driver]
    client = flask_app(connect).test_client()
    h = {"X-Caller": "c", "Idempotency-Key": f"lt-{driver}"}
    r1 = client.post("/lt", data=b"{}", headers=h)
    r2 = client.post("/lt", data=b"{}", headers=h)                # replay from eo_status
    r3 = client.post("/lt", data=b"{\"x\":1}", headers=h)         # eo_status finds another request: claim, 422
    h2 = {"X-Caller": "c", "Idempotency-Key": f"lt2-{driver}"}
    r4 = client.post("/lt", data=b"{}", headers=h2)                # eo_status: no row (LEFT JOIN's NULLs)
    assert json.loads(r1.data)["lock_timeout"] == "7s"
    assert r2.headers.get("Idempotent-Replayed") == "true"
    assert r3.status_code == 422
    assert json.loads(r4.data)["lock_timeout"] == "7s"


def test_flask_wait_times_out_then_handler(role_lock_timeout, dsn, admin):
    """A retry that waited (eo_status 55P03 inside the Flask transaction) gets 409; the next
    request on a fresh transaction still sees 7s."""
    client = flask_app(lambda: psycopg.connect(dsn)).test_client()
    with psycopg.connect(dsn) as holder:     # a claim in flight of the same eo key
        from eo_client import http as h
        key = h.eo_key("http", "c", "busy-1")
        holder.execute("SELECT eo_claim(%s, %s)", (key, h.default_fingerprint("POST", "/lt", b"{}")))
        r = client.post("/lt", data=b"{}", headers={"X-Caller": "c", "Idempotency-Key": "busy-1"})
        assert r.status_code == 409
        holder.rollback()
    r = client.post("/lt", data=b"{}", headers={"X-Caller": "c", "Idempotency-Key": "busy-1"})
    assert r.status_code == 201 and json.loads(r.data)["lock_timeout"] == "7s"
