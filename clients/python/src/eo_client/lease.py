"""Lease mode for outside calls, with a heartbeat that renews the lease."""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Optional

from . import _sql
from .claims import AsyncClaim, Claim, aclaim, claim
from .errors import EoError, StaleToken

log = logging.getLogger("eo_client")


def _seconds(v: _sql.Interval) -> float:
    import datetime as _dt
    if isinstance(v, _dt.timedelta):
        return v.total_seconds()
    if isinstance(v, (int, float)):
        return float(v)
    raise TypeError("give the lease in seconds or as a timedelta")


class _LeaseBase:
    """What Lease and AsyncLease share."""

    claim: Any

    def __init__(self, conn: Any, key: str, lease: _sql.Interval = 30, *, fingerprint: Optional[str] = None,
                 scope: Optional[str] = None, heartbeat: Optional[float] = None, heartbeat_conn: Any = None,
                 retry_after: Optional[_sql.Interval] = None, fail_on_error: bool = True) -> None:
        self.conn, self.key, self.lease = conn, key, _seconds(lease)
        self.fingerprint, self.scope = fingerprint, scope
        self.heartbeat = heartbeat if heartbeat is not None else max(0.2, self.lease / 3)
        self.heartbeat_conn = heartbeat_conn if heartbeat_conn is not None else conn
        self.retry_after, self.fail_on_error = retry_after, fail_on_error
        self.claim = None
        self.stale = False
        self.done = False

    @property
    def claimed(self) -> bool:
        return self.claim is not None and self.claim.claimed

    def check(self) -> None:
        """Raise StaleToken if the heartbeat learnt that the lease was taken over."""
        if self.stale:
            raise StaleToken(f"the lease of key {self.key!r} was taken over: stop, store nothing", "55006")

    def _holder(self) -> Any:
        self.check()
        if not self.claimed:
            raise EoError(f"key {self.key!r} is not held: the claim answered {self.claim and self.claim.status}")
        return self.claim

    def _taken_over(self) -> None:
        self.stale = True
        log.warning("eo: the lease of key %r was taken over; its holder must stop", self.key)

    def _should_fail(self, ev: Any) -> bool:
        return ev is not None and self.claimed and not self.done and not self.stale and self.fail_on_error


class Lease(_LeaseBase):
    """``with Lease(conn, key, lease=30) as l:`` claims ``key`` with a lease
    (``conn`` must be in autocommit, so that the claim is committed before
    the outside call), renews it every ``heartbeat`` seconds (a third of the
    lease by default) on ``heartbeat_conn`` (default ``conn``) while the block
    runs, and stops renewing when the block ends.

    ``l.claim`` is what eo answered; act only if ``l.claimed``. Once the
    heartbeat learns that the token is stale (the lease ran out and another
    holder took the key over), ``l.stale`` is true and ``l.check()``,
    ``l.complete()``, ``l.recovery_point()`` raise StaleToken without
    sending anything; eo refuses a stale token as well (55006). A block
    that raises records the failure with eo_fail (unless the token is stale
    or ``fail_on_error`` is false)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "Lease":
        self.claim = claim(self.conn, self.key, fingerprint=self.fingerprint, lease=self.lease, scope=self.scope)
        if self.claim.claimed:
            self._thread = threading.Thread(target=self._beat, name=f"eo-heartbeat {self.key}", daemon=True)
            self._thread.start()
        return self

    def _beat(self) -> None:
        assert self.claim is not None
        hb = Claim(**{**self.claim.__dict__, "conn": self.heartbeat_conn})
        while not self._stop.wait(self.heartbeat):
            with self._lock:
                if self.done:
                    return
                try:
                    self.claim.lease_expires_at = hb.extend(self.lease)
                except StaleToken:
                    self._taken_over()
                    return
                except EoError as e:
                    log.warning("eo: renewing the lease of key %r failed: %s", self.key, e)
                except Exception as e:  # the connection is gone: eo fences the holder anyway
                    log.warning("eo: renewing the lease of key %r failed: %s", self.key, e)

    def _stop_beat(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def complete(self, result: Any = None, *, conn: Any = None) -> None:
        """eo_complete with the token; ``conn`` (default the lease's) may be in a
        transaction that also records the effect."""
        c = self._holder()
        with self._lock:
            self.check()
            Claim(**{**c.__dict__, "conn": conn or self.conn}).complete(result)
            self.done = True

    def recovery_point(self, point: str, state: Any = None, *, conn: Any = None) -> None:
        c = self._holder()
        with self._lock:
            self.check()
            Claim(**{**c.__dict__, "conn": conn or self.conn}).recovery_point(point, state)

    def fail(self, error: Optional[str] = None, **kw: Any) -> str:
        c = self._holder()
        with self._lock:
            self.done = True
            return c.fail(error, **kw)

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        self._stop_beat()
        if self._should_fail(ev):
            try:
                self.fail(f"{et.__name__}: {ev}"[:4000], retry_after=self.retry_after)
            except Exception as e:
                log.warning("eo: recording the failure of key %r failed: %s", self.key, e)


class AsyncLease(_LeaseBase):
    """Lease for psycopg 3's AsyncConnection (autocommit); the heartbeat is an asyncio task."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._task: Optional[asyncio.Task] = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> "AsyncLease":
        self.claim = await aclaim(self.conn, self.key, fingerprint=self.fingerprint, lease=self.lease,
                                  scope=self.scope)
        if self.claim.claimed:
            self._task = asyncio.ensure_future(self._beat())
        return self

    async def _beat(self) -> None:
        assert self.claim is not None
        hb = AsyncClaim(**{**self.claim.__dict__, "conn": self.heartbeat_conn})
        while True:
            await asyncio.sleep(self.heartbeat)
            async with self._lock:
                if self.done:
                    return
                try:
                    self.claim.lease_expires_at = await hb.extend(self.lease)
                except StaleToken:
                    self._taken_over()
                    return
                except Exception as e:
                    log.warning("eo: renewing the lease of key %r failed: %s", self.key, e)

    async def complete(self, result: Any = None, *, conn: Any = None) -> None:
        c = self._holder()
        async with self._lock:
            self.check()
            await AsyncClaim(**{**c.__dict__, "conn": conn or self.conn}).complete(result)
            self.done = True

    async def recovery_point(self, point: str, state: Any = None, *, conn: Any = None) -> None:
        c = self._holder()
        async with self._lock:
            self.check()
            await AsyncClaim(**{**c.__dict__, "conn": conn or self.conn}).recovery_point(point, state)

    async def fail(self, error: Optional[str] = None, **kw: Any) -> str:
        c = self._holder()
        async with self._lock:
            self.done = True
            return await c.fail(error, **kw)

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self._should_fail(ev):
            try:
                await self.fail(f"{et.__name__}: {ev}"[:4000], retry_after=self.retry_after)
            except Exception as e:
                log.warning("eo: recording the failure of key %r failed: %s", self.key, e)
