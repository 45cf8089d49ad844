#!/usr/bin/env bash
# bench/http.sh -- the Idempotency-Key middleware of the clients (issue 38)
# against the same handler bare and hand-written with a processed-keys
# table, through real HTTP servers on loopback.
#
# Usage, as root, from a clone of the repository:
#
#     bash bench/http.sh      (about 10 minutes at the defaults: 556 s on 2 cores)
#
# Builds the working tree into a private copy of the PostgreSQL
# installation and starts a throwaway server as bench/run.sh does (fsync
# and synchronous_commit on, autovacuum off, eo preloaded; eo.naptime =
# 3600 as bench/ab.sh: no maintenance pass lands in a run). The
# applications connect to it as bench_app over its Unix socket.
#
# Two stacks, each as users run it: FastAPI under uvicorn (one worker,
# uvloop and httptools, Debian's python3-fastapi 0.92 and python3-uvicorn;
# eo_client.starlette.IdempotencyKeyMiddleware on a psycopg_pool
# AsyncConnectionPool) and Express 5 on node (expressIdempotency on a pg
# Pool; express and pg from clients/node's package-lock.json, npm ci into
# the scratch directory). Per stack three servers of the same kind, one
# per contender (bench/http/fastapi_app.py, bench/http/express_app.js),
# each with a pool of POOL (4) connections, all started first and left up:
#
#   bare  POST /orders: BEGIN, INSERT one order, COMMIT, 201 {"id": n};
#         no idempotency.
#   eo    the same handler under the middleware: the claim, the INSERT
#         and the stored response in one transaction.
#   hand  the same handler with a processed-keys table kept outside its
#         transaction, as the Idempotency-Key packages do: SELECT the
#         (caller, key) row, INSERT it 'started' (autocommit), the
#         handler's transaction, UPDATE the row with the response
#         (autocommit); unique index on (caller, key).
#
# The load: bench/http/load.js (node), the same generator for every
# contender, CLIENTS (1 and 4) closed-loop clients on keep-alive
# connections, one request in flight each, every request timed. Workloads:
# `new` (every request a new Idempotency-Key, the common case: all three
# contenders) and `retry` (200 keys sent once, then only retries of them:
# the replay path; eo and hand). A run: the tables emptied and eo dropped
# and created again, a CHECKPOINT, WARMUP (1) s not counted, SECS (5) s
# measured. Rounds (ROUNDS, 4) run every stack, workload, client count
# and contender once, the contenders' order alternating from round to
# round (forward, backward, ...). Per run: requests/s, p50/p90/p99 (ms),
# the CPU of the application's process and of the PostgreSQL server per
# request (/proc), the machine's busy share (/proc/stat), and a check
# that the orders in the table are the 201s the generator got (each new
# key's order once, none for a retry).
#
# Settings (environment): ROUNDS=4, SECS=5, WARMUP=1, CLIENTS="1 4",
# POOL=4, STACKS="fastapi express", WORKLOADS="new retry", WARM_SERVERS=2
# (s of load on each server before the first round, not counted),
# HTTP_PROFILE=1 (the applications under cProfile and node --cpu-prof, the
# profiles in logs/: for a look at where their CPU goes, not for timings),
# BENCH_SKIP_BUILD=1 (the eo installed in the system), EO_KEEP=1,
# EO_PYTHON (/usr/bin/python3: Debian's, which has the packages).
# Output: bench/results/http-<timestamp>/runs.csv, summary.md, load.txt,
# logs/. A benchmark, not a test: it fails only if a run fails.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

ROUNDS=${ROUNDS:-4}
SECS=${SECS:-5}
WARMUP=${WARMUP:-1}
CLIENTS=${CLIENTS:-"1 4"}
POOL=${POOL:-4}
STACKS=${STACKS:-"fastapi express"}
WORKLOADS=${WORKLOADS:-"new retry"}
WARM_SERVERS=${WARM_SERVERS:-2}
PYTHON=${EO_PYTHON:-/usr/bin/python3}
HTTP_PACKAGES="python3-fastapi python3-uvicorn python3-psycopg python3-psycopg-pool
    python3-uvloop python3-httptools nodejs npm"
declare -A PORT APP_PID
APPS=()

http_packages() {
    local p missing=""
    for p in $HTTP_PACKAGES; do
        dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
    done
    # node and npm may come from another package (nodesource's nodejs has both)
    command -v node >/dev/null && command -v npm >/dev/null &&
        missing=$(echo "$missing" | sed 's/ nodejs//; s/ npm//')
    if [ -n "$missing" ]; then
        log "installing packages:$missing"
        apt-get update
        # shellcheck disable=SC2086  # a list of package names
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
    fi
    "$PYTHON" -c 'import fastapi, uvicorn, psycopg, psycopg_pool, uvloop, httptools' ||
        die "$PYTHON lacks one of fastapi, uvicorn, psycopg, psycopg_pool, uvloop, httptools"
}

