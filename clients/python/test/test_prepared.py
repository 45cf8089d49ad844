"""Code run in the application's session (a database owner's trigger on a table the
application writes to) looks for prepared statements that call eo and replaces them.
psycopg 3 prepares a query by itself after prepare_threshold (5) executions; the client
runs eo's statements unprepared, so there is none to replace."""
import psycopg
import pytest

import eo_client as eo

OWNER = """
CREATE ROLE eo_py_owner3;
CREATE SCHEMA own AUTHORIZATION eo_py_owner3;
GRANT USAGE ON SCHEMA own TO PUBLIC;
SET ROLE eo_py_owner3;
CREATE TABLE own.audit (what text);
GRANT INSERT ON own.audit TO PUBLIC;
CREATE FUNCTION own.plant() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE r record;
BEGIN
  FOR r IN SELECT name, statement FROM pg_catalog.pg_prepared_statements LOOP
    IF r.statement LIKE '%eo_status(%' AND r.statement LIKE '%lock_timeout%' THEN
      EXECUTE format('DEALLOCATE %I', r.name);
      EXECUTE format($p$PREPARE %I (text, text, text) AS SELECT 'done'::text,
          '{"http_status":200,"body":"forged"}'::text, 1, NULL::int8, NULL::numeric, NULL::text, '0'::text$p$,
        r.name);
    END IF;
  END LOOP;
  RETURN NEW;
END $f$;
CREATE TRIGGER plant BEFORE INSERT ON own.audit FOR EACH ROW EXECUTE FUNCTION own.plant();
RESET ROLE;
"""


@pytest.fixture
def owner(admin):
    admin.execute(OWNER)
    yield
    admin.execute("DROP SCHEMA own CASCADE; DROP OWNED BY eo_py_owner3; DROP ROLE eo_py_owner3")


def test_no_prepared_statement_of_eo_to_take_over(owner, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            c = eo.claim(conn, "pp:real", fingerprint="f")
            c.complete({"real": True})
        for _ in range(6):                      # psycopg prepares it from the 6th execution on
            eo.status(conn, "pp:real", wait=1)
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%eo_status(%'"
                            ).fetchone()[0] == 0
        conn.execute("INSERT INTO own.audit VALUES ('x')")       # the app's own SQL; the owner's trigger
        st = eo.status(conn, "pp:never-claimed", wait=1)
        assert st is None, "eo_status on this connection now answers the owner's row"


from test_hostile_owner import hostile  # noqa: E402,F401  (evil search_path and look-alikes of set_config, current_setting, types)


def test_status_wait_and_claim_wait_under_hostile_search_path(hostile, dsn):  # noqa: F811
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '7s'")
        assert eo.status(conn, "hw:none", wait=1) is None
        with conn.transaction():
            c = eo.claim(conn, "hw:1", fingerprint="f", wait=1)
            assert c.claimed
            assert conn.execute("SHOW lock_timeout").fetchone()[0] == "7s"
            assert eo.status(conn, "hw:1", wait=1).state == "processing"
            assert conn.execute("SHOW lock_timeout").fetchone()[0] == "7s"
            c.complete({"ok": 1})
        st = eo.status(conn, "hw:1", wait=1)
        assert st.state == "done" and st.result == {"ok": 1}
        assert conn.execute("SHOW lock_timeout").fetchone()[0] == "7s"
        for _ in range(7):       # also once psycopg has prepared them
            eo.status(conn, "hw:1", wait=1)
            with conn.transaction():
                assert eo.claim(conn, "hw:1", fingerprint="f", wait=1).status == "duplicate"
        assert conn.execute("SHOW lock_timeout").fetchone()[0] == "7s"
