#!/usr/bin/env bash
# bench/run.sh -- eo's benchmark suite: eo against what users would write
# instead, side by side, on one throwaway server.  Benchmarks, not tests:
# nothing here fails for being slow.
#
# Usage, as root on a fresh Debian 12 machine, from a clone of the repository:
#
#     bash bench/run.sh
#
# It installs what is missing (apt-get update, then postgresql-15,
# postgresql-server-dev-15, postgresql-15-pgq3, postgresql-15-partman,
# gnuplot-nox, python3, make, gcc), builds eo from a copy of the tree and
# installs it into a private copy of the PostgreSQL installation (so that an
# eo installed system-wide meanwhile cannot change what is measured; the
# system installation is not touched), starts a scratch server from it as
# user postgres (temp dir, Unix socket only, synchronous_commit = on, fsync
# on, shared_preload_libraries = 'eo'), runs the contenders, stops the
# server and removes the scratch dir.
# The default run (3 rounds x 32 runs x 8 s) takes about 13 minutes on 2 cores,
# and the other parts (cpubound below; relay, retention, scale, reclaim,
# scrape in bench/parts.sh) about 9 more; bench/README.md gives the time
# each part took.
#
# Output: bench/results/<timestamp>/ with runs.csv (one line per pgbench run),
# pgbench/ (each run's pgbench output),
# medians.csv, summary.md (medians, the targets as met/missed) and
# chart.png; summary and chart are also copied to bench/RESULTS.md and
# bench/RESULTS.png.
#
# Settings (environment):
#   ROUNDS=3          rounds; each runs every contender once, the order
#                     alternating (ABC.., ..CBA, ABC..) so drift cancels out
#   DURATION=8        seconds per pgbench run
#   CLIENTS="1 8"     client counts
#   DUP_PCT=10        share of duplicate deliveries, in percent
#   STORM_PCT=50      duplicate share of the redelivery-storm runs
#   CONTENDERS="..."  contenders at DUP_PCT (default: all, see bench/scripts/;
#                     eo_emit runs only if eo has eo_outbox_create and eo_emit)
#   STORM_CONTENDERS="hand eo"   contenders also run at STORM_PCT
#   NACCOUNTS=10000   rows in the business table
#   WARMUP=3          seconds of warm-up load before the first round
#   SEED=20241129     pgbench --random-seed (the same delivery stream everywhere)
#   BENCH_SKIP_BUILD=1  benchmark the eo installed in the system (no build)
#   BENCH_NOTE="..."  a line printed at the top of the summary
#   EO_KEEP=1         keep the scratch directory (server log, data directory)
#   PARTS="contenders cpubound relay retention scale reclaim scrape"   the parts to run
#   CPUBOUND_CLIENTS="1 2", CPUBOUND_ROUNDS=$ROUNDS, CPUBOUND_CONTENDERS="hand
#                     hand_min eo eo_noresult eo_noresult_field"   the part
#                     where the CPU decides (synchronous_commit = off)
#   RELAY_*, RETENTION_*, SCALE_*, RECLAIM_*   sizes of the other parts: see
#                     bench/parts.sh (defaults: the sizes the targets were set for)
# A quick smoke run of the contenders: PARTS=contenders ROUNDS=1 DURATION=2 bash bench/run.sh
# Small runs of the other parts only:
#   PARTS="relay retention scale reclaim" RELAY_EVENTS=20000 RETENTION_KEYS=50000 \
#   SCALE_KEYS=200000 SCALE_DURATION=3 RELAY_ROUNDS=1 SCALE_ROUNDS=1 bash bench/run.sh
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
# shellcheck source=bench/parts.sh
. "$BENCH_DIR/parts.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8}
CLIENTS=${CLIENTS-"1 8"}
DUP_PCT=${DUP_PCT:-10}
STORM_PCT=${STORM_PCT:-50}
CONTENDERS=${CONTENDERS-"floor hand hand_min hand_outbox hand_pgq one_write eo eo_nocount eo_scoped eo_noresult eo_emit eo_emit_notify eo_lease hand_lease"}
STORM_CONTENDERS=${STORM_CONTENDERS-"hand eo"}
NACCOUNTS=${NACCOUNTS:-10000}
WARMUP=${WARMUP:-3}
SEED=${SEED:-20241129}
JOBS=${JOBS:-1}                 # pgbench threads
PARTS=${PARTS-"contenders cpubound relay retention scale reclaim scrape"}
CPUBOUND_CLIENTS=${CPUBOUND_CLIENTS-"1 2"}
CPUBOUND_ROUNDS=${CPUBOUND_ROUNDS:-$ROUNDS}
CPUBOUND_CONTENDERS=${CPUBOUND_CONTENDERS-"hand hand_min eo eo_noresult eo_noresult_field"}
BENCH_DB=bench
TODO_NOTES=()