# express and pg for the Express contenders, from clients/node's lock file,
# into the copy of the tree (the repository is left as it was).
node_modules() {
    local dir=$EO_TMP/src/clients/node
    log "npm ci in $dir (express, pg: clients/node/package-lock.json)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) >"$RESULTS/logs/npm.log" 2>&1 ||
        { cat "$RESULTS/logs/npm.log" >&2; die "npm ci failed"; }
}

setup_db() {
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres \
        -c "ALTER SYSTEM SET eo.naptime = 3600" -c "CREATE DATABASE bench"
    as_pg "$PGBIN/pg_ctl" -D "$EO_TMP/pg/data" -l "$EO_TMP/pg/server.log" -w -t 60 restart \
        >/dev/null || die "the server did not restart"
    bq -f "$BENCH_DIR/http/setup.sql" >/dev/null
}

# Between runs: no order, no processed key, no eo key; a checkpoint.
reset_state() {
    bq >/dev/null <<'SQL'
SET client_min_messages = warning;
TRUNCATE orders, idempotency_keys RESTART IDENTITY;
DROP EXTENSION eo;
CREATE EXTENSION eo;
GRANT EXECUTE ON FUNCTION eo_claim, eo_complete, eo_fail, eo_extend, eo_status, eo_recovery_point TO bench_app;
VACUUM ANALYZE orders, idempotency_keys;
CHECKPOINT;
SQL
}

wait_listening() {
    local port=$1 pid=$2 log=$3
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; die "the server of $log exited"; }
        sleep 0.1
    done
    cat "$log" >&2
    die "nothing listens on $port after 20 s ($log)"
}

start_app() {
    local stack=$1 contender=$2 port log pid
    port=$(free_port)
    log=$RESULTS/logs/$stack-$contender.log
    local prof=() nprof=()
    if [ "${HTTP_PROFILE:-0}" = 1 ]; then
        prof=(-m cProfile -o "$RESULTS/logs/$stack-$contender.prof")
        nprof=(--cpu-prof --cpu-prof-dir="$RESULTS/logs/cpuprof-$stack-$contender")
    fi
    case $stack in
        fastapi)
            EO_BENCH_CONTENDER=$contender EO_BENCH_POOL=$POOL \
            EO_BENCH_DSN="host=$PGHOST port=$PGPORT dbname=bench user=bench_app" \
            PYTHONPATH=$EO_TMP/src/clients/python/src \
                "$PYTHON" "${prof[@]}" -m uvicorn fastapi_app:app --app-dir "$BENCH_DIR/http" \
                --host 127.0.0.1 --port "$port" --loop uvloop --http httptools \
                --no-access-log --log-level warning >"$log" 2>&1 &
            pid=$! ;;
        express)
            EO_BENCH_CONTENDER=$contender EO_BENCH_POOL=$POOL \
            EO_BENCH_CLIENT=$EO_TMP/src/clients/node NODE_PATH=$EO_TMP/src/clients/node/node_modules \
            NODE_ENV=production PGHOST=$PGHOST PGPORT=$PGPORT PGDATABASE=bench PGUSER=bench_app \
                node "${nprof[@]}" "$BENCH_DIR/http/express_app.js" "$port" >"$log" 2>&1 &
            pid=$! ;;
    esac
    APPS+=("$pid")
    wait_listening "$port" "$pid" "$log"
    PORT[$stack-$contender]=$port
    APP_PID[$stack-$contender]=$pid
}

stop_apps() {
    local p
    for p in "${APPS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${APPS[@]}"; do wait "$p" 2>/dev/null || true; done
    APPS=()
}

# utime + stime (clock ticks) of the processes given, summed
cpu_ticks() {
    local p sum=0 f
    for p in "$@"; do
        f=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        f=${f##*) }                      # past the command name
        # shellcheck disable=SC2086
        set -- $f
        sum=$((sum + ${12} + ${13}))     # fields 14 and 15 of stat
    done
    echo "$sum"
}

pg_pids() { ps --ppid "$(head -1 "$EO_TMP/pg/data/postmaster.pid")" -o pid= ; head -1 "$EO_TMP/pg/data/postmaster.pid"; }

# busy and total jiffies of the machine (/proc/stat)
machine_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }

