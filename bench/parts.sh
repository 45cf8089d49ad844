# shellcheck shell=bash disable=SC2154  # R_* variables are set by read_kv
# bench/parts.sh -- the parts of the benchmark that are not pgbench
# contenders: relay consumption, retention, scale, lease reclaim.  Sourced
# by run.sh, whose hooks (bench_relay, bench_retention, bench_scale,
# bench_reclaim) call part_run with one of the part_* functions below.
#
# Each part writes its own CSV into $RESULTS (relay.csv, retention_ops.csv,
# retention_load.csv, scale.csv, reclaim.csv); analyze.py summary turns
# them into the sections and targets of summary.md.  A part that fails is
# reported as not measured (with the error), never with made-up figures,
# and the other parts still run.

# ---------------------------------------------------------------------------
# Sizes and settings (environment).  The defaults are the sizes the targets were set for.

RELAY_EVENTS=${RELAY_EVENTS:-400000}      # events drained by each method
RELAY_PAGE=${RELAY_PAGE:-10000}           # eo_relay_fetch max_events; also the load chunk
                                          # (one committed transaction, one PgQ tick, per chunk)
RELAY_HAND_BATCH=${RELAY_HAND_BATCH:-1000} # LIMIT of the hand-written relay's SELECT
RELAY_ROUNDS=${RELAY_ROUNDS:-2}           # rounds of the four drains, alternating order
# eo_8slots_2relays: two relays side by side in the group (target: >= 1.5x PgQ);
# eo_8slots_wide: one relay fetching from all 8 slots per call (target: >= 1.0x PgQ)
RELAY_METHODS=${RELAY_METHODS:-"eo_1slot eo_8slots eo_8slots_wide eo_8slots_2relays pgq hand"}

RETENTION_KEYS=${RETENTION_KEYS:-1000000} # expired keys removed by each contender
RETENTION_CHUNK=${RETENTION_CHUNK:-100000} # keys per loading transaction (eo_claim)
RETENTION_WINDOW=${RETENTION_WINDOW:-8}   # seconds of claim load per window
RETENTION_LEAD=${RETENTION_LEAD:-2}       # seconds of load before the operation starts
RETENTION_CLIENTS=${RETENTION_CLIENTS:-2} # pgbench clients of the claim load

SCALE_KEYS=${SCALE_KEYS:-10000000}        # keys stored in the big setting
SCALE_SMALL_KEYS=${SCALE_SMALL_KEYS:-10000}
SCALE_GENS=${SCALE_GENS:-8}               # generations the keys are spread over
SCALE_TXN_KEYS=${SCALE_TXN_KEYS:-250000}  # keys per loading transaction
SCALE_LOAD_JOBS=${SCALE_LOAD_JOBS:-2}     # loading sessions in parallel
SCALE_ROUNDS=${SCALE_ROUNDS:-3}
SCALE_DURATION=${SCALE_DURATION:-${DURATION:-8}}

RECLAIM_LEASES=${RECLAIM_LEASES:-200}     # leases claimed and abandoned
RECLAIM_SPREAD_MS=${RECLAIM_SPREAD_MS:-25} # one claim every 25 ms
RECLAIM_LEASE_S=${RECLAIM_LEASE_S:-1}
RECLAIM_NAPTIME_S=${RECLAIM_NAPTIME_S:-1} # eo.naptime during the part
RECLAIM_POLL_MS=${RECLAIM_POLL_MS:-50}

SCRAPE_KEYS=${SCRAPE_KEYS:-1000000}        # keys stored in the big setting
SCRAPE_SMALL_KEYS=${SCRAPE_SMALL_KEYS:-10000}
SCRAPE_N=${SCRAPE_N:-20}                   # scrapes timed per measurement
SCRAPE_ROUNDS=${SCRAPE_ROUNDS:-3}

# ---------------------------------------------------------------------------
# Helpers

now_s() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }

# Run a part in a subshell with `set -e` in force (a function called from
# an `if` would run with -e off), so that its first failing command ends
# it.  A failed part is recorded in parts_failed.txt and the summary
# reports it as not measured; the suite goes on with the next part.
part_run() {
    local name=$1 fn=$2 rc t0
    t0=$(now_s)
    log "part: $name ($(date +%H:%M:%S))"
    set +e
    ( set -e; "$fn" )
    rc=$?
    set -e
    echo "$name=$(elapsed "$t0" "$(now_s)")" >>"$RESULTS/parts_time.txt"
    if [ "$rc" != 0 ]; then
        echo "$name: failed (exit $rc); see the output above and $RESULTS/parts.log" >>"$RESULTS/parts_failed.txt"
        echo "part $name failed (exit $rc)" >&2
    fi
    return 0
}

# A line for the summary's "Not measured" list, from inside a part.
part_note() { echo "$*" >>"$RESULTS/parts_notes.txt"; }

# psql against database $1 (the rest as for bq).
dbq() { local db=$1; shift; "$PGBIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -d "$db" "$@"; }

# key=value lines (psql \gset then \echo) into shell variables R_<key>.
read_kv() {
    local line
    while IFS= read -r line; do
        case $line in *=*) printf -v "R_${line%%=*}" '%s' "${line#*=}" ;; esac
    done
}

