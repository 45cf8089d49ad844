#!/usr/bin/env bash
# bench/nats.sh -- events from a producer's commit to their effect in a
# second database, through NATS JetStream, side by side:
#   eo    eo_emit into an outbox; eo_nats forward (the group's slots, one
#         fetch for all, woken by eo_relay_wait); eo_nats apply (eo_claim of
#         the event id in the effect's transaction, ack after COMMIT);
#   hand  INSERT into an outbox table with a bigserial id; a FOR UPDATE SKIP
#         LOCKED relay that publishes each row (Nats-Msg-Id) and DELETEs the
#         page after every PubAck, polling every POLL_MS when idle; a
#         consumer with a processed table (INSERT ... ON CONFLICT DO NOTHING);
#   pgq   pgq.insert_event; the same publisher over pgq.next_batch /
#         finish_batch (pgq.ticker() when idle, ticker_max_lag POLL_MS); the
#         same processed-table consumer.
# The hand-written relay and consumer are bench/nats/pipeline.c.  Every
# event's payload carries clock_timestamp() at its INSERT, just before its
# single-statement transaction commits; the consumer's effect (the same
# INSERT INTO applied in all three) records when JetStream stored the
# message and clock_timestamp() in the consumer's transaction.
#
# Phases, each a run per contender, ROUNDS rounds in rotating order:
#   saturation  PRODUCERS pgbench clients emitting as fast as they can for
#               SECS s: end-to-end events/s (events over first commit to
#               last effect) and p50/p99 commit-to-stream, commit-to-effect;
#   paced       PACED_RATE events/s for SECS s: the same latencies;
#   drain       DRAIN_EVENTS events committed first, then the pipeline
#               started: events/s until the last effect.
# Server CPU per event of the relay's and the consumer's backends (from
# /proc, by application_name).  A fresh nats-server (JetStream, own store)
# and a fresh consumer database per run.
#
# Settings (environment): ROUNDS=3, SECS=12, PRODUCERS=2, PACED_RATE=200,
# DRAIN_EVENTS=20000, POLL_MS=50, PAGE=500, CONTENDERS="eo hand pgq",
# PHASES="saturation paced drain", EO_LINGER_MS (eo_nats forward
# --linger-ms; unset: each binary's default, auto since 0.4.0), EO_NATS_BASE (an eo_nats binary to compare with: the
# contender eo_base runs the eo pipeline with it, e.g.
# CONTENDERS="eo eo_base" to measure a change of eo_nats alone).
#
# Usage, as root, from a clone: bash bench/nats.sh   (about 15 minutes)
# Output: bench/results/nats-<timestamp>/summary.md and runs.csv.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
BENCH_PACKAGES="$BENCH_PACKAGES libnats-dev nats-server pkg-config"

ROUNDS=${ROUNDS:-3}
SECS=${SECS:-12}
PRODUCERS=${PRODUCERS:-2}
PACED_RATE=${PACED_RATE:-200}
DRAIN_EVENTS=${DRAIN_EVENTS:-20000}
POLL_MS=${POLL_MS:-50}
PAGE=${PAGE:-500}
EO_LINGER_MS=${EO_LINGER_MS:-}    # eo_nats forward --linger-ms (unset: the binary's default)
EO_NATS_BASE=${EO_NATS_BASE:-}
CONTENDERS=${CONTENDERS:-"eo hand pgq"}
PHASES=${PHASES:-"saturation paced drain"}
PIDS=()

# ---- set-up ----

