#!/usr/bin/env bash
# bench/tombstones.sh -- the second tier of retention:
# bytes per key in each tier, and what claims cost with TOMB_KEYS
# tombstones against none.
#
# Usage, as root, from a clone of the repository:
#
#     bash bench/tombstones.sh
#
# Builds the working tree into a private copy of the PostgreSQL
# installation and starts a throwaway server as bench/run.sh does (fsync
# and synchronous_commit on, autovacuum off).  Two databases:
#   none   eo with eo.tombstone_retention = 0 (claims look for nothing);
#   tomb   eo with eo.tombstone_retention = 90d and TOMB_KEYS tombstones in
#          TOMB_GENS live tombstone generations (made by the maintenance
#          pass as in production, then filled in bulk through eo's own hash
#          function), then ANALYZE.
# Bytes per key: the key tier from TIER_KEYS keys claimed through eo_claim
# (heap + indexes of the key generation), the tombstone tier from the
# tombstone tables (heap + index).  Claims: scripts/eo.sql (every key new
# but for 10% duplicates, as in run.sh) at 1 client, ROUNDS (6) rounds of
# DURATION (8) s, the two databases in alternating order; the ratio
# tomb/none per round, and its median.
# Output: bench/results/tombstones-<timestamp>/summary.md and runs.csv.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

TOMB_KEYS=${TOMB_KEYS:-10000000}
TOMB_GENS=${TOMB_GENS:-4}
TIER_KEYS=${TIER_KEYS:-1000000}
ROUNDS=${ROUNDS:-6}
DURATION=${DURATION:-8}
CLIENTS=${CLIENTS:-1}
NACCOUNTS=${NACCOUNTS:-10000}
SEED=${SEED:-20241129}

# A database with eo, the bench tables and role, eo.tombstone_retention set.
tomb_db() {
    local db=$1 retention=$2
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE $db"
    # run.sh's setup, but for the role, which the first database made
    grep -v '^CREATE ROLE bench_app' "$BENCH_DIR/setup.sql" | BENCH_DB=$db bq >/dev/null
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres \
        -c "ALTER DATABASE $db SET eo.tombstone_retention = '$retention'"
}

# The same history in both databases (the key generations switched and
# retired alike, so that claims read as many key generations in each):
# maintenance passes a second apart; in tomb, where eo.tombstone_retention
# is on, they also make TOMB_GENS live tombstone generations.
make_generations() {
    local db=$1 retention=$2 i
    log "making generations in $db"
    BENCH_DB=$db bq >/dev/null <<'SQL'
SELECT eo_claim('seed:' || g) FROM generate_series(1, 10) g;
SET eo.partition_interval = 1;
SELECT pg_sleep(1.1);
SELECT eo_maintain();
SELECT pg_sleep(1.1);
SELECT eo_maintain();
SET eo.retention = 1;
SELECT pg_sleep(1.1);
SELECT eo_maintain();
SQL
    # a switch per pass: with eo.tombstone_retention = 4 s the tombstone
    # switch interval is 1 s, and none is old enough to retire yet
    for i in $(seq 2 "$TOMB_GENS"); do
        BENCH_DB=$db bq -c "SET eo.partition_interval = 1; SET eo.tombstone_retention = $retention;
                            SELECT pg_sleep(1.1); SELECT eo_maintain();" >/dev/null
    done
}

# TOMB_KEYS tombstones spread over tomb's live tombstone generations.
load_tombstones() {
    log "loading $TOMB_KEYS tombstones"
    local t0=$SECONDS
    BENCH_DB=tomb bq >/dev/null <<SQL
DO \$\$
DECLARE
    t regclass;
    n int := 0;
    gens int := (SELECT count(*) FROM eo_internal.eo_tombstone_generations WHERE state IN ('c', 'o'));
BEGIN
    FOR t IN SELECT relid FROM eo_internal.eo_tombstone_generations
             WHERE state IN ('c', 'o') ORDER BY gen LOOP
        EXECUTE format('INSERT INTO %s SELECT eo_internal.eo_tombstone_hash(0, %L || g), %L, NULL, ''d''
                        FROM generate_series(1, %s) g', t, 'old' || n || ':', 'bench_app',
                       $TOMB_KEYS / gens);
        n := n + 1;
    END LOOP;
END
\$\$;
ANALYZE;
CHECKPOINT;
SQL
    TOMB_LOAD_S=$((SECONDS - t0))
}