csv_row() { local IFS=,; echo "$*"; }

# Reload the server configuration and give the launcher a moment.
reload_conf() { bq -c "SELECT pg_reload_conf()" >/dev/null; sleep 1; }

# ---------------------------------------------------------------------------
# 1. Relay consumption: the same RELAY_EVENTS events drained by eo's relay
# (one consumer group, 1 slot and 8 slots), by PgQ batches and by the
# hand-written SKIP LOCKED relay.  Each drain is one consumer running as a
# plpgsql procedure in the server (bench_relay_drain_* in parts.sql) that
# commits after every batch, so no client round trips are counted for
# anyone.  Loading is not timed as part of the drain.

relay_one() {
    local round=$1 method=$2 t0 load_s lsn0 res events batches secs wal status=ok
    case $method in
        eo_*slot*)
            local slots=${method#eo_}; slots=${slots%%slot*}
            bq >/dev/null <<EOF
SELECT eo_outbox_drop('relay_ob') FROM eo_internal.eo_outboxes WHERE name = 'relay_ob';
SELECT eo_outbox_create('relay_ob', slots => $slots);
SELECT eo_group_create('relay_ob', 'relay');
EOF
            t0=$(now_s)
            bq -c "CALL bench_relay_load('eo', 'relay_ob', $RELAY_EVENTS, $RELAY_PAGE)" >/dev/null
            ;;
        pgq)
            bq >/dev/null <<EOF
SELECT pgq.drop_queue('relayq', true) FROM pgq.queue WHERE queue_name = 'relayq';
SELECT pgq.create_queue('relayq');
SELECT pgq.register_consumer('relayq', 'relay');
EOF
            t0=$(now_s)
            bq -c "CALL bench_relay_load('pgq', 'relayq', $RELAY_EVENTS, $RELAY_PAGE)" >/dev/null
            ;;
        hand)
            bq -c "TRUNCATE relay_outbox RESTART IDENTITY" >/dev/null
            t0=$(now_s)
            bq -c "CALL bench_relay_load('hand', NULL, $RELAY_EVENTS, $RELAY_PAGE)" >/dev/null
            ;;
        *) echo "unknown relay method $method" >&2; return 1 ;;
    esac
    load_s=$(elapsed "$t0" "$(now_s)")
    bq -c "CHECKPOINT" >/dev/null
    lsn0=$(bq -c "SELECT pg_current_wal_lsn()")
    case $method in
        eo_*_2relays)
            # Two relays side by side: events and batches add up; the time
            # runs from the first start to the last end.
            bq -c "CALL bench_relay_drain_eo('relay_ob', 'relay', $RELAY_PAGE)" >"$EO_TMP/relay_a.out" &
            local pid_a=$!
            bq -c "CALL bench_relay_drain_eo('relay_ob', 'relay', $RELAY_PAGE)" >"$EO_TMP/relay_b.out"
            wait "$pid_a"
            res=$(cat "$EO_TMP/relay_a.out" "$EO_TMP/relay_b.out" | awk -F'|' '
                NR == 1 || $4 < s { s = $4 } NR == 1 || $5 > e { e = $5 }
                { n += $1; b += $2 } END { printf "%d|%d|%.6f\n", n, b, e - s }')
            ;;
        eo_*_wide) res=$(bq -c "CALL bench_relay_drain_eo('relay_ob', 'relay', $RELAY_PAGE, 8)") ;;
        eo_*) res=$(bq -c "CALL bench_relay_drain_eo('relay_ob', 'relay', $RELAY_PAGE)") ;;
        pgq) res=$(bq -c "CALL bench_relay_drain_pgq('relayq', 'relay')") ;;
        hand) res=$(bq -c "CALL bench_relay_drain_hand($RELAY_HAND_BATCH)") ;;
    esac
    wal=$(bq -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0')::bigint")
    IFS='|' read -r events batches secs _ <<<"$res"
    [ "$events" = "$RELAY_EVENTS" ] || status="drained $events of $RELAY_EVENTS events"
    printf '  %-10s round %s: %s events in %.3f s = %s events/s, %s batches, WAL %s B/event (load %s s) [%s]\n' \
        "$method" "$round" "$events" "$secs" \
        "$(python3 -c "print(round($events / $secs))")" "$batches" \
        "$(python3 -c "print(round($wal / max($events, 1), 1))")" "$load_s" "$status"
    [ -f "$RESULTS/relay.csv" ] ||
        csv_row round method events batches secs wal_bytes load_secs page hand_batch status >"$RESULTS/relay.csv"
    csv_row "$round" "$method" "$events" "$batches" "$secs" "$wal" "$load_s" \
        "$RELAY_PAGE" "$RELAY_HAND_BATCH" "$status" >>"$RESULTS/relay.csv"
    # Free the space for the next drain.
    case $method in
        eo_*) bq -c "SELECT eo_outbox_drop('relay_ob')" >/dev/null ;;
        pgq) bq -c "SELECT pgq.drop_queue('relayq', true)" >/dev/null ;;
        hand) bq -c "TRUNCATE relay_outbox RESTART IDENTITY" >/dev/null ;;
    esac
}

