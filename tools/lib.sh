# shellcheck shell=bash
# tools/lib.sh -- shared helpers for tools/test.sh and tools/demo.sh.
# Sourced, not run.  Callers have already done `set -euo pipefail`.
#
# Set EO_PG_MAJOR to use another major version of the Debian (apt.postgresql.org
# layout) packages (default 15; tools/matrix.sh runs 15, 17 and 18), or
# PG_CONFIG to use another installation; set EO_KEEP=1 to keep the scratch
# directory (repo copy, data directory, logs) for debugging.

EO_PG_MAJOR=${EO_PG_MAJOR:-15}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$EO_PG_MAJOR/bin/pg_config}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUN_USER=postgres          # the Debian packages create it; initdb refuses root
EO_TMP=""                  # scratch dir: src/ (repo copy), pg/ (cluster)
PGBIN=""

log() { printf '\n== %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The Debian packages that provide all of it.
# libnats-dev (the NATS C client) builds eo_nats, nats-server runs its test;
# python3-psycopg (psycopg 3) runs the Python examples of docs/ (test/python),
# python3-psycopg2 a far standby (test/tools/far_standby.py, replication
# protocol, which psycopg 3 lacks);
# pg_auto_failover (pg_autoctl, and the monitor's extension for this major)
# runs the HA test (test/t/130_ha_auto_failover.pl).
PACKAGES="postgresql-$EO_PG_MAJOR postgresql-server-dev-$EO_PG_MAJOR libipc-run-perl make gcc pkg-config libnats-dev nats-server python3 python3-psycopg python3-psycopg2 postgresql-$EO_PG_MAJOR-auto-failover pg-auto-failover-cli"

# Everything a fresh Debian 12 machine lacks to build and test the extension.
missing_tools() {
    [ -x "$PG_CONFIG" ] || echo pg_config
    command -v make >/dev/null || echo make
    command -v gcc >/dev/null || echo gcc
    command -v prove >/dev/null || echo prove
    perl -MIPC::Run -e1 2>/dev/null || echo IPC::Run
    [ -x "$PG_CONFIG" ] && [ -x "$("$PG_CONFIG" --bindir)/pgbench" ] || echo pgbench
    pkg-config --exists libnats 2>/dev/null || echo libnats
    command -v nats-server >/dev/null || echo nats-server
    # the system's python3 (test/t/041 runs it), not one of pyenv's first on PATH
    "${EO_PYTHON:-/usr/bin/python3}" -c 'import psycopg' 2>/dev/null || echo python3-psycopg
    "${EO_PYTHON:-/usr/bin/python3}" -c 'import psycopg2.extras' 2>/dev/null || echo python3-psycopg2
    command -v pg_autoctl >/dev/null || echo pg_autoctl
    [ -x "$PG_CONFIG" ] && [ -f "$("$PG_CONFIG" --sharedir)/extension/pgautofailover.control" ] ||
        echo pgautofailover
}

ensure_packages() {
    local missing
    missing=$(missing_tools | paste -sd' ')
    if [ -n "$missing" ]; then
        [ "$(id -u)" -eq 0 ] ||
            die "missing: $missing; as root run: apt-get install $PACKAGES"
        log "installing packages (missing: $missing; apt output in /tmp/eo-apt.log)"
        # postgresql-N also ships pgbench and the contrib modules.
        # shellcheck disable=SC2086  # a list of names
        { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $PACKAGES; } \
            >/tmp/eo-apt.log 2>&1 || { cat /tmp/eo-apt.log >&2; die "apt-get failed"; }
        missing=$(missing_tools | paste -sd' ')
        [ -z "$missing" ] || die "still missing after apt-get: $missing"
    fi
    PGBIN=$("$PG_CONFIG" --bindir)
}

# Root when we are root, else sudo: `make install` writes into the system
# PostgreSQL's lib and share directories.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root for: $*"
    fi
}

# The compiler's output goes to a log, shown only if the build fails: a
# newcomer running the demo should see the scenario, not the build.
build_install() {
    local out
    out=$(mktemp /tmp/eo-build.XXXXXX.log)
    log "building and installing eo (output in $out)"
    if ! { make -C "$REPO_ROOT" PG_CONFIG="$PG_CONFIG" &&
           as_root make -C "$REPO_ROOT" PG_CONFIG="$PG_CONFIG" install; } >"$out" 2>&1; then
        cat "$out" >&2
        die "build or install failed"
    fi
}