# The tables each contender keeps its keys in, as a LIKE pattern on the
# table name (for the duplicate-share check and the dead-version count); "-"
# for none.  eo's key store may be split over several tables (time
# generations): EO_KEY_TABLES matches all of them.
EO_KEY_TABLES=${EO_KEY_TABLES:-'eo\_keys%'}
declare -A KEY_TABLE=(
    [floor]=- [hand]=processed [hand_min]=processed_min [hand_outbox]=processed
    [hand_pgq]=processed [one_write]=processed [eo]=$EO_KEY_TABLES [eo_nocount]=$EO_KEY_TABLES [eo_scoped]=$EO_KEY_TABLES
    [eo_noresult]=$EO_KEY_TABLES [eo_noresult_field]=$EO_KEY_TABLES [eo_emit]=$EO_KEY_TABLES [eo_emit_notify]=$EO_KEY_TABLES
    [eo_lease]=$EO_KEY_TABLES
    [hand_lease]=processed_lease
)

# ---------------------------------------------------------------------------
# Setup

setup_database() {
    log "creating the benchmark database"
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE $BENCH_DB"
    bq -f "$BENCH_DIR/setup.sql" >/dev/null
    bq -f "$BENCH_DIR/parts.sql" >/dev/null
    HAVE_PGQ=0
    if bq -c "SELECT 1 FROM pg_available_extensions WHERE name = 'pgq'" | grep -q 1; then
        bq -f "$BENCH_DIR/setup_pgq.sql" >/dev/null
        HAVE_PGQ=1
    fi
    setup_eo_emit
}

# HOOK: eo with an emitted event (targets: 1.1x hand_outbox, 1.2x hand_pgq).
# Runs only once the installed eo has the outbox API of DESIGN.md
# (eo_outbox_create, eo_emit); adapt the calls here and in
# scripts/eo_emit.sql if the outbox issue settles on other signatures.
HAVE_EMIT=0
EMIT_SQL="SELECT eo_outbox_create('bench_outbox');
SELECT eo_outbox_create('bench_outbox_notify', notify => true);
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO bench_app;
GRANT INSERT ON bench_outbox, bench_outbox_notify TO bench_app;"
setup_eo_emit() {
    local n
    n=$(bq -c "SELECT count(DISTINCT proname) FROM pg_proc
               WHERE proname IN ('eo_emit', 'eo_outbox_create')")
    if [ "$n" != 2 ]; then
        TODO_NOTES+=("eo + emit (eo_emit vs hand_outbox and PgQ): eo_emit/eo_outbox_create do not exist yet; scripts/eo_emit.sql is ready and run.sh enables it by itself once they do")
        return 0
    fi
    if bq -c "$EMIT_SQL" >/dev/null; then
        HAVE_EMIT=1
    else
        TODO_NOTES+=("eo + emit: eo_outbox_create('bench_outbox') failed; adapt EMIT_SQL in run.sh")
    fi
}

contender_available() {
    case $1 in
        hand_pgq) [ "$HAVE_PGQ" = 1 ] ;;
        eo_emit | eo_emit_notify) [ "$HAVE_EMIT" = 1 ] ;;
        eo_nocount) [ -f "$BENCH_DIR/scripts/eo.sql" ] ;;   # made from eo.sql
        *) [ -f "$BENCH_DIR/scripts/$1.sql" ] ;;
    esac
}

