#!/usr/bin/env bash
# tools/clients.sh -- the Python and Node clients' tests (clients/python and
# clients/node, each run by its test/run.sh) against a scratch PostgreSQL 15
# server with eo, on the host: the real frameworks (Debian's Django, Flask,
# FastAPI/Starlette; the npm registry's Express and Fastify) against a real
# server.  Installs what is missing (as root), builds and installs eo like
# tools/test.sh.  Ends with "N passed, M failed"; exits 1 if any failed.
set -euo pipefail
# shellcheck source=tools/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Debian's packages the Python client's tests run with.
PY_PACKAGES="python3-django python3-flask python3-fastapi python3-starlette python3-httpx python3-psycopg python3-psycopg2 python3-sqlalchemy python3-uvicorn python3-pytest python3-setuptools python3-pip"
PY_MODULES="django flask fastapi starlette httpx psycopg psycopg2 sqlalchemy uvicorn pytest setuptools pip"

ensure_client_tools() {
    local m missing=""
    for m in $PY_MODULES; do
        /usr/bin/python3 -c "import $m" 2>/dev/null || missing+=" $m"
    done
    command -v npm >/dev/null || die "npm is missing: the Node client needs node >= 20 and npm"
    [ -n "$missing" ] || return 0
    [ "$(id -u)" -eq 0 ] || die "missing Python modules:$missing; as root run: apt-get install $PY_PACKAGES"
    log "installing Python packages (missing:$missing)"
    # shellcheck disable=SC2086  # a list of names
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $PY_PACKAGES; } \
        >"$EO_TMP/apt.log" 2>&1 || { cat "$EO_TMP/apt.log" >&2; die "apt-get failed"; }
}

PASSED=0 FAILED=0
run_client() {
    log "clients/$1"
    if (cd "$EO_TMP/src/clients/$1" && ./test/run.sh); then PASSED=$((PASSED + 1))
    else FAILED=$((FAILED + 1)); fi
}

main() {
    ensure_packages
    make_scratch
    ensure_client_tools
    build_install
    copy_repo
    start_server
    run_client python
    run_client node
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}

main "$@"