part_relay() {
    local methods=() m r i
    for m in $RELAY_METHODS; do
        if [ "$m" = pgq ] && [ "$HAVE_PGQ" != 1 ]; then
            part_note "relay: PgQ batch consumption: the pgq extension is not available (postgresql-15-pgq3)"
            continue
        fi
        methods+=("$m")
    done
    for r in $(seq 1 "$RELAY_ROUNDS"); do
        local order=("${methods[@]}")
        if [ $((r % 2)) = 0 ]; then
            order=()
            for ((i = ${#methods[@]} - 1; i >= 0; i--)); do order+=("${methods[$i]}"); done
        fi
        for m in "${order[@]}"; do relay_one "$r" "$m"; done
    done
}

# ---------------------------------------------------------------------------
# 2. Retention: RETENTION_KEYS expired keys removed by eo (switch, retire,
# then the drop of the retired generation: three eo_maintain() calls), by
# DELETE + VACUUM of a plain table with a unique index (`processed`), and
# by pg_partman 4.x retention (run_maintenance on a native-partitioned
# table).  Each contender is set up twice: once to measure the operation
# alone (time, WAL, size; nothing else running), once to measure a pgbench
# claim load (RETENTION_CLIENTS clients) over RETENTION_WINDOW seconds
# with the operation starting RETENTION_LEAD seconds in, against a
# baseline window of the same load without the operation.  The worker is
# kept out of the benchmark database meanwhile (eo.databases), so that
# only the measured eo_maintain() calls retire and drop.

ret_setup_eo() {
    local i n t0
    reset_state eo
    t0=$(now_s)
    for ((i = 0; i < RETENTION_KEYS; i += RETENTION_CHUNK)); do
        n=$((i + RETENTION_CHUNK < RETENTION_KEYS ? i + RETENTION_CHUNK : RETENTION_KEYS))
        bq -c "SELECT count(*) FROM generate_series($((i + 1)), $n) g, LATERAL eo_claim('r:' || g) c" >/dev/null
    done
    R_load_s=$(elapsed "$t0" "$(now_s)")
    # Switch: the generation holding the keys stops taking new ones ...
    local sw
    sw=$(bq <<'EOF'
SET eo.partition_interval = 1;
SELECT pg_sleep(1.1) AS slept \gset
SELECT switched FROM eo_maintain();
EOF
)
    [ "$sw" = 1 ] || { echo "eo_maintain() did not switch generations (switched=$sw)" >&2; return 1; }
    # ... and is older than eo.retention (1 s) when the retire call comes.
    sleep 1.2
    bq -c "CHECKPOINT" >/dev/null
}

# The two measured eo_maintain() calls: the one that retires, then the one
# that drops (retried every 100 ms while a claim that started before the
# retirement still holds the table: the drop never waits).  Retention 1 s;
# the interval back at 1 day so that neither call switches generations
# (a switch is not what is measured here).
ret_op_eo() {
    local phase=$1 attempt out
    out=$(bq <<'EOF'
SET eo.retention = 1;
SET eo.partition_interval = '1d';
SELECT extract(epoch FROM clock_timestamp()) AS t0, pg_current_wal_lsn() AS l0,
       (SELECT sum(bytes) FROM eo_partitions) AS s0 \gset
SELECT retired FROM eo_maintain() \gset
SELECT extract(epoch FROM clock_timestamp()) AS t1,
       pg_wal_lsn_diff(pg_current_wal_lsn(), :'l0')::bigint AS w,
       (SELECT sum(bytes) FROM eo_partitions) AS s1 \gset
\echo t0=:t0
\echo t1=:t1
\echo wal=:w
\echo retired=:retired
\echo size0=:s0
\echo size1=:s1
EOF
)
    read_kv <<<"$out"
    [ "$R_retired" -ge 1 ] || { echo "eo_maintain() retired nothing (retired=$R_retired)" >&2; return 1; }
    ret_op_row eo "$phase" retire "$R_t0" "$R_t1" "$R_wal" "$R_size0" "$R_size1" 1
    OP_T0=$R_t0
    for attempt in $(seq 1 50); do
        out=$(bq <<'EOF'
SET eo.retention = 1;
SET eo.partition_interval = '1d';
SELECT extract(epoch FROM clock_timestamp()) AS t0, pg_current_wal_lsn() AS l0,
       (SELECT sum(bytes) FROM eo_partitions) AS s0 \gset
SELECT dropped FROM eo_maintain() \gset
SELECT extract(epoch FROM clock_timestamp()) AS t1,
       pg_wal_lsn_diff(pg_current_wal_lsn(), :'l0')::bigint AS w,
       (SELECT sum(bytes) FROM eo_partitions) AS s1 \gset
\echo t0=:t0
\echo t1=:t1
\echo wal=:w
\echo dropped=:dropped
\echo size0=:s0
\echo size1=:s1
EOF
)
        read_kv <<<"$out"
        [ "$R_dropped" -ge 1 ] && break
        sleep 0.1
    done
    [ "$R_dropped" -ge 1 ] || { echo "eo_maintain() dropped nothing in 50 tries" >&2; return 1; }
    ret_op_row eo "$phase" drop "$R_t0" "$R_t1" "$R_wal" "$R_size0" "$R_size1" "$attempt"
    OP_T1=$R_t1
}

ret_setup_delete() {
    local t0
    bq -c "TRUNCATE processed" >/dev/null
    t0=$(now_s)
    bq -c "INSERT INTO processed (key, status, created_at)
           SELECT 'r:' || g, 'DONE', now() - interval '10 days'
             FROM generate_series(1, $RETENTION_KEYS) g" >/dev/null
    R_load_s=$(elapsed "$t0" "$(now_s)")
    bq -c "VACUUM ANALYZE processed" >/dev/null
    bq -c "CHECKPOINT" >/dev/null
}

ret_op_delete() {
    local phase=$1 out
    out=$(bq <<'EOF'
SELECT extract(epoch FROM clock_timestamp()) AS t0, pg_current_wal_lsn() AS l0,
       pg_total_relation_size('processed') AS s0 \gset
DELETE FROM processed WHERE created_at < now() - interval '7 days';
SELECT extract(epoch FROM clock_timestamp()) AS t1, pg_current_wal_lsn() AS l1,
       pg_wal_lsn_diff(pg_current_wal_lsn(), :'l0')::bigint AS w1,
       pg_total_relation_size('processed') AS s1 \gset
VACUUM processed;
SELECT extract(epoch FROM clock_timestamp()) AS t2,
       pg_wal_lsn_diff(pg_current_wal_lsn(), :'l1')::bigint AS w2,
       pg_total_relation_size('processed') AS s2 \gset
\echo t0=:t0
\echo t1=:t1
\echo t2=:t2
\echo wal1=:w1
\echo wal2=:w2
\echo size0=:s0
\echo size1=:s1
\echo size2=:s2
EOF
)
    read_kv <<<"$out"
    ret_op_row delete "$phase" delete "$R_t0" "$R_t1" "$R_wal1" "$R_size0" "$R_size1" 1
    ret_op_row delete "$phase" vacuum "$R_t1" "$R_t2" "$R_wal2" "$R_size1" "$R_size2" 1
    OP_T0=$R_t0 OP_T1=$R_t2
}

PM_SIZE="(SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('processed_pm') WHERE isleaf)"
ret_setup_partman() {
    local t0
    bq >/dev/null <<EOF
SET client_min_messages = warning;
DELETE FROM partman.part_config WHERE parent_table = 'public.processed_pm';
DROP TABLE IF EXISTS partman.template_public_processed_pm;
DROP TABLE IF EXISTS processed_pm;
CREATE TABLE processed_pm (
    key        text NOT NULL,
    status     text NOT NULL,
    result     jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, created_at)) PARTITION BY RANGE (created_at);
GRANT SELECT, INSERT, UPDATE ON processed_pm TO bench_app;
SELECT partman.create_parent('public.processed_pm', 'created_at', 'native', 'daily',
                             p_premake := 4, p_jobmon := false,
                             p_start_partition := (now() - interval '10 days')::text);
UPDATE partman.part_config SET retention = '7 days', retention_keep_table = false,
       retention_keep_index = false
 WHERE parent_table = 'public.processed_pm';
EOF
    t0=$(now_s)
    bq -c "INSERT INTO processed_pm (key, status, created_at)
           SELECT 'r:' || g, 'DONE', date_trunc('day', now()) - interval '9 days' + interval '1 hour'
             FROM generate_series(1, $RETENTION_KEYS) g" >/dev/null
    R_load_s=$(elapsed "$t0" "$(now_s)")
    bq -c "VACUUM ANALYZE processed_pm" >/dev/null
    bq -c "CHECKPOINT" >/dev/null
}

ret_op_partman() {
    local phase=$1 out
    out=$(bq <<EOF
SELECT extract(epoch FROM clock_timestamp()) AS t0, pg_current_wal_lsn() AS l0,
       $PM_SIZE AS s0, (SELECT count(*) FROM pg_partition_tree('processed_pm') WHERE isleaf) AS p0 \gset
SELECT partman.run_maintenance('public.processed_pm', p_jobmon := false);
SELECT extract(epoch FROM clock_timestamp()) AS t1,
       pg_wal_lsn_diff(pg_current_wal_lsn(), :'l0')::bigint AS w,
       $PM_SIZE AS s1, (SELECT count(*) FROM pg_partition_tree('processed_pm') WHERE isleaf) AS p1 \gset
\echo t0=:t0
\echo t1=:t1
\echo wal=:w
\echo size0=:s0
\echo size1=:s1
\echo parts0=:p0
\echo parts1=:p1
EOF
)
    read_kv <<<"$out"
    [ "$R_parts1" -lt "$R_parts0" ] || { echo "partman run_maintenance dropped no partition" >&2; return 1; }
    ret_op_row partman "$phase" run_maintenance "$R_t0" "$R_t1" "$R_wal" "$R_size0" "$R_size1" 1
    OP_T0=$R_t0 OP_T1=$R_t1
}

ret_op_row() {
    local contender=$1 phase=$2 step=$3 t0=$4 t1=$5 wal=$6 s0=$7 s1=$8 attempts=$9
    [ -f "$RESULTS/retention_ops.csv" ] ||
        csv_row contender phase step keys secs wal_bytes size_before size_after attempts load_secs \
            >"$RESULTS/retention_ops.csv"
    csv_row "$contender" "$phase" "$step" "$RETENTION_KEYS" "$(elapsed "$t0" "$t1")" "$wal" \
        "$s0" "$s1" "$attempts" "${R_load_s:-}" >>"$RESULTS/retention_ops.csv"
    printf '  %-8s %-5s %-16s %8.3f s  WAL %12s B  size %s -> %s B  (tries %s)\n' \
        "$contender" "$phase" "$step" "$(elapsed "$t0" "$t1")" "$wal" "$s0" "$s1" "$attempts"
}

# One window of claim load; with an operation, it starts RETENTION_LEAD
# seconds in.  Latency figures over the whole window, and over the
# transactions in flight while the operation ran.
ret_window() {
    local contender=$1 kind=$2 script=$3 nstart=$4 op=${5:-} pid out lat
    local tag="ret_${contender}_${kind}" prefix
    prefix="$EO_TMP/logs/$tag"
    out="$RESULTS/pgbench/$tag.txt"
    "$PGBIN/pgbench" -n -M prepared -c "$RETENTION_CLIENTS" -j 1 -T "$RETENTION_WINDOW" \
        --random-seed="$SEED" -D n="$nstart" -D dup_pct="$DUP_PCT" -D naccounts="$NACCOUNTS" \
        --log --log-prefix="$prefix" -U bench_app -f "$script" "$BENCH_DB" >"$out" 2>&1 &
    pid=$!
    OP_T0="" OP_T1=""
    if [ -n "$op" ]; then
        sleep "$RETENTION_LEAD"
        "$op" load      # a failure ends the part (set -e); pgbench ends by itself
    fi
    wait "$pid" || { echo "pgbench failed during the $contender $kind window: $(grep -m1 -iE 'error|abort' "$out")" >&2; return 1; }
    wait_for_backends
    if grep -qE 'aborted|^pgbench: error' "$out"; then
        echo "pgbench errors in the $contender $kind window: $(grep -m1 -iE 'error|abort' "$out")" >&2
        return 1
    fi
    if [ -n "$OP_T0" ]; then
        lat=$(python3 "$BENCH_DIR/analyze.py" lat "$prefix" "$out" "$OP_T0" "$OP_T1")
    else
        lat=$(python3 "$BENCH_DIR/analyze.py" lat "$prefix" "$out")
    fi
    rm -f "$prefix".[0-9]*
    R_first_s="" R_op_n="" R_op_p99_ms="" R_op_max_ms=""
    read_kv <<<"$(tr ' ' '\n' <<<"$lat")"
    local op_start="" op_end=""
    if [ -n "$OP_T0" ]; then
        op_start=$(elapsed "$R_first_s" "$OP_T0")
        op_end=$(elapsed "$R_first_s" "$OP_T1")
    fi
    [ -f "$RESULTS/retention_load.csv" ] ||
        csv_row contender window clients secs txns tps p50_ms p99_ms max_ms op_start_s op_end_s \
            op_txns op_p99_ms op_max_ms >"$RESULTS/retention_load.csv"
    csv_row "$contender" "$kind" "$RETENTION_CLIENTS" "$RETENTION_WINDOW" "$R_txns" "$R_tps" \
        "$R_p50_ms" "$R_p99_ms" "$R_max_ms" "$op_start" "$op_end" "$R_op_n" "$R_op_p99_ms" \
        "$R_op_max_ms" >>"$RESULTS/retention_load.csv"
    printf '  %-8s %-8s load: %s txns, p50 %s ms, p99 %s ms, max %s ms%s\n' "$contender" "$kind" \
        "$R_txns" "$R_p50_ms" "$R_p99_ms" "$R_max_ms" \
        "${OP_T0:+; op at ${op_start}-${op_end} s: $R_op_n txns in flight, p99 $R_op_p99_ms ms, max $R_op_max_ms ms}"
}

part_retention() {
    local have_partman=0 c
    bq -c "ALTER SYSTEM SET eo.databases = 'postgres'" >/dev/null
    reload_conf
    if bq -c "SELECT 1 FROM pg_available_extensions WHERE name = 'pg_partman' AND default_version LIKE '4.%'" | grep -q 1; then
        bq >/dev/null <<'EOF'
SET client_min_messages = warning;
CREATE SCHEMA IF NOT EXISTS partman;
CREATE EXTENSION IF NOT EXISTS pg_partman SCHEMA partman;
EOF
        have_partman=1
    else
        part_note "retention: pg_partman 4.x is not available on this server (postgresql-15-partman); its contender did not run"
    fi
    sed -E 's/\bprocessed\b/processed_pm/g' "$EO_TMP/scripts/hand.sql" >"$EO_TMP/scripts/_ret_partman.sql"
    for c in eo delete partman; do
        [ "$c" != partman ] || [ "$have_partman" = 1 ] || continue
        local script
        case $c in
            eo) script=$EO_TMP/scripts/eo.sql ;;
            delete) script=$EO_TMP/scripts/hand.sql ;;
            partman) script=$EO_TMP/scripts/_ret_partman.sql ;;
        esac
        log "retention: $c, operation alone"
        "ret_setup_$c"
        echo "  $c: $RETENTION_KEYS keys loaded in $R_load_s s"
        "ret_op_$c" quiet
        log "retention: $c, claim load with and without the operation"
        "ret_setup_$c"
        ret_window "$c" baseline "$script" 0
        ret_window "$c" window "$script" 50000000 "ret_op_$c"
    done
    bq -c "TRUNCATE processed" >/dev/null
    if [ "$have_partman" = 1 ]; then
        bq -c "DROP TABLE processed_pm" >/dev/null
    fi
}

