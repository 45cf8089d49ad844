"""The Idempotency-Key semantics, shared by the Django, Flask and Starlette middleware.

A request with the key (by default on POST and PATCH) is claimed in the
transaction of the request, as the first statement, under an eo key that
is a hash of the caller's identity and the client's key; the handler runs
in that same transaction; the response (status, allow-listed headers,
body) is stored with eo_complete and the transaction commits before the
response is sent. A retry gets the stored response again with
``Idempotent-Replayed: true``. See docs/python.md for every decision.
"""
from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, List, Mapping, Optional, Tuple, Union

from .claims import KeyStatus, _Outcome
from .errors import EoError, FingerprintMismatch, InvalidArgument, Rejected, Transient

Headers = List[Tuple[str, str]]

# Response headers a replay may carry: they describe the representation.
DEFAULT_STORED_HEADERS = frozenset({
    "content-type", "content-language", "content-location", "location", "etag", "last-modified",
    "cache-control", "expires", "link", "vary",
})
# Never stored, whatever the allow-list says: credentials, cookies, and what the connection decides.
NEVER_STORED = frozenset({
    "set-cookie", "set-cookie2", "authorization", "proxy-authorization", "www-authenticate",
    "proxy-authenticate", "cookie", "connection", "keep-alive", "transfer-encoding", "upgrade", "te",
    "trailer", "content-length", "idempotent-replayed", "proxy-connection",
})


