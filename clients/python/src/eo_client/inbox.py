"""eo as the inbox of a consumer: apply a message (or a batch) once."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Optional, Tuple

from .claims import Claim, claim
from .errors import EoError, Rejected, sqlstate_of


@dataclass
class Applied:
    """What became of one message: ``status`` is eo's answer (``claimed``:
    the handler ran; ``duplicate``: done before, nothing ran; ``busy``: do
    not acknowledge, it comes again; ``dead``: dead-letter it), ``value``
    what the handler returned. Acknowledge every message whose status is
    not ``busy``, after COMMIT."""

    event_id: str
    status: str
    value: Any = None
    claim: Optional[Claim] = None

    @property
    def ack(self) -> bool:
        return self.status != "busy"


def apply(conn: Any, event_id: str, handler: Callable[[Claim], Any], *, scope: Optional[str] = None,
          fingerprint: Optional[str] = None) -> Applied:
    """Claim ``event_id`` (in ``scope``) in the caller's transaction and, if
    claimed, run ``handler(claim)`` in it. COMMIT, then acknowledge."""
    c = claim(conn, event_id, fingerprint=fingerprint, scope=scope)
    if not c.claimed:
        return Applied(event_id, c.status, None, c)
    return Applied(event_id, c.status, handler(c), c)


def apply_batch(conn: Any, messages: Iterable[Tuple[str, Any]], handler: Callable[[Claim, Any], Any], *,
                scope: Optional[str] = None) -> List[Applied]:
    """Apply ``(event_id, payload)`` messages in the caller's one transaction,
    claimed in the order of their ids (two batches claiming in opposite
    orders could deadlock). A message that appears twice is done once: its
    second claim answers ``duplicate``. The results come in the messages'
    order. A rejected key raises Rejected (the transaction is aborted:
    roll back and apply the batch one message at a time)."""
    msgs = list(messages)
    order = sorted(range(len(msgs)), key=lambda i: msgs[i][0])
    out: List[Optional[Applied]] = [None] * len(msgs)
    for i in order:
        event_id, payload = msgs[i]
        c = claim(conn, event_id, scope=scope)
        out[i] = Applied(event_id, c.status, handler(c, payload) if c.claimed else None, c)
    return [a for a in out if a is not None]


def record_failure(conn: Any, event_id: str, exc: BaseException, *, scope: Optional[str] = None,
                   retry_after: Any = None) -> str:
    """After the message's transaction rolled back: eo_fail with the error's
    SQLSTATE (final ones, per eo.final_sqlstates, make the key rejected).
    ``conn`` must be in a new transaction (or autocommit). Returns 'retry',
    'dead' or 'rejected'."""
    c = Claim(key=event_id, scope=scope, status="claimed", conn=conn)
    state = exc.sqlstate if isinstance(exc, EoError) and not isinstance(exc, Rejected) else sqlstate_of(exc)
    return c.fail(f"{type(exc).__name__}: {exc}"[:4000], retry_after=retry_after, sqlstate=state)