# ---------------------------------------------------------------------------
# 3. Scale: claims/s of the eo contender (1 client, every key new) with
# SCALE_SMALL_KEYS keys stored in one generation (a young store),
# SCALE_SMALL_KEYS keys over SCALE_GENS generations, and SCALE_KEYS keys over
# SCALE_GENS generations.  Each setting is its own database, loaded once
# through eo_claim in big transactions, with eo_maintain() switching
# generations between chunks (eo.partition_interval = 1 in that session);
# then ANALYZE, and rounds of one pgbench run per setting in alternating
# order.  Every run claims keys no run used before (-D n=<offset>), so a
# setting's store grows by the run's keys (reported as stored_keys).

SCALE_SETTINGS=()
scale_db_setup() {
    local db=$1
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
    dbq "$db" >/dev/null <<EOF
SET client_min_messages = warning;
CREATE EXTENSION eo;
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO accounts (id, balance) SELECT g, 0 FROM generate_series(1, $NACCOUNTS) g;
GRANT SELECT, INSERT, UPDATE ON accounts TO bench_app;
GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text), eo_complete(text, jsonb, bigint, text) TO bench_app;
EOF
}

# Claim keys [from, to] in transactions of SCALE_TXN_KEYS.
scale_claim_range() {
    local db=$1 from=$2 to=$3 i n
    for ((i = from; i <= to; i += SCALE_TXN_KEYS)); do
        n=$((i + SCALE_TXN_KEYS - 1 < to ? i + SCALE_TXN_KEYS - 1 : to))
        dbq "$db" -c "SELECT count(*) FROM generate_series($i, $n) g, LATERAL eo_claim('s:' || g) c" >/dev/null
    done
}

