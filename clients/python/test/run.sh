#!/bin/sh
# clients/python/test/run.sh -- the Python client's tests.
# Needs PGHOST, PGPORT, PGUSER naming a superuser of a server with eo installed
# (shared_preload_libraries is not needed); makes the database eo_py_test (dropped
# first) and the roles eo_py_app, eo_py_other. No network: Debian's python3-django,
# -flask, -fastapi, -starlette, -httpx, -psycopg, -psycopg2, -sqlalchemy, uvicorn, pytest.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
: "${PGHOST:?PGHOST must name the server (a socket directory or host)}"
: "${PGPORT:?PGPORT must name the port of the server}"
: "${PGUSER:?PGUSER must name a superuser}"
export PGHOST PGPORT PGUSER
cd "$here"
[ $# -gt 0 ] || set -- .
exec "${EO_PYTHON:-/usr/bin/python3}" -m pytest -q -p no:cacheprovider "$@"
