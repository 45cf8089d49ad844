"""The examples of docs/python.md, run as they are written."""
import os
import re

import pytest

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "python.md")


def examples():
    text = open(DOC, encoding="utf-8").read()
    return dict(re.findall(r"<!-- example: (\w+) -->\n```python\n(.*?)```", text, re.S))


def run(name, dsn):
    ns = {"DSN": dsn, "__name__": f"doc_{name}"}
    exec(compile(examples()[name], f"docs/python.md:{name}", "exec"), ns)
    return ns


def test_all_examples_found():
    assert set(examples()) == {"claim", "consumer", "lease", "flask", "fastapi"}


@pytest.mark.parametrize("name", ["claim", "consumer", "lease"])
def test_helpers(name, dsn, admin):
    ns = run(name, dsn)
    if name == "claim":
        assert ns["answer"] == {"rows": 1}
    if name == "consumer":
        assert admin.execute("SELECT count(*) FROM payments").fetchone()[0] == 1


def check_http(post, admin):
    from scenarios import who
    hd = {"Idempotency-Key": "doc-1", "X-Api-Client": who("c1"), "Content-Type": "application/json"}
    first = post(b'{"item": "tea", "qty": 2}', hd)
    again = post(b'{"item": "tea", "qty": 2}', hd)
    assert first[0] == 201 and again[0] == 201 and first[2] == again[2]
    assert again[1].get("idempotent-replayed") == "true"
    assert post(b'{"item": "tea", "qty": 3}', hd)[0] == 422
    assert post(b'{"item": "tea", "qty": 2}', {k: v for k, v in hd.items() if k != "Idempotency-Key"})[0] == 400
    assert admin.execute("SELECT count(*) FROM orders").fetchone()[0] == 1


def test_flask(dsn, admin):
    client = run("flask", dsn)["app"].test_client()

    def post(body, headers):
        r = client.post("/orders", data=body, headers=headers)
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.data
    check_http(post, admin)


def test_fastapi(dsn, admin):
    from starlette.testclient import TestClient
    client = TestClient(run("fastapi", dsn)["app"])

    def post(body, headers):
        r = client.post("/orders", content=body, headers=headers)
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content
    check_http(post, admin)