scale_load() {
    local db=$1 keys=$2 gens=$3 g per from to j jobs pids sw
    per=$(((keys + gens - 1) / gens))
    for ((g = 0; g < gens; g++)); do
        from=$((g * per + 1)); to=$(((g + 1) * per < keys ? (g + 1) * per : keys))
        [ "$from" -le "$to" ] || break
        jobs=$SCALE_LOAD_JOBS; [ $((to - from + 1)) -ge $((jobs * 1000)) ] || jobs=1
        pids=()
        for ((j = 0; j < jobs; j++)); do
            scale_claim_range "$db" $((from + j * (to - from + 1) / jobs)) \
                $((from + (j + 1) * (to - from + 1) / jobs - 1)) &
            pids+=($!)
        done
        for j in "${pids[@]}"; do wait "$j"; done
        if [ $((g + 1)) -lt "$gens" ]; then
            sw=$(dbq "$db" <<'EOF'
SET eo.partition_interval = 1;
SELECT pg_sleep(greatest(0, 1.05 - extract(epoch FROM clock_timestamp() - started_at)))
  FROM eo_internal.eo_generations WHERE state = 'c' \gset
SELECT switched FROM eo_maintain();
EOF
)
            [ "$sw" = 1 ] || { echo "scale: no generation switch in $db (switched=$sw)" >&2; return 1; }
        fi
    done
}