def default_fingerprint(method: str, path: str, body: bytes) -> str:
    """sha256 of the method, the path with its query string, and the body."""
    h = hashlib.sha256()
    for part in (method.encode(), path.encode("utf-8", "surrogateescape"), body):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def caller_from_authorization(authorization: Optional[str]) -> Optional[str]:
    """A caller named by its credentials: a hash of the Authorization header."""
    if not authorization:
        return None
    return "auth:" + hashlib.sha256(authorization.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass
class Options:
    """The middleware's settings (the same for every framework)."""

    caller: Optional[Callable[[Any], Optional[str]]] = None   # request -> caller id; None: the framework's default
    header: str = "Idempotency-Key"
    methods: frozenset = frozenset({"POST", "PATCH"})
    required: bool = True            # a request without the key: 400 (False: no idempotency, the handler runs)
    fingerprint: Callable[[str, str, bytes], str] = default_fingerprint
    prefix: str = "http"             # the eo key is prefix:sha256(caller, key)
    eo_scope: Optional[str] = None   # eo's scope the keys are claimed in (eo_scope_create), if any
    stored_headers: frozenset = DEFAULT_STORED_HEADERS
    max_key_length: int = 255        # longer: 400
    max_body: int = 1 << 20          # a request body with a key over this: 413, nothing claimed
    max_stored: int = 512 << 10      # a response that would store more: rolled back, 500
    wait: Optional[float] = 2.0      # how long a claim waits for the same key in flight before 409
    retry_after: int = 1             # Retry-After of a 409 when eo gives no lease end
    # answers that say nothing was done for good: not stored, rolled back, the key released (as 5xx)
    released: frozenset = frozenset({401, 403, 408, 425, 429})

    def __post_init__(self) -> None:
        self.methods = frozenset(m.upper() for m in self.methods)
        self.stored_headers = frozenset(h.lower() for h in self.stored_headers) - NEVER_STORED


def releases(o: Options, status: int) -> bool:
    """Whether an answer of the handler is rolled back and not stored: 5xx and ``released``."""
    return status >= 500 or status in o.released


@dataclass
class Answer:
    """A response the middleware gives instead of the handler's."""

    status: int
    headers: Headers = field(default_factory=list)
    body: bytes = b""


def error(status: int, message: str, headers: Optional[Headers] = None) -> Answer:
    body = json.dumps({"error": message}).encode()
    return Answer(status, [("Content-Type", "application/json")] + (headers or []), body)


@dataclass
class Prepared:
    key: str          # the eo key: prefix:hash(caller, client's key)
    fingerprint: str


def _client_key(raw: str, o: Options) -> Union[str, Answer]:
    key = raw.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':     # the draft's sf-string form
        key = key[1:-1]
    if not key:
        return error(400, f"the {o.header} header is empty")
    if len(key) > o.max_key_length:
        return error(400, f"the {o.header} header is longer than {o.max_key_length} characters")
    if any(not (0x20 <= ord(ch) <= 0x7E) for ch in key):
        return error(400, f"the {o.header} header holds characters other than printable ASCII")
    return key


def eo_key(prefix: str, caller: str, key: str) -> str:
    """One caller's key can never be another's: both go into the hash, each with its length."""
    h = hashlib.sha256()
    for part in (caller.encode("utf-8", "surrogateescape"), key.encode()):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return f"{prefix}:{h.hexdigest()}"


def prepare(o: Options, method: str, path: str, key_header: Optional[str], caller: Optional[str],
            content_length: Optional[str], body: bytes) -> Union[None, Prepared, Answer]:
    """None: not an idempotent request, run the handler as usual; an Answer: give it; else claim."""
    if method.upper() not in o.methods:
        return None
    if key_header is None:
        return error(400, f"this request needs an {o.header} header") if o.required else None
    key = _client_key(key_header, o)
    if isinstance(key, Answer):
        return key
    if caller is None:
        return error(401, f"an {o.header} request needs an identified caller")
    if content_length is not None:
        try:
            expected = int(content_length)
        except ValueError:
            return error(400, "Content-Length is not a number")
        if expected > o.max_body:
            return error(413, f"a request with an {o.header} may have a body of {o.max_body} bytes at most")
        if len(body) != expected:
            return error(400, "the request body is incomplete")
    if len(body) > o.max_body:
        return error(413, f"a request with an {o.header} may have a body of {o.max_body} bytes at most")
    return Prepared(eo_key(o.prefix, caller, key), o.fingerprint(method.upper(), path, body))


def _header_ok(name: str, value: str) -> bool:
    return not any(c in value for c in "\r\n\x00") and not any(c in name for c in "\r\n\x00: ")


def stored(o: Options, status: int, headers: Iterable[Tuple[str, str]], body: bytes,
           fingerprint: Optional[str] = None) -> Union[dict, Answer]:
    """The result eo_complete stores for a response, or the 500 to give if it is too big to store.

    The request's fingerprint goes with it, for replay_done."""
    kept = [[n, v] for n, v in headers if n.lower() in o.stored_headers and _header_ok(n, v)]
    result: dict = {"http_status": status, "headers": kept}
    if fingerprint is not None:
        result["request_fingerprint"] = fingerprint
    try:
        result["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        result["body_b64"] = base64.b64encode(body).decode()
    if len(json.dumps(result, ensure_ascii=False).encode()) > o.max_stored:
        return error(500, f"the response is too large to store for a replay (over {o.max_stored} bytes):"
                          " nothing was done; answer less, or answer without an Idempotency-Key")
    return result


def replay(o: Options, result: Any) -> Answer:
    """The stored response again, with Idempotent-Replayed: true."""
    if not isinstance(result, Mapping):
        result = {}
    status = result.get("http_status")
    if not isinstance(status, int) or not 100 <= status <= 599:
        status = 200
    headers: Headers = []
    for pair in result.get("headers") or []:
        if (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)
                and pair[0].lower() in o.stored_headers and _header_ok(pair[0], pair[1])):
            headers.append((pair[0], pair[1]))
    if isinstance(result.get("body"), str):
        body = result["body"].encode("utf-8")
    elif isinstance(result.get("body_b64"), str):
        body = base64.b64decode(result["body_b64"])
    else:
        body = b""
    return Answer(status, headers + [("Idempotent-Replayed", "true")], body)


def replay_done(o: Options, prep: Prepared, st: Optional[KeyStatus]) -> Optional[Answer]:
    """The replay, if eo_status found the key done with a response stored for this very request.

    A retry is answered from one eo_status outside any transaction, as a
    processed-keys table answers it from one SELECT. Anything else (no key,
    in flight, failed, dead, a result gone or stored by an older client, or
    another request's fingerprint) goes to the claim, which decides."""
    if st is None or st.state != "done" or not isinstance(st.result, Mapping):
        return None
    if st.result.get("request_fingerprint") != prep.fingerprint:
        return None
    return replay(o, st.result)


def answer_for(o: Options, claim: _Outcome) -> Optional[Answer]:
    """None for ``claimed`` (run the handler); else what to answer."""
    if claim.status == "claimed":
        return None
    if claim.status == "duplicate":
        return replay(o, claim.result)
    if claim.status == "busy":
        return error(409, "a request with this Idempotency-Key is being processed",
                     [("Retry-After", str(claim.retry_after or o.retry_after))])
    return error(410, "the request with this Idempotency-Key failed for good; send it with a new key")


def answer_for_error(o: Options, e: EoError) -> Optional[Answer]:
    """What to answer for an error of the claim; None: not the key's (let it raise)."""
    if isinstance(e, FingerprintMismatch):
        return error(422, "this Idempotency-Key was used with a different request")
    if isinstance(e, Transient):
        if e.sqlstate == "55P03":       # waited o.wait for the same key in flight
            return error(409, "a request with this Idempotency-Key is being processed",
                         [("Retry-After", str(o.retry_after))])
        return error(503, "try again with the same Idempotency-Key", [("Retry-After", str(o.retry_after))])
    if isinstance(e, Rejected):
        return error(422, e.message)
    if isinstance(e, InvalidArgument):
        return error(400, e.message)
    return None
