"""The statements the client sends, and how it sends them.

The database's owner is not trusted (docs/security.md): she can set the
session's search_path and put functions and operators that look like eo's
or the catalog's in a schema of hers.  So every statement here names eo's
functions with eo's schema, found in pg_catalog.pg_extension, compares with
OPERATOR(pg_catalog.=), casts to pg_catalog's types, and passes every
argument of eo's functions positionally with its exact type, so that no
look-alike overload can be chosen instead (one that makes a call ambiguous
can only make it fail).  Before the first call on a connection the client
also refuses a schema where a function named like one of eo's is not eo's.
The caller's search_path is left alone: it is for the caller's own SQL.
"""
from __future__ import annotations

import datetime as _dt
import json
import weakref
from decimal import Decimal
from typing import Any, Optional, Sequence, Tuple, Union

from .errors import BadKey, NotInstalled, UnsafeSchema, translate

Interval = Union[int, float, _dt.timedelta, str]

EO_FUNCTIONS = ("eo_claim", "eo_complete", "eo_fail", "eo_extend", "eo_status", "eo_recovery_point")

FIND_EO = (
    "SELECT pg_catalog.quote_ident(n.nspname), e.extversion,"
    " (SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text FROM pg_catalog.pg_proc p"
    "   WHERE p.pronamespace OPERATOR(pg_catalog.=) n.oid"
    "   AND p.proname OPERATOR(pg_catalog.=) ANY ('{" + ",".join(EO_FUNCTIONS) + "}'::pg_catalog.name[])"
    "   AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d"
    "     WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass"
    "     AND d.objid OPERATOR(pg_catalog.=) p.oid"
    "     AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass"
    "     AND d.refobjid OPERATOR(pg_catalog.=) e.oid AND d.deptype OPERATOR(pg_catalog.=) 'e')"
    "   LIMIT 1)"
    " FROM pg_catalog.pg_extension e"
    " JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace"
    " WHERE e.extname OPERATOR(pg_catalog.=) 'eo'"
)

_EPOCH = "pg_catalog.date_part('epoch', {})::pg_catalog.numeric(20,6)"


class Statements:
    """eo's calls, with eo's schema in them."""

    def __init__(self, schema: str, version: str) -> None:
        s = schema
        self.schema = schema
        self.version = version
        recovery = version not in ("0.2.0",)
        columns = (
            "SELECT c.status, c.result::pg_catalog.text, c.attempts, c.lease_token, "
            + _EPOCH.format("c.lease_expires_at") + ", "
            + _EPOCH.format("pg_catalog.clock_timestamp()") + ", c.result_expired, "
            + ("c.recovery_point, c.recovery_state::pg_catalog.text" if recovery
               else "NULL::pg_catalog.text, NULL::pg_catalog.text"))
        self.claim = columns + f" FROM {s}.eo_claim({_CLAIM_ARGS}) c"
        self.claim_wait = _waiting(columns, f"{s}.eo_claim", _CLAIM_ARGS, "c")
        self.complete = (f"SELECT {s}.eo_complete(%s::pg_catalog.text, %s::pg_catalog.jsonb,"
                         " %s::pg_catalog.int8, %s::pg_catalog.text)")
        self.fail = (f"SELECT {s}.eo_fail(%s::pg_catalog.text, %s::pg_catalog.text, %s::pg_catalog.int8,"
                     " %s::pg_catalog.interval, %s::pg_catalog.text, %s::pg_catalog.text, %s::pg_catalog.bool)")
        self.extend = ("SELECT " + _EPOCH.format(
            f"{s}.eo_extend(%s::pg_catalog.text, %s::pg_catalog.int8, %s::pg_catalog.interval, %s::pg_catalog.text)"))
        self.recovery_point = (f"SELECT {s}.eo_recovery_point(%s::pg_catalog.text, %s::pg_catalog.int8,"
                               " %s::pg_catalog.text, %s::pg_catalog.jsonb, %s::pg_catalog.text)")
        status = ("SELECT st.state, st.result::pg_catalog.text, st.attempts, st.lease_token, "
                  + _EPOCH.format("st.lease_expires_at") + ", st.last_error")
        self.status = status + f" FROM {s}.eo_status({_STATUS_ARGS}) st"
        self.status_wait = _waiting(status, f"{s}.eo_status", _STATUS_ARGS, "st")


_CLAIM_ARGS = "%s::pg_catalog.text, %s::pg_catalog.text, %s::pg_catalog.interval, %s::pg_catalog.text"
_STATUS_ARGS = "%s::pg_catalog.text, %s::pg_catalog.text"


def _waiting(columns: str, function: str, args: str, alias: str) -> str:
    """A call of eo_claim or eo_status that waits at most the first parameter for a key in flight.

    One statement, so one round trip: w sets lock_timeout before the call
    (the key, its first argument, passes through w, so the call is joined
    after it), and the select list puts the old value back once the call
    has answered, also when eo_status has no row (the LEFT JOIN gives one of
    NULLs). An error aborts the transaction, which undoes the setting too."""
    key, rest = args.split(", ", 1)
    return (columns + ", pg_catalog.set_config('lock_timeout', w.old, true)"
            " FROM (SELECT pg_catalog.current_setting('lock_timeout') AS old,"
            " pg_catalog.set_config('lock_timeout', %s::pg_catalog.text, true) AS new OFFSET 0) w"
            f" LEFT JOIN LATERAL {function}(CASE WHEN w.new IS NOT NULL THEN {key} END, {rest}) {alias}"
            " ON true")


