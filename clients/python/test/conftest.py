"""A database with eo for the tests, on the server PGHOST/PGPORT/PGUSER (a superuser)
names; the tests connect as the ordinary role eo_py_app, granted what docs/security.md says."""
import os
import sys

import psycopg
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

DB = os.environ.get("EO_PY_TEST_DB", "eo_py_test")
APP = "eo_py_app"
OTHER = "eo_py_other"


def _dsn(db, user=None):
    parts = [f"dbname={db}"]
    for env, kw in (("PGHOST", "host"), ("PGPORT", "port")):
        if os.environ.get(env):
            parts.append(f"{kw}={os.environ[env]}")
    parts.append(f"user={user or os.environ.get('PGUSER', 'postgres')}")
    return " ".join(parts)


GRANTS = """
GRANT USAGE ON SCHEMA public TO {r};
GRANT EXECUTE ON FUNCTION eo_claim, eo_complete, eo_fail, eo_extend, eo_status, eo_recovery_point TO {r};
"""


@pytest.fixture(scope="session")
def admin_dsn():
    with psycopg.connect(_dsn("postgres"), autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {DB}")
        for r in (APP, OTHER):
            if c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (r,)).fetchone() is None:
                c.execute(f"CREATE ROLE {r} LOGIN")
    dsn = _dsn(DB)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION eo")
        for r in (APP, OTHER):
            c.execute(GRANTS.format(r=r))
        c.execute("GRANT EXECUTE ON FUNCTION eo_scope_create TO " + APP)
        c.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL, qty int NOT NULL CHECK (qty > 0))")
        c.execute("CREATE TABLE payments (event_id text PRIMARY KEY, amount int NOT NULL)")
        c.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON orders, payments TO {APP}, {OTHER}")
        c.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {APP}, {OTHER}")
    return dsn


@pytest.fixture(scope="session")
def dsn(admin_dsn):
    return _dsn(DB, APP)


@pytest.fixture(scope="session")
def other_dsn(admin_dsn):
    return _dsn(DB, OTHER)


@pytest.fixture
def conn(dsn):
    with psycopg.connect(dsn) as c:
        yield c


@pytest.fixture
def aconn_dsn(dsn):
    return dsn


@pytest.fixture
def admin(admin_dsn):
    with psycopg.connect(admin_dsn, autocommit=True) as c:
        yield c


@pytest.fixture(autouse=True)
def _clean(request, admin_dsn):
    import uuid
    import scenarios
    scenarios.RUN[0] = uuid.uuid4().hex[:8]
    yield
    with psycopg.connect(admin_dsn, autocommit=True) as c:
        c.execute("TRUNCATE orders, payments RESTART IDENTITY")