setup_shop() {
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE shop"
    BENCH_DB=shop bq >/dev/null <<'SQL'
CREATE EXTENSION eo;
CREATE EXTENSION pgq;
CREATE TABLE hand_outbox (id bigserial PRIMARY KEY, aggregateid text NOT NULL,
                          payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
SQL
}

# Empty queues of each kind, and a fresh consumer database.
reset_run() {
    BENCH_DB=shop bq >/dev/null <<SQL
SELECT eo_outbox_drop('bo') FROM eo_internal.eo_outboxes WHERE name = 'bo';
SELECT eo_outbox_create('bo');
SELECT eo_group_create('bo', 'nats');
TRUNCATE hand_outbox RESTART IDENTITY;
SELECT pgq.unregister_consumer('benchq', 'relay') FROM pgq.queue WHERE queue_name = 'benchq';
SELECT pgq.drop_queue('benchq', true) FROM pgq.queue WHERE queue_name = 'benchq';
SELECT pgq.create_queue('benchq');
SELECT pgq.set_queue_config('benchq', 'ticker_max_lag', '${POLL_MS} milliseconds');
SELECT pgq.set_queue_config('benchq', 'ticker_idle_period', '1 second');
SELECT pgq.register_consumer('benchq', 'relay');
VACUUM ANALYZE hand_outbox;
CHECKPOINT;
SQL
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS inbox" \
        -c "CREATE DATABASE inbox"
    BENCH_DB=inbox bq >/dev/null <<'SQL'
CREATE EXTENSION eo;
SELECT eo_scope_create('nats');
CREATE TABLE processed (id text PRIMARY KEY);
CREATE TABLE applied (id text, produced_at timestamptz, stored_at timestamptz,
                      applied_at timestamptz);
SQL
}

nats_start() {
    local dir=$EO_TMP/nats-$1
    NATS_PORT=$(free_port)
    mkdir -p "$dir"
    cat >"$dir/nats.conf" <<EOF
listen: 127.0.0.1:$NATS_PORT
jetstream { store_dir: "$dir/store" }
EOF
    nats-server -c "$dir/nats.conf" >"$dir/log" 2>&1 &
    NATS_PID=$!
    NATS=nats://127.0.0.1:$NATS_PORT
    for _ in $(seq 50); do
        "$PGBIN/eo_nats" stream-info --nats "$NATS" --stream NONE >/dev/null 2>&1 && break
        grep -q "Server is ready" "$dir/log" && break
        sleep 0.1
    done
}

# The stream of contender $1 (fresh server: empty).
stream_add() {
    local subjects
    case $1 in eo | eo_base) subjects='bo.>' ;; hand) subjects='hand.>' ;; pgq) subjects='pgq.>' ;; esac
    "$PGBIN/eo_nats" stream-add --nats "$NATS" --stream S --subjects "$subjects" \
        --duplicate-window 120 >/dev/null
}

# ---- the pipelines ----

start_bg() {
    "$@" >>"$RESULTS/processes.log" 2>&1 &
    PIDS+=($!)
}

start_pipeline() {
    local c=$1 shop="host=$PGHOST port=$PGPORT user=postgres dbname=shop"
    local inbox="host=$PGHOST port=$PGPORT user=postgres dbname=inbox"
    case $c in
        eo | eo_base)
            local bin=$PGBIN/eo_nats
            [ "$c" = eo ] || bin=$EO_NATS_BASE
            PGAPPNAME=relay start_bg "$bin" forward --pg "$shop" --nats "$NATS" \
                --outbox bo --group nats --stream S --max-events "$PAGE" \
                ${EO_LINGER_MS:+--linger-ms "$EO_LINGER_MS"}
            # (eo_nats runs --sql with search_path pg_catalog: the table by its schema)
            PGAPPNAME=consumer start_bg "$bin" apply --pg "$inbox" --nats "$NATS" \
                --stream S --durable c --scope nats --batch "$PAGE" --sql \
                "INSERT INTO public.applied VALUES (\$1, (\$3 ->> 't')::timestamptz, \$5, clock_timestamp())"
            ;;
        hand | pgq)
            PGAPPNAME=relay start_bg "$EO_TMP/pipeline" relay "$c" --pg "$shop" --nats "$NATS" \
                --subject "$c.e" --batch "$PAGE" --poll "$POLL_MS"
            PGAPPNAME=consumer start_bg "$EO_TMP/pipeline" consume --pg "$inbox" --nats "$NATS" \
                --subject "$c.e" --stream S --durable c --batch "$PAGE"
            ;;
    esac
}