one_run() {
    local round=$1 stack=$2 workload=$3 clients=$4 contender=$5 out a0 a1 p0 p1 m0 m1 json orders
    out=$RESULTS/logs/run-$round-$stack-$workload-$clients-$contender.json
    reset_state
    a0=$(cpu_ticks "${APP_PID[$stack-$contender]}")
    # shellcheck disable=SC2046
    p0=$(cpu_ticks $(pg_pids))
    m0=$(machine_ticks)
    node "$BENCH_DIR/http/load.js" "http://127.0.0.1:${PORT[$stack-$contender]}/orders" "$clients" \
        "$WARMUP" "$SECS" "$workload" "k$round$clients$contender$RANDOM" >"$out" 2>"$out.err" ||
        { cat "$out.err" >&2; die "the load generator failed: $out.err"; }
    a1=$(cpu_ticks "${APP_PID[$stack-$contender]}")
    # shellcheck disable=SC2046
    p1=$(cpu_ticks $(pg_pids))
    m1=$(machine_ticks)
    orders=$(bq -c "SELECT count(*) FROM orders")
    json=$(cat "$out")
    "$PYTHON" - "$round" "$stack" "$workload" "$clients" "$contender" "$json" "$orders" \
        "$a0" "$a1" "$p0" "$p1" "$m0" "$m1" "$(getconf CLK_TCK)" <<'EOF' >>"$RESULTS/runs.csv"
import json, sys
(rnd, stack, wl, cl, ct, js, orders, a0, a1, p0, p1, m0, m1, hz) = sys.argv[1:]
r = json.loads(js)
hz = int(hz)
total = sum(r["statuses"].values())   # measured requests
# CPU per request: over the whole run (warm-up, the retry keys' first requests) / all its requests
app_us = (int(a1) - int(a0)) / hz * 1e6 / max(r["all"], 1)
pg_us = (int(p1) - int(p0)) / hz * 1e6 / max(r["all"], 1)
mb0, mt0 = map(int, m0.split()); mb1, mt1 = map(int, m1.split())
busy = 100.0 * (mb1 - mb0) / max(mt1 - mt0, 1)
ok = sum(v for k, v in r["statuses"].items() if k.startswith("2"))
print(f"{rnd},{stack},{wl},{cl},{ct},{r['requests']},{r['rps']},{r['p50']},{r['p90']},{r['p99']},{r['max']},"
      f"{total - ok},{r['replayed']},{r['errors']},{r['created']},{orders},{app_us:.0f},{pg_us:.0f},{busy:.0f}")
EOF
    tail -n 1 "$RESULTS/runs.csv" | awk -F, '{printf "  round %s %-7s %-5s %s clients %-4s %8s req/s  p50 %7s  p99 %7s ms  app %5s us/req  pg %5s us/req  machine %3s%% busy%s%s\n",
        $1, $2, $3, $4, $5, $7, $8, $10, $17, $18, $19,
        ($12 > 0 ? "  NON-2XX " $12 : ""), ($15 != $16 ? "  ORDERS " $16 " != CREATED " $15 : "")}'
}

contenders_for() { if [ "$1" = retry ]; then echo "eo hand"; else echo "bare eo hand"; fi; }

reverse() { local out="" w; for w in "$@"; do out="$w $out"; done; echo "$out"; }

# Each server's first requests (imports, the JIT, the pool's first
# statements, psycopg's prepared statements) in a run of their own, not
# counted.
warm_servers() {
    local stack contender
    [ "$WARM_SERVERS" != 0 ] || return 0
    log "warming every server up: $WARM_SERVERS s of new keys at $(echo "$CLIENTS" | awk '{print $NF}') clients each, not counted"
    for stack in $STACKS; do
        for contender in bare eo hand; do
            node "$BENCH_DIR/http/load.js" "http://127.0.0.1:${PORT[$stack-$contender]}/orders" \
                "$(echo "$CLIENTS" | awk '{print $NF}')" 0 "$WARM_SERVERS" new "warm$contender" \
                >"$RESULTS/logs/warm-$stack-$contender.json" 2>&1 || die "warming $stack $contender up failed"
        done
    done
}

measure() {
    local r stack workload clients order
    echo "round,stack,workload,clients,contender,requests,rps,p50_ms,p90_ms,p99_ms,max_ms,non2xx,replayed,errors,created,orders,app_us_per_req,pg_us_per_req,machine_busy_pct" \
        >"$RESULTS/runs.csv"
    for r in $(seq 1 "$ROUNDS"); do
        log "round $r of $ROUNDS"
        for stack in $STACKS; do
            for workload in $WORKLOADS; do
                for clients in $CLIENTS; do
                    # shellcheck disable=SC2046
                    if [ $((r % 2)) = 1 ]; then order=$(contenders_for "$workload")
                    else order=$(reverse $(contenders_for "$workload")); fi
                    for contender in $order; do
                        one_run "$r" "$stack" "$workload" "$clients" "$contender"
                    done
                done
            done
        done
        load "after round $r"
    done
}

load() { echo "$1: $(uptime)" >>"$RESULTS/load.txt"; }

bench_exit() {
    local rc=$?
    stop_apps
    set +e
    (exit "$rc")
    on_exit
}

[ "$(id -u)" -eq 0 ] || die "run as root (initdb runs as user postgres)"
bench_packages
http_packages
make_scratch
trap bench_exit EXIT
RESULTS=$BENCH_DIR/results/http-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS/logs"
T_START=$SECONDS
load "start"
bench_build_install
[ -d "$EO_TMP/src/clients" ] || copy_repo     # the clients' copy (BENCH_SKIP_BUILD=1 builds nothing)
node_modules
bench_start_server
setup_db
for stack in $STACKS; do
    for contender in bare eo hand; do start_app "$stack" "$contender"; done
done
warm_servers
measure
load "end, $((SECONDS - T_START)) s in all"
"$PYTHON" "$BENCH_DIR/http/summary.py" "$RESULTS" "$(git -C "$REPO_ROOT" describe --always --dirty)" \
    "$ROUNDS" "$SECS" "$WARMUP" "$POOL" >"$RESULTS/summary.md"
log "summary ($RESULTS/summary.md)"
cat "$RESULTS/summary.md"
