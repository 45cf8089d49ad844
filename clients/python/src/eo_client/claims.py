"""Claims in the caller's transaction, as objects."""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Optional, Tuple

from . import _sql
from .errors import Busy, Dead, EoError, InvalidArgument

CLAIMED, DUPLICATE, BUSY, DEAD = "claimed", "duplicate", "busy", "dead"


@dataclass(frozen=True)
class RecoveryPoint:
    """The progress an earlier holder recorded with eo_recovery_point."""

    point: str
    state: Any = None


@dataclass
class _Outcome:
    key: str
    scope: Optional[str]
    status: str
    result: Any = None
    attempts: Optional[int] = None
    token: Optional[int] = None
    lease_expires_at: Optional[_dt.datetime] = None
    retry_after: Optional[int] = None
    result_expired: bool = False
    recovered: Optional[RecoveryPoint] = None
    conn: Any = field(default=None, repr=False, compare=False)

    @property
    def claimed(self) -> bool:
        return self.status == CLAIMED

    @property
    def duplicate(self) -> bool:
        return self.status == DUPLICATE

    @property
    def busy(self) -> bool:
        return self.status == BUSY

    @property
    def dead(self) -> bool:
        return self.status == DEAD

    def raise_for_status(self) -> "_Outcome":
        """Raise Busy or Dead for those answers; return self otherwise."""
        if self.status == BUSY:
            raise Busy(f"key {self.key!r} is busy", self.retry_after)
        if self.status == DEAD:
            raise Dead(f"key {self.key!r} is dead: it failed eo.max_attempts times")
        return self


