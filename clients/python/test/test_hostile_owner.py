"""A database owner who is not trusted: a search_path of her choosing, look-alike functions,
operators and types. The client's statements resolve only to eo's objects and the catalog's."""
import psycopg
import pytest

import eo_client as eo
from eo_client import http

EVIL = """
CREATE ROLE eo_py_evil;
CREATE SCHEMA evil AUTHORIZATION eo_py_evil;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
SET ROLE eo_py_evil;
CREATE FUNCTION evil.hijack() RETURNS boolean LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'hijacked'; END$$;
CREATE FUNCTION evil.eo_claim(key text, fingerprint text DEFAULT NULL, lease interval DEFAULT NULL,
    scope text DEFAULT NULL) RETURNS TABLE (status text) LANGUAGE sql AS $$SELECT 'duplicate' WHERE evil.hijack()$$;
CREATE FUNCTION evil.eo_complete(key text, result jsonb DEFAULT NULL, lease_token bigint DEFAULT NULL,
    scope text DEFAULT NULL) RETURNS void LANGUAGE sql AS $$SELECT WHERE evil.hijack()$$;
CREATE FUNCTION evil.eo_status(key text, scope text DEFAULT NULL) RETURNS boolean LANGUAGE sql AS $$SELECT evil.hijack()$$;
CREATE FUNCTION evil.date_part(text, timestamptz) RETURNS float8 LANGUAGE sql AS $$SELECT 0 WHERE evil.hijack()$$;
CREATE FUNCTION evil.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$SELECT '' WHERE evil.hijack()$$;
CREATE FUNCTION evil.current_setting(text) RETURNS text LANGUAGE sql AS $$SELECT '' WHERE evil.hijack()$$;
CREATE FUNCTION evil.quote_ident(text) RETURNS text LANGUAGE sql AS $$SELECT 'evil' WHERE evil.hijack()$$;
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$SELECT now() WHERE evil.hijack()$$;
CREATE FUNCTION evil.name_eq(name, name) RETURNS boolean LANGUAGE sql AS $$SELECT evil.hijack()$$;
CREATE OPERATOR evil.= (LEFTARG = name, RIGHTARG = name, FUNCTION = evil.name_eq);
CREATE DOMAIN evil.text AS pg_catalog.text CHECK (evil.hijack());
CREATE DOMAIN evil.jsonb AS pg_catalog.jsonb CHECK (evil.hijack());
CREATE DOMAIN evil.interval AS pg_catalog.interval CHECK (evil.hijack());
CREATE DOMAIN evil.int8 AS pg_catalog.int8 CHECK (evil.hijack());
RESET ROLE;
"""


@pytest.fixture
def hostile(admin, admin_dsn):
    admin.execute(EVIL)
    db = psycopg.conninfo.conninfo_to_dict(admin_dsn)["dbname"]
    admin.execute(f"ALTER ROLE eo_py_app IN DATABASE {db} SET search_path = evil, pg_catalog, public")
    yield
    admin.execute(f"ALTER ROLE eo_py_app IN DATABASE {db} RESET search_path")
    admin.execute("DROP SCHEMA evil CASCADE; DROP ROLE eo_py_evil")


def test_search_path_and_look_alikes(hostile, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SHOW search_path").fetchone()[0].startswith("evil")
        with pytest.raises(psycopg.Error):
            conn.execute("SELECT eo_claim('x')")                # unqualified: the look-alike is hit
        with conn.transaction():
            c = eo.claim(conn, "h:1", fingerprint="f", wait=1)
            assert c.claimed
            c.complete({"ok": 1})
        assert eo.claim(conn, "h:1", fingerprint="f").result == {"ok": 1}
        lease = eo.claim(conn, "h:2", lease=30)
        assert lease.claimed and lease.extend(60) is not None
        lease.recovery_point("p", {"s": 1})
        assert eo.claim(conn, "h:2", lease=30).busy
        assert lease.fail("x") == "retry"
        assert eo.status(conn, "h:1").state == "done"
        with conn.transaction():
            assert eo.apply(conn, "h:3", lambda c: 1).status == "claimed"


def test_look_alike_beside_eo(admin, dsn):
    """A function named like eo's, in eo's schema, not eo's: the client refuses the schema."""
    admin.execute("CREATE ROLE eo_py_evil2; GRANT CREATE ON SCHEMA public TO eo_py_evil2; SET ROLE eo_py_evil2;"
                  " CREATE FUNCTION public.eo_claim(key text, fingerprint text, lease interval, scope text,"
                  " extra int DEFAULT 0) RETURNS text LANGUAGE sql AS $$SELECT 'duplicate'$$; RESET ROLE")
    try:
        with psycopg.connect(dsn) as conn:
            with pytest.raises(eo.UnsafeSchema):
                eo.claim(conn, "u:1")
    finally:
        admin.execute("DROP FUNCTION public.eo_claim(text, text, interval, text, int);"
                      " REVOKE CREATE ON SCHEMA public FROM eo_py_evil2; DROP ROLE eo_py_evil2")


def test_stored_headers_never_credentials():
    o = http.Options(stored_headers={"Set-Cookie", "Authorization", "Content-Type", "X-Custom"})
    assert o.stored_headers == {"content-type", "x-custom"}
    r = http.stored(o, 201, [("Set-Cookie", "s=1"), ("Content-Type", "text/plain"), ("X-Custom", "a\r\nSet-Cookie: x")],
                    b"\xff\x00")
    assert r["headers"] == [["Content-Type", "text/plain"]] and "body_b64" in r
    # a stored result edited to carry what is never replayed: filtered on replay too
    a = http.replay(o, {"http_status": 999, "headers": [["Set-Cookie", "x"], ["X-Custom", "ok"], ["bad"]],
                        "body_b64": r["body_b64"]})
    assert a.status == 200 and a.headers == [("X-Custom", "ok"), ("Idempotent-Replayed", "true")]
    assert a.body == b"\xff\x00"
    assert http.caller_from_authorization("Bearer a") != http.caller_from_authorization("Bearer b")
    assert http.eo_key("http", "a", "bc") != http.eo_key("http", "ab", "c")
