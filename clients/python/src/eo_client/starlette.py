"""Idempotency-Key middleware for Starlette and FastAPI (ASGI), with psycopg 3's AsyncConnection.

    app.add_middleware(IdempotencyKeyMiddleware, connection=pool.connection)

``connection`` is a callable giving an async context manager that yields
an AsyncConnection in autocommit (``psycopg_pool.AsyncConnectionPool``'s
``connection``, or see ``connect_each_request``). The handler does its
database work on ``request.state.eo_conn`` (FastAPI: ``Depends(eo_connection)``)
in the transaction of the claim (``request.state.eo_claim``). The
response is sent after COMMIT. A client that disconnects before the
handler answered cancels the handler and rolls the transaction back:
nothing is claimed.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Tuple

from starlette.requests import Request

from . import http
from .claims import aclaim, astatus
from .errors import EoError


def default_caller(scope: Dict[str, Any]) -> Optional[str]:
    """The authenticated user (AuthenticationMiddleware), else a hash of the Authorization header."""
    user = scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        try:
            return f"user:{user.identity}"
        except (AttributeError, NotImplementedError):   # SimpleUser: its name
            return f"user-name:{user.display_name}"
    for n, v in scope.get("headers", []):
        if n == b"authorization":
            return http.caller_from_authorization(v.decode("latin-1"))
    return None


def connect_each_request(conninfo: str) -> Callable[[], Any]:
    """A ``connection`` that opens an autocommit AsyncConnection per request (use a pool in production)."""
    import psycopg

    @contextlib.asynccontextmanager
    async def connection() -> AsyncIterator[Any]:
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        try:
            yield conn
        finally:
            await conn.close()
    return connection


async def eo_connection(request: Request) -> AsyncIterator[Any]:
    """FastAPI dependency: the request's connection, in the claim's transaction.

    An exception the handler raises passes through here before an exception
    handler answers it (HTTPException's 4xx, an ``exception_handler``'s):
    it is noted, so that the middleware rolls the handler's work back
    instead of storing that answer."""
    try:
        yield request.state.eo_conn
    except BaseException:
        request.state.eo_raised = True
        raise


class _Done(Exception):
    def __init__(self, answer: http.Answer) -> None:
        self.answer = answer


class _ClientGone(Exception):
    pass


async def _send(send: Any, a: http.Answer) -> None:
    headers = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in a.headers]
    headers.append((b"content-length", str(len(a.body)).encode()))
    await send({"type": "http.response.start", "status": a.status, "headers": headers})
    await send({"type": "http.response.body", "body": a.body})


class IdempotencyKeyMiddleware:
    def __init__(self, app: Any, *, connection: Callable[[], Any], **options: Any) -> None:
        self.app = app
        self.connection = connection
        self.options = http.Options(**options)
        self.caller = self.options.caller or default_caller

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        o = self.options
        if scope["type"] != "http" or scope["method"].upper() not in o.methods:
            return await self.app(scope, receive, send)
        headers = {}
        for n, v in scope.get("headers", []):
            headers.setdefault(n.decode("latin-1").lower(), v.decode("latin-1"))
        key = headers.get(o.header.lower())
        if key is None:
            if o.required:
                return await _send(send, http.error(400, f"this request needs an {o.header} header"))
            return await self.app(scope, receive, send)
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > o.max_body:
            return await _send(send, http.error(413, f"a request with an {o.header} may have a body of"
                                                     f" {o.max_body} bytes at most"))
        body = await self._body(receive, o.max_body)
        if body is None:
            return                        # the client went away while sending: nothing claimed
        if len(body) > o.max_body:        # a chunked body over the limit: read no further
            return await _send(send, http.error(413, f"a request with an {o.header} may have a body of"
                                                     f" {o.max_body} bytes at most"))
        path = scope.get("raw_path") or scope["path"].encode()
        if isinstance(path, bytes):
            path = path.decode("latin-1")
        if scope.get("query_string"):
            path += "?" + scope["query_string"].decode("latin-1")
        prep = http.prepare(o, scope["method"], path, key, self.caller(scope), length, body)
        if isinstance(prep, http.Answer):
            return await _send(send, prep)
        assert prep is not None
        async with self.connection() as conn:
            try:
                done = http.replay_done(o, prep, await astatus(conn, prep.key, scope=o.eo_scope, wait=o.wait))
                if done is not None:
                    raise _Done(done)
                async with conn.transaction():
                    c = await aclaim(conn, prep.key, fingerprint=prep.fingerprint, scope=o.eo_scope, wait=o.wait)
                    early = http.answer_for(o, c)
                    if early is not None:
                        raise _Done(early)
                    state = scope.setdefault("state", {})
                    state["eo_conn"], state["eo_claim"] = conn, c
                    status, out_headers, out_body = await self._run(scope, receive, body)
                    answer = http.Answer(status, out_headers, out_body)
                    if state.get("eo_raised") or http.releases(o, status):
                        raise _Done(answer)          # nothing stored: the key is released
                    result = http.stored(o, status, out_headers, out_body, prep.fingerprint)
                    if isinstance(result, http.Answer):
                        raise _Done(result)
                    await c.complete(result)
            except _Done as d:
                return await _send(send, d.answer)
            except _ClientGone:
                return
            except EoError as e:
                a = http.answer_for_error(o, e)
                if a is None:
                    raise
                return await _send(send, a)
        await _send(send, answer)

    @staticmethod
    async def _body(receive: Any, limit: int) -> Optional[bytes]:
        """The whole body, or None if the client left, or limit + 1 bytes of it once it has more."""
        parts: List[bytes] = []
        size = 0
        while True:
            m = await receive()
            if m["type"] == "http.disconnect":
                return None
            parts.append(m.get("body", b""))
            size += len(parts[-1])
            if size > limit:
                return b"".join(parts)[:limit + 1]
            if not m.get("more_body", False):
                return b"".join(parts)

    async def _run(self, scope: Dict[str, Any], receive: Any, body: bytes) -> Tuple[int, http.Headers, bytes]:
        """Run the app on the read body, collecting its response; _ClientGone if the client left first."""
        gone = asyncio.Event()
        given = False
        start: Dict[str, Any] = {}
        parts: List[bytes] = []

        async def app_receive() -> Dict[str, Any]:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def app_send(m: Dict[str, Any]) -> None:
            if m["type"] == "http.response.start":
                start.update(m)
            elif m["type"] == "http.response.body":
                parts.append(m.get("body", b""))

        async def watch() -> None:
            while True:
                m = await receive()
                if m["type"] == "http.disconnect":
                    gone.set()
                    return

        app_task = asyncio.ensure_future(self.app(scope, app_receive, app_send))
        watch_task = asyncio.ensure_future(watch())
        try:
            await asyncio.wait({app_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not app_task.done() and watch_task.done():
                app_task.cancel()
            watch_task.cancel()
            await asyncio.gather(watch_task, return_exceptions=True)
        if not app_task.done() or app_task.cancelled():
            await asyncio.gather(app_task, return_exceptions=True)
            raise _ClientGone()
        app_task.result()                 # the handler's exception: the transaction rolls back
        headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in start.get("headers", [])
                   if n.lower() != b"content-length"]
        return start.get("status", 500), headers, b"".join(parts)