# Each contender's pgbench script: the shared delivery stream + its own part.
make_scripts() {
    mkdir -p "$EO_TMP/scripts" "$EO_TMP/logs"
    local f
    for f in "$BENCH_DIR"/scripts/[a-z]*.sql; do
        cat "$BENCH_DIR/scripts/_delivery.sql" "$f" >"$EO_TMP/scripts/$(basename "$f")"
    done
    # eo_nocount is eo run with eo.track_counts = off (reset_state sets it
    # for the role): the same script, so the two cannot drift apart.
    cp "$EO_TMP/scripts/eo.sql" "$EO_TMP/scripts/eo_nocount.sql"
}

# ---------------------------------------------------------------------------
# One run

# The same starting point for every run: empty key tables (eo's by DROP and
# CREATE EXTENSION, whatever its storage layout), fresh accounts, a
# checkpoint (so each run pays the same full-page images), zeroed
# statistics.  Only accounts is vacuumed: a key table vacuumed or analyzed
# while empty gets reltuples = 0, and the generic plans that -M prepared (and
# eo's kept SPI plans) settle on after five executions would then scan it
# sequentially for the rest of the run, slower with every key added.  A
# truncated or new table keeps reltuples = -1 and gets index scans, as a
# big table does in production; runs.csv counts key_seq_scans to prove it.
reset_state() {
    local contender=$1
    {
        echo "SET client_min_messages = warning;"
        echo "DROP EXTENSION eo CASCADE;"
        echo "DROP TABLE IF EXISTS bench_outbox, bench_outbox_notify CASCADE;"
        echo "CREATE EXTENSION eo;"
        # eo.track_counts is superuser-only: set for the role, per run.
        if [ "$contender" = eo_nocount ]; then
            echo "ALTER ROLE bench_app SET eo.track_counts = off;"
        else
            echo "ALTER ROLE bench_app RESET eo.track_counts;"
        fi
        echo "GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text),"
        echo "    eo_complete(text, jsonb, bigint, text) TO bench_app;"
        echo "SELECT eo_scope_create('bench', 'bench_app');"
        [ "$HAVE_EMIT" != 1 ] || echo "$EMIT_SQL"
        echo "TRUNCATE accounts, processed, processed_min, processed_lease, outbox;"
        echo "INSERT INTO accounts (id, balance) SELECT g, 0 FROM generate_series(1, $NACCOUNTS) g;"
        if [ "$contender" = hand_pgq ]; then
            echo "SELECT pgq.drop_queue('bench', true);"
            echo "SELECT pgq.create_queue('bench');"
        fi
        echo "VACUUM (ANALYZE) accounts;"
        echo "CHECKPOINT;"
        echo "SELECT pg_stat_reset();"
        echo "SELECT pg_stat_reset_shared('wal');"
    } | bq >/dev/null
}

# pgbench's backends report their statistics as they exit: wait for them.
wait_for_backends() {
    local i
    for i in $(seq 1 100); do
        [ "$(bq -c "SELECT count(*) FROM pg_stat_activity
                    WHERE application_name = 'pgbench'")" = 0 ] && return 0
        sleep 0.1
    done
    echo "warning: pgbench backends still there after 10 s" >&2
}