stop_pipeline() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}

# The producer's one statement for contender $1.
producer_sql() {
    case $1 in
        eo | eo_base) echo "SELECT eo_emit('bo', 'order', (random() * 1000)::int::text, 'E', jsonb_build_object('t', clock_timestamp()));" ;;
        hand) echo "INSERT INTO hand_outbox (aggregateid, payload) VALUES ((random() * 1000)::int::text, jsonb_build_object('t', clock_timestamp()));" ;;
        pgq) echo "SELECT pgq.insert_event('benchq', 'E', jsonb_build_object('t', clock_timestamp())::text);" ;;
    esac
}

# DRAIN_EVENTS events committed in transactions of 100, pipeline stopped.
preload() {
    local c=$1 sql
    case $c in
        eo | eo_base) sql="SELECT count(eo_emit('bo', 'order', (random() * 1000)::int::text, 'E', jsonb_build_object('t', clock_timestamp()))) FROM generate_series(1, 100)" ;;
        hand) sql="INSERT INTO hand_outbox (aggregateid, payload) SELECT (random() * 1000)::int::text, jsonb_build_object('t', clock_timestamp()) FROM generate_series(1, 100)" ;;
        pgq) sql="SELECT count(pgq.insert_event('benchq', 'E', jsonb_build_object('t', clock_timestamp())::text)) FROM generate_series(1, 100)" ;;
    esac
    echo "$sql;" >"$EO_TMP/preload.sql"
    "$PGBIN/pgbench" -n -c 2 -j 2 -t $((DRAIN_EVENTS / 200)) -f "$EO_TMP/preload.sql" shop \
        >"$RESULTS/pgbench/preload_$c.txt" 2>&1 || die "preload failed"
    [ "$c" != pgq ] || BENCH_DB=shop bq -c "SELECT pgq.force_tick('benchq'); SELECT pgq.ticker()" >/dev/null
}

produced() {
    case $1 in
        eo | eo_base) BENCH_DB=shop bq -c "SELECT count(*) FROM bo" ;;
        hand) BENCH_DB=shop bq -c "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM hand_outbox_id_seq" ;;
        pgq) BENCH_DB=shop bq -c "SELECT queue_data_pfx FROM pgq.queue WHERE queue_name = 'benchq'" |
                 { read -r t; BENCH_DB=shop bq -c "SELECT count(*) FROM $t"; } ;;
    esac
}

wait_applied() {
    local want=$1 got=0
    for _ in $(seq 1200); do
        got=$(BENCH_DB=inbox bq -c "SELECT count(*) FROM applied")
        [ "$got" -ge "$want" ] && return 0
        sleep 0.1
    done
    log "only $got of $want events applied after 120 s"
}

# CPU seconds (user + system) of the backends named $1, from /proc.
backend_cpu() {
    local tck pids p total=0
    tck=$(getconf CLK_TCK)
    pids=$("$PGBIN/psql" -X -A -t -d postgres -c \
        "SELECT pid FROM pg_stat_activity WHERE application_name = '$1'")
    for p in $pids; do
        total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    awk -v t="$total" -v k="$tck" 'BEGIN { printf "%.3f", t / k }'
}

