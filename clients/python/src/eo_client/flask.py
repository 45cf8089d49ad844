"""Idempotency-Key middleware for Flask.

    idem = IdempotencyKey(app, connect=lambda: psycopg.connect(DSN), release=lambda c: c.close())

``connect`` gives a psycopg 3 or psycopg2 connection, or a SQLAlchemy
Connection (``engine.connect``), one per request; ``release`` gives it back
(default: close it). The view does its database work on ``g.eo_conn``, in
the transaction of the claim (``g.eo_claim``); it commits when the view
answered below 500 and the response was stored. An exception the view
raised rolls it back, also when an error handler answers it with a 4xx.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from flask import Flask, Response, g, request

from . import http
from .claims import claim, status
from .errors import EoError


def default_caller(req: Any) -> Optional[str]:
    """A hash of the Authorization header (give ``caller=`` for a session's user)."""
    return http.caller_from_authorization(req.headers.get("Authorization"))


class _Tx:
    """A transaction on a connection the app gave: psycopg 3, psycopg2 or SQLAlchemy."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sa = hasattr(conn, "exec_driver_sql")
        self.autocommit = None
        if self.sa:
            self.tx = conn.begin()
        elif getattr(conn, "autocommit", False):
            self.autocommit = True
            conn.autocommit = False

    def end(self, commit: bool) -> None:
        try:
            if self.sa:
                (self.tx.commit if commit else self.tx.rollback)()
            else:
                (self.conn.commit if commit else self.conn.rollback)()
        finally:
            if self.autocommit:
                self.conn.autocommit = True


def _response(a: http.Answer) -> Response:
    return Response(a.body, status=a.status, headers=a.headers)


class IdempotencyKey:
    def __init__(self, app: Optional[Flask] = None, *, connect: Callable[[], Any],
                 release: Optional[Callable[[Any], None]] = None, **options: Any) -> None:
        self.connect = connect
        self.release = release or (lambda c: c.close())
        self.options = http.Options(**options)
        self.caller = self.options.caller or default_caller
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        app.before_request(self._before)
        app.after_request(self._after)
        app.teardown_request(self._teardown)
        # An exception an error handler turns into an answer (abort(400), an
        # errorhandler's 4xx) reaches after_request as a plain response: note it,
        # so that the view's partial work is rolled back rather than stored.
        handle = app.handle_user_exception

        def handle_user_exception(e: Exception) -> Any:
            if "_eo_open" in g:
                g._eo_raised = True
            return handle(e)
        app.handle_user_exception = handle_user_exception  # type: ignore[method-assign]

    def _before(self) -> Optional[Response]:
        o = self.options
        key = request.headers.get(o.header)
        if key is not None and request.content_length is not None and request.content_length > o.max_body:
            return _response(http.error(413, f"a request with an {o.header} may have a body of"
                                             f" {o.max_body} bytes at most"))
        body = b""
        if key is not None:
            # At most max_body + 1 bytes, also of a chunked body (werkzeug 2.2 reads those unbounded);
            # kept where request.get_data() and request.json find it.
            body = request.stream.read(o.max_body + 1)
            if len(body) > o.max_body:
                return _response(http.error(413, f"a request with an {o.header} may have a body of"
                                                 f" {o.max_body} bytes at most"))
            request._cached_data = body
        prep = http.prepare(o, request.method, request.full_path if request.query_string else request.path,
                            key, self.caller(request) if key is not None else None,
                            request.headers.get("Content-Length"), body)
        if prep is None:
            return None
        if isinstance(prep, http.Answer):
            return _response(prep)
        conn = self.connect()
        try:
            tx = _Tx(conn)
        except BaseException:
            self.release(conn)
            raise
        try:
            early = http.replay_done(o, prep, status(conn, prep.key, scope=o.eo_scope, wait=o.wait))
            if early is None:
                c = claim(conn, prep.key, fingerprint=prep.fingerprint, scope=o.eo_scope, wait=o.wait)
                early = http.answer_for(o, c)
        except EoError as e:
            self._end(conn, tx, False)
            a = http.answer_for_error(o, e)
            if a is None:
                raise
            return _response(a)
        except BaseException:
            self._end(conn, tx, False)
            raise
        if early is not None:
            self._end(conn, tx, False)
            return _response(early)
        g._eo_open = (conn, tx, c, prep.fingerprint)
        g.eo_conn, g.eo_claim = conn, c
        return None

    def _end(self, conn: Any, tx: _Tx, commit: bool) -> None:
        try:
            tx.end(commit)
        finally:
            self.release(conn)

    def _after(self, response: Response) -> Response:
        opened = g.pop("_eo_open", None)
        if opened is None:
            return response
        conn, tx, c, fingerprint = opened
        if g.pop("_eo_raised", False) or http.releases(self.options, response.status_code):
            self._end(conn, tx, False)                # nothing stored: the key is released
            return response
        response.direct_passthrough = False
        result = http.stored(self.options, response.status_code, response.headers.items(), response.get_data(),
                             fingerprint)
        if isinstance(result, http.Answer):
            self._end(conn, tx, False)
            return _response(result)
        try:
            c.complete(result)
        except BaseException:
            self._end(conn, tx, False)
            raise
        self._end(conn, tx, True)
        return response

    def _teardown(self, exc: Optional[BaseException]) -> None:
        opened = g.pop("_eo_open", None)             # the view raised: roll back
        if opened is not None:
            self._end(opened[0], opened[1], False)