# RUN_CSV and RUN_TAG (environment) send a part's runs to a CSV of their own.
run_one() {
    local round=$1 pos=$2 contender=$3 clients=$4 dup=$5
    local kt=${KEY_TABLE[$contender]} tag="${RUN_TAG:-}r${round}_${contender}_c${clients}_d${dup}"
    local csv=${RUN_CSV:-$RESULTS/runs.csv}
    local out="$RESULTS/pgbench/$tag.txt" prefix="$EO_TMP/logs/$tag" rc=0 status=ok
    local lsn0 stats key_rows=""

    reset_state "$contender"
    lsn0=$(bq -c "SELECT pg_current_wal_lsn()")
    "$PGBIN/pgbench" -n -M prepared -c "$clients" -j "$JOBS" -T "$DURATION" \
        --random-seed="$SEED" -D n=0 -D dup_pct="$dup" -D naccounts="$NACCOUNTS" \
        --log --log-prefix="$prefix" -U bench_app -f "$EO_TMP/scripts/$contender.sql" "$BENCH_DB" >"$out" 2>&1 || rc=$?
    wait_for_backends
    if [ "$rc" != 0 ] || grep -qE 'aborted|^pgbench: error' "$out"; then
        status="pgbench rc=$rc: $(grep -m1 -E 'error|abort' "$out" | tr ',\n' '; ' | cut -c1-200)"
        status=${status:-pgbench rc=$rc}
    fi
    # WAL since lsn0, full-page images, dead versions (key table / all
    # tables), dead tuples left, changes applied, sequential scans of the key
    # table (should be 0), and then the rows in the key table.
    stats=$(bq -F ' ' -c "
        SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0')::bigint,
               (SELECT wal_fpi FROM pg_stat_wal),
               coalesce(sum(n_tup_upd + n_tup_del) FILTER (WHERE relname LIKE '$kt'), 0),
               coalesce(sum(n_tup_upd + n_tup_del), 0),
               coalesce(sum(n_dead_tup), 0),
               (SELECT sum(balance) FROM accounts),
               coalesce(sum(seq_scan) FILTER (WHERE relname LIKE '$kt'), 0)
          FROM pg_stat_user_tables")
    [ "$kt" = - ] || key_rows=$(bq -c "SELECT bench_count_rows('$kt')")
    read -r wal fpi kdead adead ndead changes kseq <<<"$stats"
    [ "$kt" != - ] || kdead="" kseq=""
    printf '  %-12s c=%-2s dup=%-3s ' "$contender" "$clients" "$dup"
    python3 "$BENCH_DIR/analyze.py" row "$csv" "$prefix" "$out" \
        round="$round" pos="$pos" contender="$contender" clients="$clients" \
        dup_pct="$dup" duration_s="$DURATION" status="$status" wal_bytes="$wal" \
        wal_fpi="$fpi" key_table="$kt" key_rows="$key_rows" changes="$changes" \
        key_dead_versions="$kdead" all_dead_versions="$adead" n_dead_tup_after="$ndead" key_seq_scans="$kseq"
    # Effectively once: every fresh message changed an account exactly once.
    if [ -n "$key_rows" ] && [ "$status" = ok ] && [ "$key_rows" != "$changes" ]; then
        echo "  WARNING: $contender: $key_rows keys but $changes changes applied" >&2
    fi
    rm -f "$prefix".[0-9]*
}

# ---------------------------------------------------------------------------
# The rounds

JOB_LIST=()
plan_jobs() {
    local c x
    for c in $CLIENTS; do
        for x in $CONTENDERS; do
            contender_available "$x" && JOB_LIST+=("$x $c $DUP_PCT")
        done
        for x in $STORM_CONTENDERS; do
            contender_available "$x" && JOB_LIST+=("$x $c $STORM_PCT")
        done
    done
}

warm_up() {
    [ "$WARMUP" -gt 0 ] || return 0
    log "warm-up: ${WARMUP} s"
    reset_state eo
    local args=() x
    for x in $CONTENDERS; do
        case $x in hand_pgq | eo_emit | eo_emit_notify) continue ;; esac   # their reset is special
        contender_available "$x" && args+=(-f "$EO_TMP/scripts/$x.sql")
    done
    "$PGBIN/pgbench" -n -M prepared -c 2 -j 1 -T "$WARMUP" -D n=0 -D dup_pct="$DUP_PCT" \
        -D naccounts="$NACCOUNTS" -U bench_app "${args[@]}" "$BENCH_DB" >/dev/null 2>&1 ||
        die "warm-up pgbench failed: run with ROUNDS=1 DURATION=2 and look at the scripts"
    wait_for_backends
}

