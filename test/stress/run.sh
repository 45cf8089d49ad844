#!/usr/bin/env bash
# test/stress/run.sh -- concurrency stress test of eo_claim / eo_complete.
#
# pgbench hammers a small pool of keys, each delivered many times, from
# transaction-mode consumers (txn.sql, one in ten rolling back), lease-mode
# consumers (lease.sql) and batch consumers (batch.sql: 24 keys per
# transaction, past eo's deferred-claim limit) at once.  Every claimed delivery adds to a side-effect
# ledger (key PRIMARY KEY, n = times the effect was applied; an upsert, so a
# double effect is counted rather than aborting the load).  Effectively-once
# means: afterwards each key (the fixed pool and the hot keys of txn.sql)
# has exactly one ledger row with n = 1, and
# eo_status says 'done'.
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
    psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "SET client_min_messages = warning" \
        -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" &&
    sql -c "CREATE EXTENSION eo" \
        -c "CREATE TABLE stress_ledger (key text PRIMARY KEY, n int NOT NULL)" \
        -c "CREATE SEQUENCE stress_hot" \
        -c "CREATE FUNCTION stress_batch(keys int[]) RETURNS void LANGUAGE plpgsql AS \$\$
            DECLARE k int;
            BEGIN
                FOREACH k IN ARRAY keys LOOP
                    IF (SELECT status FROM eo_claim('stress:' || k)) = 'claimed' THEN
                        INSERT INTO stress_ledger AS l VALUES ('stress:' || k, 1)
                            ON CONFLICT (key) DO UPDATE SET n = l.n + 1;
                        PERFORM eo_complete('stress:' || k, jsonb_build_object('mode', 'batch', 'k', k));
                    END IF;
                END LOOP;
            END \$\$"
}

# Transaction mode weighted 9:1:1 over lease mode and batches.  No --max-tries: under READ
# COMMITTED a correct eo never raises an error here, so any error (a refused
# fencing token, a deadlock, an internal error) aborts a client and fails the run.
run_load() {
    echo "stress: pgbench, $CLIENTS clients, ${SECONDS_RUN}s, pool of $POOL keys"
    if ! pgbench -n -M prepared -c "$CLIENTS" -j "$JOBS" -T "$SECONDS_RUN" \
            -D pool="$POOL" -f "$HERE/txn.sql@9" -f "$HERE/lease.sql@1" -f "$HERE/batch.sql@1" \
            "$DB" >"$OUT/pgbench.log" 2>&1; then
        tail -n 40 "$OUT/pgbench.log" >&2
        fail "pgbench exited non-zero"
    fi
    grep -E '^(number of (transactions actually processed|failed transactions)|tps)' \
        "$OUT/pgbench.log" | sed 's/^/  /'
    grep -q '^number of failed transactions: 0 ' "$OUT/pgbench.log" ||
        fail "pgbench reported failed transactions"
}

# Keys 1..POOL, then the hot keys handed out by the sequence.
key_count() {
    sql -Atc "SELECT $POOL + CASE WHEN is_called THEN last_value / 8 + 1 ELSE 0 END FROM stress_hot"
}

# Keys the load never got to (or whose last claim rolled back) are claimed
# once more, one transaction per key, so every key must end 'done'.
final_pass() {
    local before key
    before=$(sql -Atc "SELECT count(*) FROM stress_ledger")
    for key in $(sql -Atc "SELECT 'stress:' || i FROM generate_series(1, $(key_count)) i
                           WHERE (SELECT state FROM eo_status('stress:' || i)) IS DISTINCT FROM 'done'"); do
        cat <<EOF
BEGIN;
SELECT status = 'claimed' AS claimed FROM eo_claim('$key') \gset
\if :claimed
INSERT INTO stress_ledger AS l VALUES ('$key', 1)
    ON CONFLICT (key) DO UPDATE SET n = l.n + 1;
SELECT eo_complete('$key', '{"mode": "final"}');
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
    local rows missing twice notdone keys
    keys=$(key_count)
    rows=$(sql -Atc "SELECT count(*) FROM stress_ledger")
    missing=$(sql -Atc "SELECT count(*) FROM generate_series(1, $keys) i
        WHERE NOT EXISTS (SELECT FROM stress_ledger WHERE key = 'stress:' || i)")
    twice=$(sql -Atc "SELECT count(*) FROM stress_ledger WHERE n <> 1")
    notdone=$(sql -Atc "SELECT count(*) FROM generate_series(1, $keys) i
        WHERE (SELECT state FROM eo_status('stress:' || i)) IS DISTINCT FROM 'done'")
    echo "stress: keys completed by mode: $(sql -Atc "SELECT string_agg(m || ' ' || n, ', ')
        FROM (SELECT (eo_status('stress:' || i)).result ->> 'mode' AS m, count(*) AS n
              FROM generate_series(1, $keys) i GROUP BY 1 ORDER BY 1) s")"
    echo "stress: checks"
    BAD=0
    check "ledger has $keys rows (has $rows)" $(( rows - keys ))
    check "every key has a ledger row (keys without one)" "$missing"
    check "no side effect done twice (ledger rows with n <> 1)" "$twice"
    check "eo_status is 'done' for every key (keys not done)" "$notdone"
    [ "$BAD" = 0 ] || fail "effectively-once violated"
}

setup_db || fail "could not set up database $DB"
run_load
final_pass
verify
echo "stress: passed"