scale_run() {
    local round=$1 setting=$2 db="scale_$2" tag out prefix rc=0 status=ok lat seq gens nstart
    tag="scale_r${round}_${setting}"
    out="$RESULTS/pgbench/$tag.txt"
    prefix="$EO_TMP/logs/$tag"
    nstart=$((round * 100000000))
    dbq "$db" -c "CHECKPOINT" -c "SELECT pg_stat_reset()" >/dev/null
    "$PGBIN/pgbench" -n -M prepared -c 1 -j 1 -T "$SCALE_DURATION" --random-seed="$SEED" \
        -D n="$nstart" -D dup_pct=0 -D naccounts="$NACCOUNTS" \
        --log --log-prefix="$prefix" -U bench_app -f "$EO_TMP/scripts/eo.sql" "$db" >"$out" 2>&1 || rc=$?
    wait_for_backends
    if [ "$rc" != 0 ] || grep -qE 'aborted|^pgbench: error' "$out"; then
        status="pgbench rc=$rc: $(grep -m1 -E 'error|abort' "$out" | tr ',\n' '; ' | cut -c1-200)"
    fi
    lat=$(python3 "$BENCH_DIR/analyze.py" lat "$prefix" "$out")
    rm -f "$prefix".[0-9]*
    read_kv <<<"$(tr ' ' '\n' <<<"$lat")"
    seq=$(dbq "$db" -c "SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_user_tables WHERE relname LIKE 'eo\_keys%'")
    gens=$(dbq "$db" -c "SELECT count(*) FROM eo_internal.eo_generations WHERE state IN ('c', 'o')")
    [ -f "$RESULTS/scale.csv" ] ||
        csv_row round setting stored_keys generations secs txns tps p50_ms p99_ms key_seq_scans status \
            >"$RESULTS/scale.csv"
    csv_row "$round" "$setting" "${SCALE_STORED[$setting]}" "$gens" "$SCALE_DURATION" "$R_txns" \
        "$R_tps" "$R_p50_ms" "$R_p99_ms" "$seq" "$status" >>"$RESULTS/scale.csv"
    printf '  %-8s round %s: %s keys stored in %s generations: tps %s, p50 %s ms, p99 %s ms, key seq scans %s [%s]\n' \
        "$setting" "$round" "${SCALE_STORED[$setting]}" "$gens" "$(printf '%.1f' "$R_tps")" "$R_p50_ms" "$R_p99_ms" "$seq" "$status"
    local stored=${SCALE_STORED[$setting]}
    SCALE_STORED[$setting]=$((stored + R_txns))
}

