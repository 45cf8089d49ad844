"""bench/http/fastapi_app.py -- the FastAPI contenders of bench/http.sh.

    EO_BENCH_CONTENDER=bare|eo|hand EO_BENCH_DSN=... EO_BENCH_POOL=4 \
        python3 -m uvicorn fastapi_app:app --port N

POST /orders, body {"item": ..., "qty": ...}: one INSERT of an order in a
transaction, answered 201 {"id": ...}. The same handler three ways, each
on a psycopg_pool AsyncConnectionPool of EO_BENCH_POOL autocommit
connections:

bare  the handler alone, no idempotency: BEGIN, INSERT, COMMIT.
eo    the handler under eo_client.starlette.IdempotencyKeyMiddleware
      (docs/python.md): BEGIN, the claim, the INSERT, eo_complete with the
      response, COMMIT.
hand  the processed-keys table as the Idempotency-Key packages keep it,
      outside the handler's transaction: SELECT the (caller, key) row;
      none: INSERT it 'started' (committed on its own), BEGIN, the INSERT,
      COMMIT, UPDATE the row with the response (committed on its own);
      done: the stored response; another request's hash: 422; started: 409.
"""
from __future__ import annotations

import hashlib
import os

import psycopg_pool
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from eo_client.starlette import IdempotencyKeyMiddleware, eo_connection

CONTENDER = os.environ["EO_BENCH_CONTENDER"]
pool = psycopg_pool.AsyncConnectionPool(
    os.environ["EO_BENCH_DSN"], min_size=int(os.environ.get("EO_BENCH_POOL", "4")),
    max_size=int(os.environ.get("EO_BENCH_POOL", "4")), kwargs={"autocommit": True}, open=False)
app = FastAPI()


@app.on_event("startup")
async def _open() -> None:
    await pool.open(wait=True)


@app.on_event("shutdown")
async def _close() -> None:
    await pool.close()


class Order(BaseModel):
    item: str
    qty: int


INSERT = "INSERT INTO orders (item, qty) VALUES (%s, %s) RETURNING id"


async def create(conn, order: Order) -> JSONResponse:
    """The handler's work, the same for every contender."""
    cur = await conn.execute(INSERT, (order.item, order.qty))
    return JSONResponse({"id": (await cur.fetchone())[0]}, status_code=201)


if CONTENDER == "bare":
    @app.post("/orders", status_code=201)
    async def bare(order: Order):
        async with pool.connection() as conn:
            async with conn.transaction():
                return await create(conn, order)

elif CONTENDER == "eo":
    app.add_middleware(IdempotencyKeyMiddleware, connection=pool.connection,
                       caller=lambda scope: dict(scope["headers"]).get(b"x-api-client", b"").decode() or None)

    @app.post("/orders", status_code=201)
    async def with_eo(order: Order, conn=Depends(eo_connection)):
        return await create(conn, order)

elif CONTENDER == "hand":
    LOOKUP = ("SELECT state, request_hash, response_status, response_body FROM idempotency_keys"
              " WHERE caller = %s AND key = %s")
    START = ("INSERT INTO idempotency_keys (caller, key, request_hash) VALUES (%s, %s, %s)"
             " ON CONFLICT (caller, key) DO NOTHING RETURNING id")
    FINISH = ("UPDATE idempotency_keys SET state = 'done', response_status = %s, response_headers = %s,"
              " response_body = %s, updated_at = now() WHERE caller = %s AND key = %s")
    FORGET = "DELETE FROM idempotency_keys WHERE caller = %s AND key = %s"

    def problem(status: int, msg: str) -> JSONResponse:
        return JSONResponse({"error": msg}, status_code=status)

    @app.post("/orders", status_code=201)
    async def hand(order: Order, request: Request):
        key = request.headers.get("idempotency-key")
        caller = request.headers.get("x-api-client")
        if not key or not caller:
            return problem(400, "Idempotency-Key and a caller are required")
        digest = hashlib.sha256(b"POST\0" + request.url.path.encode() + b"\0" + await request.body()).hexdigest()
        async with pool.connection() as conn:
            cur = await conn.execute(LOOKUP, (caller, key))
            row = await cur.fetchone()
            if row is not None:
                state, h, status, body = row
                if h != digest:
                    return problem(422, "this key was used with another request")
                if state != "done":
                    return problem(409, "a request with this key is in progress")
                return Response(body, status_code=status, media_type="application/json",
                                headers={"Idempotent-Replayed": "true"})
            cur = await conn.execute(START, (caller, key, digest))
            if await cur.fetchone() is None:
                return problem(409, "a request with this key is in progress")
            try:
                async with conn.transaction():
                    resp = await create(conn, order)
            except BaseException:
                await conn.execute(FORGET, (caller, key))
                raise
            await conn.execute(FINISH, (resp.status_code, '{"content-type": "application/json"}',
                                        resp.body.decode(), caller, key))
            return resp

else:
    raise SystemExit(f"EO_BENCH_CONTENDER: bare, eo or hand, not {CONTENDER!r}")