# Bytes per key of each tier.
tier_sizes() {
    BENCH_DB=tier bq >/dev/null <<SQL
GRANT EXECUTE ON FUNCTION eo_claim, eo_complete TO bench_app;
SET ROLE bench_app;
DO \$\$
BEGIN
    FOR i IN 1..$TIER_KEYS LOOP
        PERFORM eo_claim(abs(hashint8extended(i, 0))::text);
    END LOOP;
END
\$\$;
SQL
    KEY_BYTES=$(BENCH_DB=tier bq -c "
        SELECT round(sum(pg_total_relation_size(relid))::numeric / $TIER_KEYS, 1)
        FROM eo_internal.eo_generations WHERE state IN ('c', 'o')")
    TOMB_BYTES=$(BENCH_DB=tomb bq -c "
        SELECT round(sum(pg_total_relation_size(g.relid))::numeric
                     / (SELECT sum(c.reltuples) FROM eo_internal.eo_tombstone_generations g2
                        JOIN pg_class c ON c.oid = g2.relid WHERE g2.state IN ('c', 'o'))::numeric, 1)
        FROM eo_internal.eo_tombstone_generations g WHERE g.state IN ('c', 'o')")
    TOMB_LIVE=$(BENCH_DB=tomb bq -c "SELECT count(*) FROM eo_internal.eo_tombstone_generations
                                     WHERE state IN ('c', 'o')")
}

reset_db() {
    BENCH_DB=$1 bq >/dev/null <<SQL
GRANT EXECUTE ON FUNCTION eo_claim, eo_complete TO bench_app;
TRUNCATE accounts;
INSERT INTO accounts (id, balance) SELECT g, 0 FROM generate_series(1, $NACCOUNTS) g;
VACUUM (ANALYZE) accounts;
CHECKPOINT;
SQL
}

run_db() {
    local round=$1 db=$2 out=$RESULTS/pgbench/r$1_$2.txt tps
    reset_db "$db"
    "$PGBIN/pgbench" -n -M prepared -c "$CLIENTS" -j 1 -T "$DURATION" --random-seed="$SEED" \
        -D n="$((round * 10000000))" -D dup_pct=10 -D naccounts="$NACCOUNTS" -U bench_app \
        -f "$EO_TMP/eo.sql" "$db" >"$out" 2>&1 || die "pgbench failed: $out"
    ! grep -q aborted "$out" || die "pgbench aborted: $out"
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$out")
    printf '  round %s %-5s %10s tps\n' "$round" "$db" "$tps"
    echo "$round,$db,$tps" >>"$RESULTS/runs.csv"
}

[ "$(id -u)" -eq 0 ] || die "run as root (initdb runs as user postgres)"
bench_packages
make_scratch
bench_build_install
bench_start_server
RESULTS=$BENCH_DIR/results/tombstones-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS/pgbench"
echo "round,db,tps" >"$RESULTS/runs.csv"
cat "$BENCH_DIR/scripts/_delivery.sql" "$BENCH_DIR/scripts/eo.sql" >"$EO_TMP/eo.sql"
"$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE ROLE bench_app LOGIN"
tomb_db none 0
tomb_db tomb 90d
tomb_db tier 0
make_generations none 0
make_generations tomb 4
load_tombstones
tier_sizes
KEY_GENS_NONE=$(BENCH_DB=none bq -c "SELECT count(*) FROM eo_internal.eo_generations WHERE state IN ('c', 'o')")
KEY_GENS_TOMB=$(BENCH_DB=tomb bq -c "SELECT count(*) FROM eo_internal.eo_generations WHERE state IN ('c', 'o')")
log "$ROUNDS rounds, ${DURATION} s per run, $CLIENTS client(s)"
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then dbs="none tomb"; else dbs="tomb none"; fi
    for db in $dbs; do run_db "$r" "$db"; done
done
python3 - "$RESULTS/runs.csv" >"$RESULTS/summary.md" <<EOF
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
tps = {(r["round"], r["db"]): float(r["tps"]) for r in rows}
rounds = sorted({r for r, _ in tps}, key=int)
ratios = [tps[(r, "tomb")] / tps[(r, "none")] for r in rounds]
print("# eo tombstones: $(date -u '+%Y-%m-%d %H:%M') UTC, eo $(git -C "$REPO_ROOT" describe --always --dirty)\n")
print("| what | measured |")
print("|---|---|")
print("| key tier (full records, $TIER_KEYS keys claimed through eo_claim) | $KEY_BYTES bytes per key |")
print("| tombstone tier ($TOMB_KEYS tombstones in $TOMB_LIVE live generations) | $TOMB_BYTES bytes per key |")
print("| loading the tombstones (bulk, through eo's hash) | $TOMB_LOAD_S s |")
print("| live key generations read by a claim (none, tomb) | $KEY_GENS_NONE, $KEY_GENS_TOMB |")
print(f"| claims ($CLIENTS client, 10% duplicates) with the tombstones vs eo.tombstone_retention = 0 | "
      f"{statistics.median(ratios):.3f}x (rounds {min(ratios):.3f}-{max(ratios):.3f}; "
      f"{statistics.median(tps[(r, 'tomb')] for r in rounds):.0f} vs "
      f"{statistics.median(tps[(r, 'none')] for r in rounds):.0f} tps) |")
EOF
log "summary ($RESULTS/summary.md)"
cat "$RESULTS/summary.md"