declare -A SCALE_STORED
part_scale() {
    local s keys gens t0 load_s r i
    SCALE_SETTINGS=(small_1gen "small_${SCALE_GENS}gen" "big_${SCALE_GENS}gen")
    for s in "${SCALE_SETTINGS[@]}"; do
        case $s in
            small_1gen) keys=$SCALE_SMALL_KEYS gens=1 ;;
            small_*) keys=$SCALE_SMALL_KEYS gens=$SCALE_GENS ;;
            big_*) keys=$SCALE_KEYS gens=$SCALE_GENS ;;
        esac
        scale_db_setup "scale_$s"
        t0=$(now_s)
        scale_load "scale_$s" "$keys" "$gens"
        load_s=$(elapsed "$t0" "$(now_s)")
        local t1; t1=$(now_s)
        dbq "scale_$s" -c "ANALYZE" >/dev/null
        echo "  $s: $keys keys over $gens generation(s) loaded in $load_s s (ANALYZE $(elapsed "$t1" "$(now_s)") s)"
        echo "$s=$keys keys, $gens generations, load ${load_s} s, $(dbq "scale_$s" -c "SELECT pg_size_pretty(sum(bytes)) FROM eo_partitions")" \
            >>"$RESULTS/scale_load.txt"
        SCALE_STORED[$s]=$keys
    done
    for r in $(seq 1 "$SCALE_ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then
            for s in "${SCALE_SETTINGS[@]}"; do scale_run "$r" "$s"; done
        else
            for ((i = ${#SCALE_SETTINGS[@]} - 1; i >= 0; i--)); do scale_run "$r" "${SCALE_SETTINGS[$i]}"; done
        fi
    done
}

scale_cleanup() {
    local s
    for s in small_1gen "small_${SCALE_GENS}gen" "big_${SCALE_GENS}gen"; do
        "$PGBIN/psql" -X -q -d postgres -c "DROP DATABASE IF EXISTS scale_$s WITH (FORCE)" >/dev/null 2>&1 || true
    done
}

# ---------------------------------------------------------------------------
# 4. Lease reclaim delay with the worker on: eo.naptime = RECLAIM_NAPTIME_S
# for the part (ALTER SYSTEM + reload, reset afterwards); RECLAIM_LEASES
# leases of RECLAIM_LEASE_S claimed one every RECLAIM_SPREAD_MS and never
# completed; every RECLAIM_POLL_MS eo_status of each key not yet seen
# failed (bench_reclaim in parts.sql).  Delay = reclaimed_at - lease expiry,
# reclaimed_at being updated_at of the reclaimed row (the clock of the
# pass that reclaimed it); the delay until a poll saw it is reported too.

part_reclaim() {
    local timeout
    bq >/dev/null <<EOF
ALTER SYSTEM SET eo.naptime = '${RECLAIM_NAPTIME_S}s';
ALTER SYSTEM RESET eo.databases;
EOF
    reload_conf
    [ "$(bq -c "SHOW eo.naptime")" = "${RECLAIM_NAPTIME_S}s" ] ||
        { echo "eo.naptime did not change: $(bq -c 'SHOW eo.naptime')" >&2; return 1; }
    timeout=$((RECLAIM_LEASE_S + 10 * RECLAIM_NAPTIME_S + 10))
    bq -c "CALL bench_reclaim($RECLAIM_LEASES, $RECLAIM_SPREAD_MS, interval '${RECLAIM_LEASE_S}s', $RECLAIM_POLL_MS, $timeout)" >/dev/null
    bq -c "COPY (SELECT k, extract(epoch FROM claimed_at) AS claimed_at,
                        extract(epoch FROM expires_at) AS expires_at,
                        extract(epoch FROM reclaimed_at) AS reclaimed_at,
                        extract(epoch FROM seen_at) AS seen_at, state,
                        round(extract(epoch FROM reclaimed_at - expires_at) * 1000, 1) AS delay_ms,
                        round(extract(epoch FROM seen_at - expires_at) * 1000, 1) AS seen_delay_ms,
                        $RECLAIM_LEASE_S AS lease_s, $RECLAIM_NAPTIME_S AS naptime_s
                   FROM reclaim_obs ORDER BY claimed_at) TO STDOUT WITH (FORMAT csv, HEADER)" \
        >"$RESULTS/reclaim.csv"
    bq -c "SELECT count(*) FILTER (WHERE state = 'failed'), count(*) FILTER (WHERE seen_at IS NULL),
                  percentile_disc(0.5) WITHIN GROUP (ORDER BY d), percentile_disc(0.99) WITHIN GROUP (ORDER BY d),
                  max(d)
             FROM (SELECT *, round(extract(epoch FROM reclaimed_at - expires_at) * 1000) AS d
                     FROM reclaim_obs) o" |
        awk -F'|' '{ printf "  %s leases reclaimed (failed), %s never seen reclaimed; delay after expiry p50 %s ms, p99 %s ms, max %s ms\n", $1, $2, $3, $4, $5 }'
}

reclaim_cleanup() {
    bq -c "ALTER SYSTEM RESET eo.naptime" -c "ALTER SYSTEM RESET eo.databases" >/dev/null 2>&1 || true
    bq -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------------------
# 5. Scrape cost: the exporter queries of monitoring/queries.yaml
# against SCRAPE_SMALL_KEYS and SCRAPE_KEYS stored keys (plus 10 live
# leases, 10 failed keys, one outbox with a group and 1,000 events, half of
# them acknowledged), timed in the server (bench_scrape: every query run
# and its rows read, SCRAPE_N times; ms per whole scrape), the order
# alternating over SCRAPE_ROUNDS rounds.  0.1.0's eo_keys_overview, which
# reads every key, is timed beside them (3 times per round) for contrast.

# The queries of queries.yaml, one per line.
scrape_queries() {
    python3 -c '
import re, sys
text = open(sys.argv[1]).read()
for block in re.findall(r"^  query: \|\n((?:    .*\n)+)", text, re.M):
    print(" ".join(line.strip() for line in block.splitlines()))
' "$REPO_ROOT/monitoring/queries.yaml"
}

scrape_db_setup() {
    local db=$1 keys=$2 i tok
    scale_db_setup "$db"
    scale_load "$db" "$keys" 1
    scrape_queries >"$EO_TMP/scrape_queries.txt"
    dbq "$db" >/dev/null <<EOF
SET client_min_messages = warning;
CREATE TABLE scrape_q (q text);
\\copy scrape_q FROM '$EO_TMP/scrape_queries.txt'
SELECT eo_claim('lease:' || g, lease => '1 hour') FROM generate_series(1, 10) g;
SELECT eo_fail('failed:' || g, 'x', retry_after => '1 hour') FROM generate_series(1, 10) g;
SELECT eo_outbox_create('scrape_ob');
SELECT eo_group_create('scrape_ob', 'g');
INSERT INTO scrape_ob (aggregatetype, aggregateid, type, payload)
SELECT 'a', (g % 100)::text, 't', '{}' FROM generate_series(1, 1000) g;
CREATE FUNCTION bench_scrape(qs text[], n int) RETURNS float8 LANGUAGE plpgsql AS \$f\$
DECLARE
    t0 timestamptz := clock_timestamp();
    q text;
    r record;
BEGIN
    FOR i IN 1 .. n LOOP
        FOREACH q IN ARRAY qs LOOP
            FOR r IN EXECUTE q LOOP END LOOP;
        END LOOP;
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000 / n;
END \$f\$;
ANALYZE;
EOF
    [ "$(dbq "$db" -c "SELECT count(*) FROM scrape_q")" = 4 ] || { echo "scrape: queries.yaml did not give 4 queries" >&2; return 1; }
    # half of the events acknowledged: 4 fetches of up to 125 (one slot each)
    for i in 1 2 3 4; do
        tok=$(dbq "$db" -c "SELECT max(lease_token) FROM eo_relay_fetch('scrape_ob', 'g', 125, '1 hour')")
        [ -z "$tok" ] || dbq "$db" -c "SELECT eo_relay_ack('scrape_ob', 'g', $tok)" >/dev/null
    done
}

scrape_run() {
    local round=$1 setting=$2 keys=$3 db="scrape_$2" ms ov
    ms=$(dbq "$db" -c "SELECT bench_scrape(array_agg(q), $SCRAPE_N) FROM scrape_q")
    ov=$(dbq "$db" -c "SELECT bench_scrape(ARRAY['SELECT * FROM eo_keys_overview'], 3)")
    [ -f "$RESULTS/scrape.csv" ] || csv_row round setting keys scrapes exporter_ms overview_ms >"$RESULTS/scrape.csv"
    csv_row "$round" "$setting" "$keys" "$SCRAPE_N" "$ms" "$ov" >>"$RESULTS/scrape.csv"
    printf '  %-6s round %s: %s keys: exporter scrape %.2f ms, eo_keys_overview %.1f ms\n' "$setting" "$round" "$keys" "$ms" "$ov"
}

part_scrape() {
    local r
    scrape_db_setup scrape_small "$SCRAPE_SMALL_KEYS"
    scrape_db_setup scrape_big "$SCRAPE_KEYS"
    for r in $(seq 1 "$SCRAPE_ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then
            scrape_run "$r" small "$SCRAPE_SMALL_KEYS"; scrape_run "$r" big "$SCRAPE_KEYS"
        else
            scrape_run "$r" big "$SCRAPE_KEYS"; scrape_run "$r" small "$SCRAPE_SMALL_KEYS"
        fi
    done
}

scrape_cleanup() {
    local s
    for s in small big; do
        "$PGBIN/psql" -X -q -d postgres -c "DROP DATABASE IF EXISTS scrape_$s WITH (FORCE)" >/dev/null 2>&1 || true
    done
}