run_one() {
    local round=$1 c=$2 phase=$3 events t0 relay_cpu consumer_cpu out
    reset_run
    nats_start "$round-$c-$phase"
    stream_add "$c"
    out=$RESULTS/pgbench/r${round}_${c}_${phase}.txt
    producer_sql "$c" >"$EO_TMP/produce.sql"
    case $phase in
        saturation | paced)
            start_pipeline "$c"
            sleep 1
            local rate=()
            [ "$phase" = paced ] && rate=(-R "$PACED_RATE")
            "$PGBIN/pgbench" -n -M prepared -c "$PRODUCERS" -j "$PRODUCERS" "${rate[@]}" -T "$SECS" \
                -f "$EO_TMP/produce.sql" shop >"$out" 2>&1 || die "pgbench failed: $out"
            events=$(produced "$c")
            wait_applied "$events"
            t0=""
            ;;
        drain)
            preload "$c"
            events=$(produced "$c")
            t0=$(BENCH_DB=inbox bq -c "SELECT clock_timestamp()")
            start_pipeline "$c"
            wait_applied "$events"
            ;;
    esac
    relay_cpu=$(backend_cpu relay)
    consumer_cpu=$(backend_cpu consumer)
    stop_pipeline
    kill "$NATS_PID" 2>/dev/null || true
    wait "$NATS_PID" 2>/dev/null || true
    BENCH_DB=inbox bq -F, >>"$RESULTS/runs.csv" <<SQL
SELECT $round, '$c', '$phase', count(*), count(DISTINCT id), $events,
       round((count(*) / extract(epoch FROM max(applied_at) - coalesce(nullif('$t0', '')::timestamptz, min(produced_at))))::numeric, 1),
       round((1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY stored_at - produced_at)))::numeric, 1),
       round((1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY stored_at - produced_at)))::numeric, 1),
       round((1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY applied_at - produced_at)))::numeric, 1),
       round((1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY applied_at - produced_at)))::numeric, 1),
       round(1e6 * $relay_cpu / greatest(count(*), 1), 1), round(1e6 * $consumer_cpu / greatest(count(*), 1), 1)
FROM applied
SQL
    tail -n 1 "$RESULTS/runs.csv" | awk -F, '{ printf "  round %s %-4s %-10s %6s events (%s distinct of %s) %8s ev/s  stream p50/p99 %s/%s ms  effect p50/p99 %s/%s ms  cpu/ev relay %s us consumer %s us\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 }'
}

[ "$(id -u)" -eq 0 ] || die "run as root (initdb runs as user postgres)"
bench_packages
command -v nats-server >/dev/null || die "nats-server missing"
make_scratch
bench_build_install
[ -x "$PGBIN/eo_nats" ] || die "eo_nats was not built (libnats-dev missing?)"
[[ " $CONTENDERS " != *" eo_base "* ]] || [ -x "$EO_NATS_BASE" ] || die "eo_base needs EO_NATS_BASE"
cc -O2 -Wall -o "$EO_TMP/pipeline" "$BENCH_DIR/nats/pipeline.c" \
    $(pkg-config --cflags --libs libnats) -I"$("$PG_CONFIG" --includedir)" -lpq ||
    die "bench/nats/pipeline.c did not build"
bench_start_server
RESULTS=$BENCH_DIR/results/nats-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS/pgbench"
echo "round,contender,phase,applied,distinct,produced,events_per_s,stream_p50_ms,stream_p99_ms,effect_p50_ms,effect_p99_ms,relay_cpu_us,consumer_cpu_us" >"$RESULTS/runs.csv"
setup_shop
bench_exit() {
    local rc=$?
    stop_pipeline
    [ -z "${NATS_PID:-}" ] || kill "$NATS_PID" 2>/dev/null || true
    (exit "$rc")
    on_exit
}
trap bench_exit EXIT
read -r -a order <<<"$CONTENDERS"
log "$ROUNDS rounds; phases: $PHASES; $SECS s per run; $PRODUCERS producers; paced at $PACED_RATE/s; drain of $DRAIN_EVENTS"
for r in $(seq 1 "$ROUNDS"); do
    for phase in $PHASES; do
        for c in "${order[@]}"; do run_one "$r" "$c" "$phase"; done
    done
    order=("${order[@]:1}" "${order[0]}")    # rotate who goes first
done
python3 "$BENCH_DIR/nats/summary.py" "$RESULTS/runs.csv" "$(git -C "$REPO_ROOT" describe --always --dirty)" \
    >"$RESULTS/summary.md"
log "summary ($RESULTS/summary.md)"
cat "$RESULTS/summary.md"
