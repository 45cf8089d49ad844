"""eo's SQLSTATEs as exception classes, so that no caller matches strings."""
from __future__ import annotations

from typing import Any, Optional


class EoError(Exception):
    """An error eo raised (``sqlstate`` set) or the client found (``sqlstate`` None)."""

    sqlstate: Optional[str] = None

    def __init__(self, message: str, sqlstate: Optional[str] = None, *, detail: Optional[str] = None,
                 cause: Optional[BaseException] = None) -> None:
        super().__init__(message)
        self.message = message
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.detail = detail
        self.cause = cause


class InvalidArgument(EoError):
    """22004 (NULL), 22023 (empty, out of range), 54000 (over eo's size limit)."""


class BadKey(InvalidArgument):
    """The key is missing, empty or over 512 bytes (refused before it is sent)."""


class FingerprintMismatch(EoError):
    """22000: the key was used before with a different fingerprint (HTTP 422)."""

    sqlstate = "22000"


class PermissionDenied(EoError):
    """42501: the key or scope belongs to a role the caller is not a member of."""

    sqlstate = "42501"


class NotHeld(EoError):
    """55000: complete/fail/extend of a key this transaction or token does not hold."""

    sqlstate = "55000"


class StaleToken(EoError):
    """55006: the lease token is stale (the lease expired and was taken over).

    Also raised by the client itself once its heartbeat learned that the
    token is stale: the holder must stop and store nothing."""

    sqlstate = "55006"


class Transient(EoError):
    """40001, 40P01, 55P03, 57014: a lost race, a deadlock, a lock or statement
    timeout; retry the whole transaction with the same key (HTTP 503, or 409
    for a claim that waited for a request still in flight)."""


class ReadOnly(EoError):
    """25006: a write in a read-only transaction or on a standby."""

    sqlstate = "25006"


class UndefinedObject(EoError):
    """42704: the scope (or outbox, group) does not exist; or eo is not installed."""

    sqlstate = "42704"


class NotInstalled(EoError):
    """eo is not installed in this database (or is older than 0.2.0)."""


class UnsafeSchema(EoError):
    """A function named like one of eo's sits in eo's schema and is not eo's:
    someone who can create there put it beside eo's. The client refuses to
    call anything in that schema."""


class Rejected(EoError):
    """A claim of a rejected key (a final failure recorded with eo_fail):
    eo raised the error the key failed with again; ``sqlstate`` and
    ``message`` are that error's."""


class Busy(EoError):
    """The claim answered ``busy``: another holder's lease is live, or a retry
    is not due yet. ``retry_after`` is in seconds (at least 1)."""

    def __init__(self, message: str, retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Dead(EoError):
    """The claim answered ``dead``: the key failed eo.max_attempts times."""


_BY_SQLSTATE = {
    "22004": InvalidArgument, "22023": InvalidArgument, "54000": InvalidArgument,
    "22000": FingerprintMismatch, "42501": PermissionDenied, "55000": NotHeld,
    "55006": StaleToken, "40001": Transient, "40P01": Transient, "55P03": Transient,
    "57014": Transient, "25006": ReadOnly, "42704": UndefinedObject,
}

# What eo_claim itself raises; any other SQLSTATE from a claim is a rejected
# key's error, replayed.  (A key rejected with one of these SQLSTATEs cannot
# be told from eo's own error by its SQLSTATE: it maps as eo's own.)
_CLAIM_OWN = set(_BY_SQLSTATE) | {"42883", "42P01", "XX000", "53100", "53200", "53300"}


def sqlstate_of(exc: BaseException) -> Optional[str]:
    """The SQLSTATE of a driver's exception (psycopg 3, psycopg2, wrapped by
    Django or SQLAlchemy), or None."""
    seen = 0
    e: Optional[BaseException] = exc
    while e is not None and seen < 5:
        for attr in ("sqlstate", "pgcode"):
            v = getattr(e, attr, None)
            if isinstance(v, str) and len(v) == 5:
                return v
        e = getattr(e, "orig", None) or e.__cause__
        seen += 1
    return None


def _diag(exc: BaseException, field: str) -> Optional[str]:
    e: Any = exc
    for _ in range(5):
        if e is None:
            return None
        d = getattr(e, "diag", None)
        if d is not None and getattr(d, field, None):
            return str(getattr(d, field))
        e = getattr(e, "orig", None) or e.__cause__
    return None


def translate(exc: BaseException, *, claim: bool = False) -> Optional[EoError]:
    """The eo exception for a driver's exception, or None if it carries no SQLSTATE."""
    state = sqlstate_of(exc)
    if state is None:
        return None
    text = str(exc).strip()
    message = _diag(exc, "message_primary") or (text.splitlines()[0] if text else state)
    detail = _diag(exc, "message_detail")
    if claim and state not in _CLAIM_OWN and not state.startswith("08"):
        return Rejected(message, state, detail=detail, cause=exc)
    cls = _BY_SQLSTATE.get(state, EoError)
    return cls(message, state, detail=detail, cause=exc)