# Run a command as the unprivileged user that owns the scratch tree, with the
# PostgreSQL binaries first on PATH (runuser would otherwise reset PATH).
as_pg() {
    local path="$PGBIN:$PATH"
    if [ "$(id -u)" -eq 0 ]; then
        # from a directory the run user cannot enter (a clone under /root),
        # its programs would complain at every start: run them from /
        if runuser -u "$RUN_USER" -- test -x "$PWD" 2>/dev/null; then
            runuser -u "$RUN_USER" -- env PATH="$path" "$@"
        else
            (cd / && runuser -u "$RUN_USER" -- env PATH="$path" "$@")
        fi
    else
        env PATH="$path" "$@"
    fi
}

# One scratch dir for everything, removed by the EXIT trap.
make_scratch() {
    EO_TMP=$(mktemp -d /tmp/eo-test.XXXXXX)
    mkdir -p "$EO_TMP/src" "$EO_TMP/pg"
    trap on_exit EXIT
    trap 'exit 130' INT TERM   # turn signals into EXIT so cleanup runs
}

# pg_regress and prove write results/, output_iso/ and tmp_check/ into the
# tree they run in, as the run user: give them a private copy, not the repo.
copy_repo() {
    tar -C "$REPO_ROOT" --exclude=.git --exclude=results --exclude=output_iso \
        --exclude=tmp_check --exclude=log -cf - . | tar -C "$EO_TMP/src" -xf -
}

# Hand the scratch tree to the run user (only possible, and needed, as root).
chown_scratch() {
    [ "$(id -u)" -ne 0 ] || chown -R "$RUN_USER": "$EO_TMP"
}

# First TCP port from 54320 up that nothing on localhost listens on.  The
# server itself only uses a Unix socket in our scratch dir, so this just
# keeps us clear of clusters and tests that do use TCP.
free_port() {
    local port
    for port in $(seq 54320 54420); do
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"; return 0
        fi
    done
    die "no free port in 54320..54420"
}

start_server() {
    local pg=$EO_TMP/pg
    log "starting a scratch server in $pg"
    mkdir -p "$pg/sock" && chown_scratch
    as_pg initdb -D "$pg/data" -U postgres -A trust --locale=C -E UTF8 >"$pg/initdb.log" ||
        { cat "$pg/initdb.log" >&2; die "initdb failed"; }
    export PGHOST=$pg/sock PGPORT PGUSER=postgres PGDATABASE=postgres
    PGPORT=$(free_port)
    cat >>"$pg/data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$pg/sock'
port = $PGPORT
shared_preload_libraries = 'eo'
max_worker_processes = 16     # as the README's install steps say
max_prepared_transactions = 10
eo.naptime = 3600           # the worker's own tests (TAP) use their own nodes
fsync = off                  # test data: speed over durability
logging_collector = off
log_line_prefix = '%m [%p] %q%a '
EOF
    SERVER_UP=1   # before the start: a half-started server must be stopped too
    as_pg pg_ctl -D "$pg/data" -l "$pg/server.log" -w -t 60 start >/dev/null ||
        die "server did not start"
}

stop_server() {
    [ "${SERVER_UP:-0}" = 1 ] || return 0
    as_pg pg_ctl -D "$EO_TMP/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
    SERVER_UP=0
}

# Once per run: the end of the server log, for whoever reads a failure.
show_server_log() {
    [ -z "${LOG_SHOWN:-}" ] && [ -f "$EO_TMP/pg/server.log" ] || return 0
    LOG_SHOWN=1
    log "last lines of the server log ($EO_TMP/pg/server.log)"
    tail -n 40 "$EO_TMP/pg/server.log"
}

# EXIT trap: stop our server, show its log if we failed, remove the scratch.
on_exit() {
    local rc=$?
    stop_server
    [ "$rc" -eq 0 ] || show_server_log
    if [ "${EO_KEEP:-0}" = 1 ]; then
        echo "kept $EO_TMP" >&2
    elif [ -n "$EO_TMP" ]; then
        rm -rf "$EO_TMP"
    fi
    exit "$rc"
}

# psql as the run user against the scratch server; stops at the first error.
run_psql() {
    as_pg psql -X -v ON_ERROR_STOP=1 "$@"
}
