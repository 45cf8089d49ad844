#!/usr/bin/env bash
# test/stress/run.sh -- concurrency stress test of eo_claim / eo_complete.
#
# pgbench hammers a small pool of keys, each delivered many times, from
# transaction-mode consumers (txn.sql, one in ten rolling back) and lease-mode
# consumers (lease.sql) at once.  Every claimed delivery adds to a side-effect
# ledger.  Effectively-once means: afterwards each key has exactly one ledger
# row, written exactly once (n = 1), and eo_status says 'done'.
#
# Runs against the server in PGHOST/PGPORT as a superuser; it drops and
# recreates the database STRESS_DB.  Tunables (defaults take ~25 s on 2 cores):
POOL=${STRESS_POOL:-300}          # distinct keys
CLIENTS=${STRESS_CLIENTS:-8}      # pgbench connections
JOBS=${STRESS_JOBS:-2}            # pgbench threads
SECONDS_RUN=${STRESS_SECONDS:-20} # pgbench duration
DB=${STRESS_DB:-eo_stress}
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

sql() { psql -X -q -v ON_ERROR_STOP=1 -d "$DB" "$@"; }
fail() { printf 'stress: FAILED: %s\n' "$*" >&2; exit 1; }

setup_db() {
    psql -X -q -v ON_ERROR_STOP=1 -d postgres \
        -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
    sql -c "CREATE EXTENSION eo" \
        -c "CREATE TABLE stress_ledger (key text PRIMARY KEY, n int NOT NULL)"
}

# Transaction mode weighted 9:1 over lease mode.  No --max-tries: under READ
# COMMITTED a correct eo never raises an error here, so any error (a unique
# violation, a refused token, a deadlock) aborts a client and fails the run.
run_load() {
    echo "stress: pgbench, $CLIENTS clients, ${SECONDS_RUN}s, pool of $POOL keys"
    if ! pgbench -n -M prepared -c "$CLIENTS" -j "$JOBS" -T "$SECONDS_RUN" \
            -D pool="$POOL" -f "$HERE/txn.sql@9" -f "$HERE/lease.sql@1" \
            "$DB" >"$OUT/pgbench.log" 2>&1; then
        tail -n 40 "$OUT/pgbench.log" >&2
        fail "pgbench exited non-zero"
    fi
    grep -E '^(number of (transactions actually processed|failed transactions)|tps)' \
        "$OUT/pgbench.log" | sed 's/^/  /'
    grep -q '^number of failed transactions: 0 ' "$OUT/pgbench.log" ||
        fail "pgbench reported failed transactions"
}

# Keys the load never got to (or whose last claim rolled back) are claimed
# once more, one transaction per key, so every key must end 'done'.
final_pass() {
    local before i
    before=$(sql -Atc "SELECT count(*) FROM stress_ledger")
    for i in $(seq 1 "$POOL"); do
        cat <<EOF
BEGIN;
SELECT status = 'claimed' AS claimed FROM eo_claim('stress:$i') \gset
\if :claimed
INSERT INTO stress_ledger AS l VALUES ('stress:$i', 1)
    ON CONFLICT (key) DO UPDATE SET n = l.n + 1;
SELECT eo_complete('stress:$i', '{"mode": "final"}');
\endif
COMMIT;
EOF
    done | sql -o /dev/null
    echo "stress: final pass claimed $(( $(sql -Atc "SELECT count(*) FROM stress_ledger") - before )) keys the load left open"
}

check() {
    local name=$1 got=$2
    if [ "$got" = 0 ]; then echo "  ok: $name"; else echo "  NOT OK: $name: $got" >&2; BAD=1; fi
}

verify() {
    local rows missing twice notdone
    rows=$(sql -Atc "SELECT count(*) FROM stress_ledger")
    missing=$(sql -Atc "SELECT count(*) FROM generate_series(1, $POOL) i
        WHERE NOT EXISTS (SELECT FROM stress_ledger WHERE key = 'stress:' || i)")
    twice=$(sql -Atc "SELECT count(*) FROM stress_ledger WHERE n <> 1")
    notdone=$(sql -Atc "SELECT count(*) FROM generate_series(1, $POOL) i
        WHERE (SELECT state FROM eo_status('stress:' || i)) IS DISTINCT FROM 'done'")
    echo "stress: checks"
    BAD=0
    check "ledger has $POOL rows (has $rows)" $(( rows - POOL ))
    check "every key has a ledger row (keys without one)" "$missing"
    check "no side effect done twice (ledger rows with n <> 1)" "$twice"
    check "eo_status is 'done' for every key (keys not done)" "$notdone"
    [ "$BAD" = 0 ] || fail "effectively-once violated"
}

setup_db
run_load
final_pass
verify
echo "stress: passed"