run_rounds() {
    local r i n=${#JOB_LIST[@]} order
    log "${ROUNDS} rounds x ${n} runs x ${DURATION} s"
    for r in $(seq 1 "$ROUNDS"); do
        log "round $r of $ROUNDS ($(date +%H:%M:%S))"
        if [ $((r % 2)) = 1 ]; then order=$(seq 0 $((n - 1))); else order=$(seq $((n - 1)) -1 0); fi
        local pos=0
        for i in $order; do
            # shellcheck disable=SC2086  # "contender clients dup"
            run_one "$r" "$pos" ${JOB_LIST[$i]}
            pos=$((pos + 1))
        done
    done
}

# ---------------------------------------------------------------------------
# Where the CPU decides: the claim contenders again, with synchronous_commit
# = off for bench_app (no commit waits for the disk), at CPUBOUND_CLIENTS,
# CPUBOUND_ROUNDS alternating rounds, into cpubound.csv.  The durable runs
# above measure the WAL flush; these the CPU per delivery.

part_cpubound() {
    local jobs=() c x r i n order pos
    for c in $CPUBOUND_CLIENTS; do
        for x in $CPUBOUND_CONTENDERS; do
            contender_available "$x" && jobs+=("$x $c $DUP_PCT")
        done
    done
    n=${#jobs[@]}
    bq -c "ALTER ROLE bench_app SET synchronous_commit = off" >/dev/null
    log "cpubound: ${CPUBOUND_ROUNDS} rounds x ${n} runs x ${DURATION} s, synchronous_commit = off"
    for r in $(seq 1 "$CPUBOUND_ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then order=$(seq 0 $((n - 1))); else order=$(seq $((n - 1)) -1 0); fi
        pos=0
        for i in $order; do
            # shellcheck disable=SC2086  # "contender clients dup"
            RUN_CSV="$RESULTS/cpubound.csv" RUN_TAG=cpubound_ run_one "$r" "$pos" ${jobs[$i]}
            pos=$((pos + 1))
        done
    done
}

bench_cpubound() {
    want_part cpubound || { TODO_NOTES+=("CPU-bound claims (synchronous_commit = off): not run (PARTS)"); return 0; }
    part_run cpubound part_cpubound
    bq -c "ALTER ROLE bench_app RESET synchronous_commit" >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------------------
# The parts of the suite that are not pgbench contenders.  Each hook runs
# one part of bench/parts.sh (what it measures and how is described there)
# if PARTS names it; part_run keeps a failing part from stopping the
# others and records it as not measured.

want_part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# Relay consumption: RELAY_EVENTS events drained by eo's relay (1 and 8
# slots), PgQ batches, and SELECT ... FOR UPDATE SKIP LOCKED + UPDATE.
bench_relay() {
    want_part relay || { TODO_NOTES+=("relay consumption: not run (PARTS)"); return 0; }
    part_run relay part_relay
    bq -c "SELECT eo_outbox_drop(name) FROM eo_internal.eo_outboxes WHERE name = 'relay_ob'" >/dev/null 2>&1 || true
}

# Retention: RETENTION_KEYS expired keys removed by eo's generation drop,
# DELETE + VACUUM and pg_partman 4.x; time, WAL, size, claim p99 meanwhile.
bench_retention() {
    want_part retention || { TODO_NOTES+=("retention: not run (PARTS)"); return 0; }
    part_run retention part_retention
    bq -c "ALTER SYSTEM RESET eo.databases" -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
}

# Scale: claims/s at SCALE_SMALL_KEYS vs SCALE_KEYS stored keys.
bench_scale() {
    want_part scale || { TODO_NOTES+=("scale: not run (PARTS)"); return 0; }
    part_run scale part_scale
    scale_cleanup
}

# Lease reclaim delay with the worker on (eo.naptime = RECLAIM_NAPTIME_S).
bench_reclaim() {
    want_part reclaim || { TODO_NOTES+=("lease reclaim delay: not run (PARTS)"); return 0; }
    part_run reclaim part_reclaim
    reclaim_cleanup
}

# Scrape cost: the exporter queries at SCRAPE_SMALL_KEYS vs SCRAPE_KEYS keys.
bench_scrape() {
    want_part scrape || { TODO_NOTES+=("scrape cost: not run (PARTS)"); return 0; }
    part_run scrape part_scrape
    scrape_cleanup
}

# ---------------------------------------------------------------------------

write_meta() {
    local todo
    [ ! -f "$RESULTS/parts_notes.txt" ] || mapfile -t -O "${#TODO_NOTES[@]}" TODO_NOTES <"$RESULTS/parts_notes.txt"
    [ ! -f "$RESULTS/parts_failed.txt" ] || mapfile -t -O "${#TODO_NOTES[@]}" TODO_NOTES <"$RESULTS/parts_failed.txt"
    todo=$(printf '%s|' "${TODO_NOTES[@]}")
    cat >"$RESULTS/meta.txt" <<EOF
started=$STARTED
rounds=$ROUNDS
duration=$DURATION
clients=$CLIENTS
dup_pct=$DUP_PCT
storm_pct=$STORM_PCT
naccounts=$NACCOUNTS
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
ncpu=$(nproc)
loadavg=$LOADAVG
postgres=$PG_VERSION
eo_version=$EO_VERSION
note=${BENCH_NOTE:-}
todo=$todo
parts=$PARTS
cpubound_clients=$CPUBOUND_CLIENTS
cpubound_rounds=$CPUBOUND_ROUNDS
parts_failed=$(cut -d: -f1 "$RESULTS/parts_failed.txt" 2>/dev/null | paste -sd' ')
parts_time=$(paste -sd' ' "$RESULTS/parts_time.txt" 2>/dev/null)
total_s=$SECONDS
relay_events=$RELAY_EVENTS
relay_page=$RELAY_PAGE
relay_hand_batch=$RELAY_HAND_BATCH
relay_rounds=$RELAY_ROUNDS
retention_keys=$RETENTION_KEYS
retention_chunk=$RETENTION_CHUNK
retention_window=$RETENTION_WINDOW
retention_lead=$RETENTION_LEAD
retention_clients=$RETENTION_CLIENTS
scale_keys=$SCALE_KEYS
scale_small_keys=$SCALE_SMALL_KEYS
scale_gens=$SCALE_GENS
scale_rounds=$SCALE_ROUNDS
scale_duration=$SCALE_DURATION
scale_load=$(paste -sd'|' "$RESULTS/scale_load.txt" 2>/dev/null)
reclaim_leases=$RECLAIM_LEASES
reclaim_spread_ms=$RECLAIM_SPREAD_MS
reclaim_lease_s=$RECLAIM_LEASE_S
reclaim_naptime_s=$RECLAIM_NAPTIME_S
reclaim_poll_ms=$RECLAIM_POLL_MS
scrape_keys=$SCRAPE_KEYS
scrape_small_keys=$SCRAPE_SMALL_KEYS
scrape_n=$SCRAPE_N
scrape_rounds=$SCRAPE_ROUNDS
EOF
}

main() {
    bench_packages
    make_scratch
    EO_VERSION="$(git -C "$REPO_ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
    [ "${BENCH_SKIP_BUILD:-0}" = 1 ] && EO_VERSION="as installed in the system" ||
        EO_VERSION="$EO_VERSION (working tree at build time)"
    bench_build_install
    STARTED=$(date '+%Y-%m-%d %H:%M:%S %Z')
    LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
    RESULTS="$BENCH_DIR/results/$(date +%Y%m%d-%H%M%S)"
    mkdir -p "$RESULTS/pgbench"
    bench_start_server
    setup_database
    make_scripts
    if want_part contenders; then
        plan_jobs
        warm_up
        run_rounds
    else
        TODO_NOTES+=("contenders: not run (PARTS)")
    fi
    PG_VERSION=$(bq -c 'SELECT version()' | sed 's/ on .*//')
    bench_cpubound
    bench_relay
    bench_retention
    bench_scale
    bench_reclaim
    bench_scrape
    stop_server
    write_meta
    log "summary"
    local rc=0
    python3 "$BENCH_DIR/analyze.py" summary "$RESULTS/runs.csv" "$RESULTS" "$RESULTS/meta.txt" || rc=$?
    # shellcheck disable=SC2016  # the backquotes are markdown
    sed 's#(chart.png)#(RESULTS.png)#; s#`runs.csv` (one#`results/'"$(basename "$RESULTS")"'/runs.csv` (one#' \
        "$RESULTS/summary.md" >"$BENCH_DIR/RESULTS.md"
    # No chart without the contenders (PARTS): the old one stays.
    [ ! -f "$RESULTS/chart.png" ] || cp "$RESULTS/chart.png" "$BENCH_DIR/RESULTS.png"
    cat "$RESULTS/summary.md"
    echo
    echo "results: $RESULTS (copied to bench/RESULTS.md, bench/RESULTS.png)"
    [ "$rc" = 0 ] || echo "some runs failed: see the summary" >&2
    return "$rc"
}

main "$@"
