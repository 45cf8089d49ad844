# shellcheck shell=bash
# bench/lib.sh -- helpers for bench/run.sh.  Sourced, not run.
#
# Reuses tools/lib.sh (log, die, as_root, as_pg, make_scratch, copy_repo,
# chown_scratch, free_port, stop_server, on_exit: a scratch directory under
# /tmp, a server run as user postgres, everything removed at exit) and adds
# what a benchmark needs on top: its own packages, a build from a private
# copy of the tree, and a server configured for honest timings (fsync and
# synchronous_commit on; tools/lib.sh's test server runs with fsync = off).

# shellcheck source=tools/lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tools/lib.sh"

BENCH_PACKAGES="postgresql-15 postgresql-server-dev-15 postgresql-15-pgq3
    postgresql-15-partman gnuplot-nox python3 make gcc"

# Debian packages the suite needs, as a list of the ones that are missing.
bench_missing_packages() {
    local p
    for p in $BENCH_PACKAGES; do
        dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || echo "$p"
    done
}

# postgresql-15-pgq3 provides PgQ (a contender); postgresql-15-partman 4.x is
# for the retention comparison (a TODO hook, see run.sh); gnuplot-nox draws
# the chart; python3 computes percentiles and the summary.
bench_packages() {
    local missing
    missing=$(bench_missing_packages | paste -sd' ')
    if [ -n "$missing" ]; then
        [ "$(id -u)" -eq 0 ] || die "missing packages: $missing (run as root, or install them)"
        log "installing packages: $missing"
        apt-get update
        # shellcheck disable=SC2086  # a list of package names
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
    fi
    [ -x "$PG_CONFIG" ] || die "no $PG_CONFIG after installing packages"
    PGBIN=$("$PG_CONFIG" --bindir)
    command -v gnuplot >/dev/null || die "gnuplot missing"
    command -v python3 >/dev/null || die "python3 missing"
}

# Build eo from a copy of the working tree and install it into a private
# copy of the PostgreSQL 15 installation ($EO_TMP/pginst, same layout under
# it; PostgreSQL finds its share and lib directories relative to its
# binaries).  The server runs from that copy, so an eo that someone installs
# system-wide meanwhile cannot change what is measured halfway through, and
# the system installation is left as it was.  Nothing is written into the
# repository.  BENCH_SKIP_BUILD=1 benchmarks the eo already installed in the
# system instead (copied the same way).
bench_build_install() {
    local dir root=$EO_TMP/pginst
    log "copying the PostgreSQL installation to $root"
    for dir in "$("$PG_CONFIG" --bindir)" "$("$PG_CONFIG" --pkglibdir)" \
               "$("$PG_CONFIG" --sharedir)"; do
        mkdir -p "$root$(dirname "$dir")"
        cp -a "$dir" "$root$(dirname "$dir")/"
    done
    PGBIN=$root$("$PG_CONFIG" --bindir)
    if [ "${BENCH_SKIP_BUILD:-0}" = 1 ]; then
        log "BENCH_SKIP_BUILD=1: benchmarking the installed eo"
        return 0
    fi
    log "building eo (from a copy of $REPO_ROOT) and installing it there"
    copy_repo
    make -C "$EO_TMP/src" PG_CONFIG="$PG_CONFIG" clean >/dev/null
    make -C "$EO_TMP/src" PG_CONFIG="$PG_CONFIG" >"$EO_TMP/build.log" 2>&1 ||
        { tail -n 40 "$EO_TMP/build.log" >&2; die "build failed"; }
    make -C "$EO_TMP/src" PG_CONFIG="$PG_CONFIG" DESTDIR="$root" install \
        >>"$EO_TMP/build.log" 2>&1 ||
        { tail -n 40 "$EO_TMP/build.log" >&2; die "make install failed"; }
    [ "$("$PGBIN/pg_config" --sharedir)" = "$root$("$PG_CONFIG" --sharedir)" ] ||
        die "the copied PostgreSQL does not find its own share directory"
}

# A throwaway server for benchmarking.  Durability on (fsync,
# synchronous_commit, full_page_writes: the defaults an application runs
# with); autovacuum off so that it cannot land in one run and not in
# another (run.sh vacuums between runs); checkpoints only when run.sh asks.
bench_start_server() {
    local pg=$EO_TMP/pg
    log "starting a benchmark server in $pg"
    mkdir -p "$pg/sock" && chown_scratch
    as_pg "$PGBIN/initdb" -D "$pg/data" -U postgres -A trust --locale=C -E UTF8 \
        >"$pg/initdb.log" || { cat "$pg/initdb.log" >&2; die "initdb failed"; }
    PGPORT=$(free_port)
    export PGHOST=$pg/sock PGPORT PGUSER=postgres PGDATABASE=postgres
    cat >>"$pg/data/postgresql.conf" <<EOF
# ---- bench/run.sh ----
listen_addresses = ''
unix_socket_directories = '$pg/sock'
port = $PGPORT
shared_preload_libraries = 'eo'
synchronous_commit = on
fsync = on
full_page_writes = on
shared_buffers = ${BENCH_SHARED_BUFFERS:-256MB}
max_wal_size = 8GB
min_wal_size = 1GB
checkpoint_timeout = 1h
autovacuum = off
max_connections = 50
jit = off
logging_collector = off
log_checkpoints = on
log_line_prefix = '%m [%p] %q%a '
EOF
    SERVER_UP=1
    as_pg "$PGBIN/pg_ctl" -D "$pg/data" -l "$pg/server.log" -w -t 60 start >/dev/null ||
        die "server did not start"
    case $("$PGBIN/psql" -X -A -t -d postgres -c \
            "SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'") in
        "$EO_TMP"/*) ;;
        *) die "the server does not load its libraries from $EO_TMP" ;;
    esac
}

# psql as postgres against the bench server, unaligned, tuples only.
bq() { "$PGBIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -d "${BENCH_DB:-bench}" "$@"; }