# --- reaching the DB-API connection under what the caller gives ------------

def dbapi_of(conn: Any) -> Any:
    """The DB-API connection under psycopg 3, psycopg2, SQLAlchemy or Django."""
    # SQLAlchemy Session: its connection (in its transaction)
    if hasattr(conn, "get_bind") and hasattr(conn, "connection") and callable(conn.connection):
        conn = conn.connection()
    # SQLAlchemy Connection: the pooled DB-API connection
    if hasattr(conn, "exec_driver_sql"):
        fairy = conn.connection
        return getattr(fairy, "dbapi_connection", None) or fairy.connection
    # Django's connection wrapper: ensure_connection, then its DB-API connection
    if hasattr(conn, "ensure_connection") and hasattr(conn, "vendor"):
        conn.ensure_connection()
        return conn.connection
    return conn


_cache: "weakref.WeakKeyDictionary[Any, Statements]" = weakref.WeakKeyDictionary()


def _statements_from_row(row: Optional[Sequence[Any]]) -> Statements:
    if row is None:
        raise NotInstalled("eo is not installed in this database: CREATE EXTENSION eo (as a superuser)")
    schema, version, stranger = row[0], row[1], row[2]
    if stranger is not None:
        raise UnsafeSchema(
            f"function {stranger} in eo's schema {schema} is not eo's (not a member of the extension):"
            " a role that can create in that schema put it beside eo's; drop it, or create eo in a"
            " schema of its own (docs/security.md)")
    if version in ("0.1.0",):
        raise NotInstalled(f"eo {version} is too old for this client (0.2.0 or later): ALTER EXTENSION eo UPDATE")
    return Statements(schema, version)


def forget(conn: Any) -> None:
    """Forget what was learnt of eo's schema on this connection."""
    _cache.pop(dbapi_of(conn), None)


def statements(raw: Any) -> Statements:
    st = _cache.get(raw)
    if st is None:
        st = _statements_from_row(_run(raw, FIND_EO, ()))
        _cache[raw] = st
    return st


def _reraise(e: Exception, claim: bool) -> None:
    """Raise eo's exception for a driver's error (or the error itself)."""
    t = translate(e, claim=claim)
    if t is None:
        raise e
    raise t from e


def _unprepared(cur: Any) -> dict:
    """execute()'s arguments that keep psycopg 3 from preparing the statement.

    psycopg 3 prepares a query by itself once it has run prepare_threshold
    times, under a name code in the session can find in
    pg_prepared_statements.  Code the client does not trust runs in the
    session (a database owner's trigger on a table the application
    writes, one a role with only TRIGGER on an outbox adds): PREPARE and
    DEALLOCATE work from PL/pgSQL, so it could put its own statement under
    that name, and every later call of eo's would run it.  Unprepared, each
    call is parsed from the client's own text.  (psycopg2 never prepares.)"""
    return {"prepare": False} if type(cur).__module__.split(".")[0] == "psycopg" else {}


def _run(raw: Any, sql: str, params: Sequence[Any], *, claim: bool = False) -> Optional[Tuple[Any, ...]]:
    cur = raw.cursor()
    try:
        cur.execute(sql, tuple(params), **_unprepared(cur))
        return cur.fetchone()
    except Exception as e:
        _reraise(e, claim)
        raise
    finally:
        cur.close()


def run(conn: Any, name: str, params: Sequence[Any]) -> Optional[Tuple[Any, ...]]:
    raw = dbapi_of(conn)
    return _run(raw, getattr(statements(raw), name), params, claim=name.startswith("claim"))


async def arun(conn: Any, name: str, params: Sequence[Any]) -> Optional[Tuple[Any, ...]]:
    """The same with psycopg 3's AsyncConnection."""
    st = _cache.get(conn)
    if st is None:
        st = _statements_from_row(await _arun(conn, FIND_EO, ()))
        _cache[conn] = st
    return await _arun(conn, getattr(st, name), params, claim=name.startswith("claim"))


async def _arun(conn: Any, sql: str, params: Sequence[Any], *, claim: bool = False) -> Optional[Tuple[Any, ...]]:
    cur = conn.cursor()
    try:
        await cur.execute(sql, tuple(params), **_unprepared(cur))
        return await cur.fetchone()
    except Exception as e:
        _reraise(e, claim)
        raise
    finally:
        await cur.close()


# --- values ----------------------------------------------------------------

def interval(v: Optional[Interval]) -> Optional[str]:
    """An interval as text PostgreSQL reads the same under every IntervalStyle."""
    if v is None:
        return None
    if isinstance(v, _dt.timedelta):
        v = v.total_seconds()
    if isinstance(v, (int, float)):
        return f"{float(v):.6f} seconds"
    return str(v)


def to_json(v: Any) -> Optional[str]:
    return None if v is None else json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def from_json(v: Any) -> Any:
    return None if v is None else json.loads(v)


def from_epoch(v: Any) -> Optional[_dt.datetime]:
    if v is None:
        return None
    return _dt.datetime.fromtimestamp(float(Decimal(v)), _dt.timezone.utc)


def check_key(key: Any) -> str:
    if key is None:
        raise BadKey("the key is missing (NULL)", "22004")
    if not isinstance(key, str):
        raise BadKey("the key must be text", "22023")
    if key == "":
        raise BadKey("the key is empty", "22023")
    if len(key.encode("utf-8")) > 512:
        raise BadKey("the key is over 512 bytes (hash it)", "54000")
    if "\x00" in key:
        raise BadKey("the key holds a NUL character", "22021")
    return key