def _outcome(cls: Any, conn: Any, key: str, scope: Optional[str], row: Any) -> Any:
    status, result, attempts, token, expires, now, expired, point, state = row[:9]
    retry = None
    if status == BUSY:
        retry = 1
        if expires is not None and now is not None:
            left = float(Decimal(expires) - Decimal(now))
            retry = max(1, int(-(-left // 1)))
    return cls(key=key, scope=scope, status=status, result=_sql.from_json(result), attempts=attempts,
               token=token, lease_expires_at=_sql.from_epoch(expires), retry_after=retry,
               result_expired=bool(expired),
               recovered=RecoveryPoint(point, _sql.from_json(state)) if point is not None else None,
               conn=conn)


def _claim_params(key: str, fingerprint: Optional[str], lease: Optional[_sql.Interval],
                  scope: Optional[str]) -> tuple:
    _sql.check_key(key)
    if fingerprint is not None and len(fingerprint.encode("utf-8")) > 512:
        raise InvalidArgument("the fingerprint is over 512 bytes (hash it)", "54000")
    return (key, fingerprint, _sql.interval(lease), scope)


def _wait_params(wait: Optional[float]) -> Optional[str]:
    if wait is None:
        return None
    return f"{max(1, int(wait * 1000))}ms"


class Claim(_Outcome):
    """What eo_claim answered, with the calls the holder makes next."""

    def complete(self, result: Any = None) -> None:
        """eo_complete: in transaction mode in the claiming transaction; in lease mode with the token."""
        _sql.run(self.conn, "complete", (self.key, _sql.to_json(result), self.token, self.scope))

    def fail(self, error: Optional[str] = None, *, retry_after: Optional[_sql.Interval] = None,
             sqlstate: Optional[str] = None, final: Optional[bool] = None) -> str:
        """eo_fail: 'retry', 'dead' or 'rejected'. In transaction mode call it after the
        rollback (in a new transaction), or in the claiming transaction before COMMIT."""
        row = _sql.run(self.conn, "fail", (self.key, error, self.token, _sql.interval(retry_after),
                                           self.scope, sqlstate, final))
        return row[0]  # type: ignore[index]

    def extend(self, lease: _sql.Interval) -> _dt.datetime:
        """eo_extend: renew the lease; returns the new expiry."""
        row = _sql.run(self.conn, "extend", (self.key, self.token, _sql.interval(lease), self.scope))
        self.lease_expires_at = _sql.from_epoch(row[0])  # type: ignore[index]
        return self.lease_expires_at  # type: ignore[return-value]

    def recovery_point(self, point: str, state: Any = None) -> None:
        """eo_recovery_point: record the holder's progress (in the caller's transaction)."""
        _sql.run(self.conn, "recovery_point", (self.key, self.token, point, _sql.to_json(state), self.scope))


class AsyncClaim(_Outcome):
    """Claim for psycopg 3's AsyncConnection."""

    async def complete(self, result: Any = None) -> None:
        await _sql.arun(self.conn, "complete", (self.key, _sql.to_json(result), self.token, self.scope))

    async def fail(self, error: Optional[str] = None, *, retry_after: Optional[_sql.Interval] = None,
                   sqlstate: Optional[str] = None, final: Optional[bool] = None) -> str:
        row = await _sql.arun(self.conn, "fail", (self.key, error, self.token, _sql.interval(retry_after),
                                                  self.scope, sqlstate, final))
        return row[0]  # type: ignore[index]

    async def extend(self, lease: _sql.Interval) -> _dt.datetime:
        row = await _sql.arun(self.conn, "extend", (self.key, self.token, _sql.interval(lease), self.scope))
        self.lease_expires_at = _sql.from_epoch(row[0])  # type: ignore[index]
        return self.lease_expires_at  # type: ignore[return-value]

    async def recovery_point(self, point: str, state: Any = None) -> None:
        await _sql.arun(self.conn, "recovery_point", (self.key, self.token, point, _sql.to_json(state), self.scope))


def claim(conn: Any, key: str, *, fingerprint: Optional[str] = None, lease: Optional[_sql.Interval] = None,
          scope: Optional[str] = None, wait: Optional[float] = None) -> Claim:
    """eo_claim in the caller's transaction (psycopg 3, psycopg2, a SQLAlchemy
    Connection or Session, Django's connection).

    ``wait`` bounds (in seconds) how long a claim waits for another
    transaction that holds the key: past it, Transient (55P03) is raised
    and the caller's transaction is aborted."""
    params = _claim_params(key, fingerprint, lease, scope)
    if wait is None:
        row = _sql.run(conn, "claim", params)
    else:
        row = _sql.run(conn, "claim_wait", (_wait_params(wait),) + params)
    return _outcome(Claim, conn, key, scope, row)


async def aclaim(conn: Any, key: str, *, fingerprint: Optional[str] = None, lease: Optional[_sql.Interval] = None,
                 scope: Optional[str] = None, wait: Optional[float] = None) -> AsyncClaim:
    """claim() for psycopg 3's AsyncConnection."""
    params = _claim_params(key, fingerprint, lease, scope)
    if wait is None:
        row = await _sql.arun(conn, "claim", params)
    else:
        row = await _sql.arun(conn, "claim_wait", (_wait_params(wait),) + params)
    return _outcome(AsyncClaim, conn, key, scope, row)


@dataclass(frozen=True)
class KeyStatus:
    """What eo_status answered."""

    state: str
    result: Any
    attempts: Optional[int]
    lease_token: Optional[int]
    lease_expires_at: Optional[_dt.datetime]
    last_error: Optional[str]


def _status(row: Any) -> Optional[KeyStatus]:
    if row is None or row[0] is None:      # no row, or status_wait's row of NULLs
        return None
    return KeyStatus(row[0], _sql.from_json(row[1]), row[2], row[3], _sql.from_epoch(row[4]), row[5])


def _status_call(key: str, scope: Optional[str], wait: Optional[float]) -> Tuple[str, tuple]:
    params = (_sql.check_key(key), scope)
    return ("status", params) if wait is None else ("status_wait", (_wait_params(wait),) + params)


def status(conn: Any, key: str, *, scope: Optional[str] = None, wait: Optional[float] = None) -> Optional[KeyStatus]:
    """eo_status: a key's state without claiming it, or None for a key eo does not know.

    eo_status waits for a claim of the key in flight to end; ``wait`` bounds
    that (in seconds) as for claim()."""
    return _status(_sql.run(conn, *_status_call(key, scope, wait)))


async def astatus(conn: Any, key: str, *, scope: Optional[str] = None,
                  wait: Optional[float] = None) -> Optional[KeyStatus]:
    return _status(await _sql.arun(conn, *_status_call(key, scope, wait)))


__all__ = ["Claim", "AsyncClaim", "RecoveryPoint", "KeyStatus", "claim", "aclaim", "status", "astatus",
           "EoError", "CLAIMED", "DUPLICATE", "BUSY", "DEAD"]
