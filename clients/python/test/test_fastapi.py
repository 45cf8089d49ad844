import asyncio
import contextlib
import json
import threading
import time

import psycopg
import pytest
import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.testclient import TestClient

import scenarios
from apps import Invalid, order
from eo_client import astatus
from eo_client.starlette import IdempotencyKeyMiddleware, connect_each_request, eo_connection


def make_app(dsn, connection=None):
    app = FastAPI()
    app.add_middleware(IdempotencyKeyMiddleware, connection=connection or connect_each_request(dsn),
                       caller=lambda scope: dict(scope["headers"]).get(b"x-caller", b"").decode() or None, wait=0.5)

    @app.exception_handler(Invalid)
    async def invalid(request: Request, e: Invalid):
        return JSONResponse({"error": str(e)}, status_code=400)

    @app.post("/orders")
    async def create(request: Request, conn=Depends(eo_connection)):
        data = json.loads(await request.body())
        rows = []

        async def run(sql, params):
            cur = await conn.execute(sql, params)
            return await cur.fetchone()
        oid = await run("INSERT INTO orders (item, qty) VALUES (%s, %s) RETURNING id", (data["item"], data["qty"]))
        rows.append(oid[0])
        if data.get("sleep"):
            await asyncio.sleep(data["sleep"])
        # the rest is apps.order's logic, without its insert
        status, out, headers = order(lambda sql, params: (rows[0],), {**data, "sleep": 0},
                                     request.headers.get("X-Echo"))
        return JSONResponse(out, status_code=status, headers=headers)
    return app


def poster(app):
    client = TestClient(app, raise_server_exceptions=False)

    def post(body, headers):
        r = client.post("/orders", content=body, headers=headers)
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content
    return post


@pytest.mark.parametrize("scenario", scenarios.ALL, ids=lambda s: s.__name__)
def test_fastapi(dsn, admin, scenario):
    scenario(poster(make_app(dsn)), admin)


@pytest.fixture
def server(dsn):
    config = uvicorn.Config(make_app(dsn), host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    srv = uvicorn.Server(config)
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    while not srv.started:
        time.sleep(0.05)
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield port
    srv.should_exit = True
    t.join(5)


def test_fastapi_client_gone_mid_handler(server, admin):
    scenarios.client_gone_mid_handler(server, admin)


def test_fastapi_client_gone_mid_body(server, admin):
    scenarios.client_gone_mid_body(server, admin)


def test_fastapi_async_connection_is_the_claims(dsn, admin):
    """The handler's connection is in the claim's transaction: eo_status from inside sees it processing."""
    app = make_app(dsn)

    @app.post("/peek")
    async def peek(request: Request, conn=Depends(eo_connection)):
        c = request.state.eo_claim
        st = await astatus(conn, c.key)
        return {"status": c.status, "in_tx": conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS,
                "seen": st.state}
    r = TestClient(app).post("/peek", content=b"{}", headers=scenarios.h("k-peek"))
    assert r.status_code == 200 and r.json() == {"status": "claimed", "in_tx": True, "seen": "processing"}


def test_fastapi_replay_is_one_statement(dsn, admin):
    """A retry is answered from one eo_status on the autocommit connection: no BEGIN, no claim."""
    sent = []

    class Recording(psycopg.AsyncConnection):
        def transaction(self, *a, **kw):
            sent.append("BEGIN")
            return super().transaction(*a, **kw)

    class Cursor(psycopg.AsyncCursor):
        async def execute(self, query, *a, **kw):
            sent.append(query)
            return await super().execute(query, *a, **kw)

    held = []

    @contextlib.asynccontextmanager
    async def connection():                 # one connection, as a pool's: eo's schema is looked up once
        if not held:
            held.append(await Recording.connect(dsn, autocommit=True, cursor_factory=Cursor))
        yield held[0]
    app = make_app(dsn, connection)
    post = poster(app)
    assert post(scenarios.body(), scenarios.h("k-one"))[0] == 201
    first = [q for q in sent if "pg_extension" not in q]
    assert "eo_status(" in first[0] and "lock_timeout" in first[0]      # the first request: no row yet
    assert [q for q in sent if "eo_claim(" in q] and "BEGIN" in sent
    sent.clear()
    s, hs, _ = post(scenarios.body(), scenarios.h("k-one"))
    assert (s, hs.get("idempotent-replayed")) == (201, "true")
    assert len(sent) == 1 and "eo_status(" in sent[0], sent
    assert scenarios.orders(admin) == 1


def test_fastapi_chunked_huge(server, admin, dsn):
    # uvicorn reads (and drops) the rest of a body the app did not read, so count what the middleware reads
    scenarios.chunked_huge(server, admin, drains=True)
    pulled = []

    async def receive():
        pulled.append(1)
        return {"type": "http.request", "body": b"x" * (64 << 10), "more_body": True}
    sent = []

    async def send(m):
        sent.append(m)
    mw = IdempotencyKeyMiddleware(None, connection=None, caller=lambda scope: "c")
    scope = {"type": "http", "method": "POST", "path": "/orders", "headers": [(b"idempotency-key", b"k")]}
    asyncio.run(mw(scope, receive, send))
    assert sent[0]["status"] == 413 and len(pulled) == 17      # 1 MiB + one chunk, no more
