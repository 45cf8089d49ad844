#!/usr/bin/env bash
# bench/standby.sh -- what a consumer group that waits for a standby
# (eo_group_set_standby_slots) costs, on a healthy standby: relay latency
# and drain throughput of such a group against a plain one, side by side
# on the same outbox, the same events and the same servers.
#
# Usage, as root, from a clone of the repository:
#
#     bash bench/standby.sh      (about 5 minutes at the defaults)
#
# Builds the working tree into a private copy of the PostgreSQL
# installation and starts a throwaway primary as bench/run.sh does (fsync
# and synchronous_commit on, autovacuum off, eo preloaded), here also
# listening on 127.0.0.1 and with eo.naptime = 3600 (as bench/ab.sh: no
# maintenance pass lands in a run).  A streaming standby on the same
# machine: pg_basebackup over loopback TCP, primary_slot_name = the
# physical slot 'sb', asynchronous (no synchronous_standby_names), its
# configuration the primary's (an HA pair's; eo's worker does not run in
# recovery), fsync on.  One outbox 'ev' (8 slots, no NOTIFY) and two
# consumer groups: 'plain', and 'safe' with
# eo_group_set_standby_slots('ev', 'safe', '{sb}').
#
# (a) Latency.  A producer paced at PACED_RATE events/s (pgbench -R, each
#     transaction one eo_emit) for the whole part; relays in alternating
#     runs plain, safe, plain, safe, ... (LAT_ROUNDS each, LAT_SECS s
#     each), each one pgbench client looping eo_relay_wait('ev', '1 s',
#     group, '0'), eo_relay_fetch('ev', group, 1000, '30 s', 8, false)
#     (all free slots) and eo_relay_ack_pages of the distinct tokens (the
#     fetch and the ack each its own transaction, as a relay does).  Per
#     event, clock_timestamp() at the fetch minus created_at (the
#     producer's transaction start: its commit is in it, the same for both
#     groups) into an unlogged table; events created in the first WARMUP
#     s of a run are not counted (a group's backlog from the other's run
#     is acknowledged first, not counted).  p50 / p99 per run, the median
#     over runs per group, the ratio safe/plain (of the medians, and per
#     pair of adjacent runs).  Meanwhile pg_stat_replication's flush_lag
#     and write_lag every 0.5 s.
# (b) Throughput.  DRAIN_EVENTS events committed first (transactions of
#     100), the producer stopped; each group drains them in turn (DRAIN_ROUNDS
#     rounds, the group that goes first alternating): eo_relay_fetch('ev',
#     group, DRAIN_PAGE, '30 s', 8, false) (DRAIN_PAGE events in all per
#     fetch, from up to 8 slots), committed, then eo_relay_ack_pages,
#     committed, in a plpgsql procedure in the server, until a fetch returns
#     nothing.  Before each drain a CHECKPOINT and the standby caught up.
#     Events/s per group, the ratio safe/plain per round, and the time the
#     wait added per fetch ((safe - plain) / fetches).
#
# Settings (environment): PACED_RATE=200, LAT_ROUNDS=5, LAT_SECS=15,
# WARMUP=1, DRAIN_EVENTS=50000, DRAIN_PAGE=500, DRAIN_ROUNDS=5,
# BENCH_SKIP_BUILD=1 (the eo installed in the system), EO_KEEP=1.
# Output: bench/results/standby-<timestamp>/summary.md, latency.csv,
# loops.csv (the relay's loops per run), lag.csv, drains.csv, load.txt (uptime at the start and after each part)
# and pgbench/.  A benchmark, not a test: it fails only if a run fails.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

PACED_RATE=${PACED_RATE:-200}
LAT_ROUNDS=${LAT_ROUNDS:-5}
LAT_SECS=${LAT_SECS:-15}
WARMUP=${WARMUP:-1}
DRAIN_EVENTS=${DRAIN_EVENTS:-50000}
DRAIN_PAGE=${DRAIN_PAGE:-500}
DRAIN_ROUNDS=${DRAIN_ROUNDS:-5}
PIDS=()

# ---- the two servers ----

# The primary: bench/run.sh's server, then reachable over loopback TCP.
start_primary() {
    bench_start_server
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres \
        -c "ALTER SYSTEM SET listen_addresses = '127.0.0.1'" \
        -c "ALTER SYSTEM SET eo.naptime = 3600"
    as_pg "$PGBIN/pg_ctl" -D "$EO_TMP/pg/data" -l "$EO_TMP/pg/server.log" -w -t 60 restart \
        >/dev/null || die "the primary did not restart"
}

# The standby: a base backup streaming from the physical slot 'sb'.
start_standby() {
    local sb=$EO_TMP/sb
    log "starting a streaming standby in $sb (slot sb, asynchronous)"
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres \
        -c "SELECT pg_create_physical_replication_slot('sb')" >/dev/null
    mkdir -p "$sb/sock" && chown_scratch
    as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$PGPORT" -U postgres -D "$sb/data" \
        -S sb -R -X stream -c fast >"$sb/basebackup.log" 2>&1 ||
        { cat "$sb/basebackup.log" >&2; die "pg_basebackup failed"; }
    SB_PORT=$(free_port)
    cat >>"$sb/data/postgresql.conf" <<EOF
# ---- bench/standby.sh: the standby ----
port = $SB_PORT
unix_socket_directories = '$sb/sock'
EOF
    SB_UP=1
    as_pg "$PGBIN/pg_ctl" -D "$sb/data" -l "$sb/server.log" -w -t 60 start >/dev/null ||
        die "the standby did not start"
    for _ in $(seq 300); do
        [ "$(bq -d postgres -c "SELECT count(*) FROM pg_stat_replication
                                 WHERE state = 'streaming' AND sync_state = 'async'")" = 1 ] && return 0
        sleep 0.1
    done
    die "the standby does not stream (asynchronously) after 30 s"
}

stop_standby() {
    [ "${SB_UP:-0}" = 1 ] || return 0
    as_pg "$PGBIN/pg_ctl" -D "$EO_TMP/sb/data" -m immediate -w stop >/dev/null 2>&1 || true
    SB_UP=0
}

# Until the standby has flushed all the WAL written so far.
standby_caught_up() {
    for _ in $(seq 600); do
        [ "$(bq -c "SELECT coalesce(bool_and(flush_lsn >= pg_current_wal_lsn()), false)
                    FROM pg_stat_replication")" = t ] && return 0
        sleep 0.05
    done
    die "the standby did not catch up in 30 s"
}

setup_db() {
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE bench"
    bq >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION eo;
SELECT eo_outbox_create('ev', notify => false);
SELECT eo_group_create('ev', 'plain');
SELECT eo_group_create('ev', 'safe');
SELECT eo_group_set_standby_slots('ev', 'safe', '{sb}');
-- per event: ms from its producer's transaction start to the fetch
CREATE UNLOGGED TABLE lat (run int, grp text, ms float8);
CREATE UNLOGGED TABLE drains (round int, grp text, events bigint, fetches int, secs float8);

-- Acknowledge whatever the group has (the other group's run left it a
-- backlog), not counted.
CREATE PROCEDURE catch_up(g text) LANGUAGE plpgsql AS $$
DECLARE toks bigint[];
BEGIN
    LOOP
        SELECT array_agg(DISTINCT lease_token) INTO toks
          FROM eo_relay_fetch('ev', g, 10000, '30 seconds', 8, false);
        EXIT WHEN toks IS NULL;
        COMMIT;
        PERFORM eo_relay_ack_pages('ev', g, toks);
        COMMIT;
    END LOOP;
    COMMIT;
END $$;

-- A drain: fetch (all free slots, pages of `page`), commit, acknowledge,
-- commit; until a fetch returns nothing.
CREATE PROCEDURE drain(r int, g text, page int) LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    n bigint;
    total bigint := 0;
    fetches int := 0;
    toks bigint[];
BEGIN
    LOOP
        SELECT count(*), array_agg(DISTINCT lease_token) INTO n, toks
          FROM eo_relay_fetch('ev', g, page, '30 seconds', 8, false);
        fetches := fetches + 1;
        COMMIT;
        EXIT WHEN n = 0;
        PERFORM eo_relay_ack_pages('ev', g, toks);
        COMMIT;
        total := total + n;
    END LOOP;
    INSERT INTO drains VALUES (r, g, total, fetches, extract(epoch FROM clock_timestamp() - t0));
    COMMIT;
END $$;
SQL
    # the relay of part (a): wait, fetch all free slots, record, acknowledge
    cat >"$EO_TMP/relay.sql" <<'SQL'
SELECT eo_relay_wait('ev', interval '1 second', :grp::text, interval '0');
WITH f AS (
    SELECT lease_token, created_at, clock_timestamp() AS fetched_at
      FROM eo_relay_fetch('ev', :grp::text, 1000, interval '30 seconds', 8, false)),
rec AS (
    INSERT INTO lat
    SELECT :run::int, :grp::text, 1000 * extract(epoch FROM fetched_at - created_at)
      FROM f WHERE created_at >= :t0::timestamptz)
SELECT count(*) AS n, coalesce(array_agg(DISTINCT lease_token), '{}')::text AS toks FROM f \gset
\if :n
SELECT eo_relay_ack_pages('ev', :grp::text, :toks::bigint[]);
\endif
SQL
    echo "SELECT eo_emit('ev', 'order', (random() * 1000)::int::text, 'E', '{\"n\": 1}');" \
        >"$EO_TMP/produce.sql"
}

start_bg() {
    "$@" &
    PIDS+=($!)
}

stop_bg() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}

load() { echo "$1: $(uptime)" >>"$RESULTS/load.txt"; }

# ---- (a) latency ----

# pg_stat_replication every 0.5 s into lag.csv, tagged with run $1 group $2:
# one psql session (\watch), stopped after the run.
start_lag_sampler() {
    LAG_OUT=$EO_TMP/lag-$1
    printf '%s\n' "SELECT $1, '$2', round((1000 * extract(epoch FROM flush_lag))::numeric, 3),
       round((1000 * extract(epoch FROM write_lag))::numeric, 3),
       pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn) FROM pg_stat_replication" '\watch 0.5' \
        >"$LAG_OUT.sql"
    "$PGBIN/psql" -X -q -A -t -F, -d postgres -f "$LAG_OUT.sql" -o "$LAG_OUT.out" 2>/dev/null &
    SAMPLER=$!
}

stop_lag_sampler() {
    kill -INT "$SAMPLER" 2>/dev/null || true
    wait "$SAMPLER" 2>/dev/null || true
    SAMPLER=""
    grep -E '^[0-9]+,' "$LAG_OUT.out" >>"$RESULTS/lag.csv" || true
}

latency_run() {
    local run=$1 grp=$2 t0 out=$RESULTS/pgbench/lat_${1}_$2.txt
    bq -c "CALL catch_up('$grp')" >/dev/null
    t0=$(bq -c "SELECT clock_timestamp() + interval '$WARMUP seconds'")
    start_lag_sampler "$run" "$grp"
    "$PGBIN/pgbench" -n -M prepared -c 1 -j 1 -T "$LAT_SECS" -D grp="$grp" -D run="$run" \
        -D t0="$t0" -f "$EO_TMP/relay.sql" bench >"$out" 2>&1 || die "relay pgbench failed: $out"
    stop_lag_sampler
    ! grep -q aborted "$out" || die "relay pgbench aborted: $out"
    echo "$run,$grp,$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")" \
        >>"$RESULTS/loops.csv"
    bq -F' ' -c "SELECT count(*), round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2),
                        round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2)
                   FROM lat WHERE run = $run" |
        { read -r n p50 p99; printf '  run %s %-5s %6s events  p50 %8s ms  p99 %8s ms\n' "$run" "$grp" "$n" "$p50" "$p99"; }
}

part_latency() {
    local run=0 r grp
    log "(a) latency: producer at $PACED_RATE events/s; $LAT_ROUNDS runs per group of $LAT_SECS s, alternating"
    echo "run,grp,flush_lag_ms,write_lag_ms,behind_bytes" >"$RESULTS/lag.csv"
    echo "run,grp,loops" >"$RESULTS/loops.csv"
    start_bg "$PGBIN/pgbench" -n -M prepared -c 2 -j 2 -R "$PACED_RATE" -T 3600 \
        -f "$EO_TMP/produce.sql" bench >"$RESULTS/pgbench/producer.txt" 2>&1
    sleep 2
    for r in $(seq 1 "$LAT_ROUNDS"); do
        for grp in plain safe; do
            run=$((run + 1))
            latency_run "$run" "$grp"
        done
    done
    stop_bg
    bq -F, -c "SELECT run, grp, count(*),
                      round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3),
                      round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 3),
                      round(max(ms)::numeric, 3)
                 FROM lat GROUP BY run, grp ORDER BY run" |
        { echo "run,grp,events,p50_ms,p99_ms,max_ms"; cat; } >"$RESULTS/latency.csv"
}

# ---- (b) throughput ----

part_drain() {
    local r grp order
    log "(b) throughput: $DRAIN_EVENTS events drained by each group, fetches of $DRAIN_PAGE events from up to 8 slots, $DRAIN_ROUNDS rounds"
    bq -c "CALL catch_up('plain')" -c "CALL catch_up('safe')" >/dev/null
    echo "SELECT count(eo_emit('ev', 'order', (random() * 1000)::int::text, 'E', '{\"n\": 1}')) FROM generate_series(1, 100);" \
        >"$EO_TMP/preload.sql"
    for r in $(seq 1 "$DRAIN_ROUNDS"); do
        "$PGBIN/pgbench" -n -c 2 -j 2 -t $((DRAIN_EVENTS / 200)) -f "$EO_TMP/preload.sql" bench \
            >"$RESULTS/pgbench/preload_$r.txt" 2>&1 || die "preload failed"
        if [ $((r % 2)) = 1 ]; then order="plain safe"; else order="safe plain"; fi
        for grp in $order; do
            bq -c "CHECKPOINT" >/dev/null
            standby_caught_up
            bq -c "CALL drain($r, '$grp', $DRAIN_PAGE)" >/dev/null
            bq -F' ' -c "SELECT events, fetches, round(secs::numeric, 3), round((events / secs)::numeric)
                           FROM drains WHERE round = $r AND grp = '$grp'" |
                { read -r n f s rate
                  printf '  round %s %-5s %6s events in %s fetches, %7s s: %7s events/s\n' "$r" "$grp" "$n" "$f" "$s" "$rate"
                  [ "$n" = $((DRAIN_EVENTS / 200 * 200)) ] || echo "  warning: $n events drained, $((DRAIN_EVENTS / 200 * 200)) committed"; }
        done
    done
    bq -F, -c "SELECT round, grp, events, fetches, round(secs::numeric, 4), round((events / secs)::numeric, 1)
                 FROM drains ORDER BY 1, 2" |
        { echo "round,grp,events,fetches,secs,events_per_s"; cat; } >"$RESULTS/drains.csv"
}

summary() {
    python3 - "$RESULTS" "$(git -C "$REPO_ROOT" describe --always --dirty)" "$PACED_RATE" \
        "$LAT_SECS" "$DRAIN_PAGE" <<'EOF'
import csv, statistics as st, sys
res, desc, rate, secs, page = sys.argv[1:]
med = st.median
lat = list(csv.DictReader(open(f"{res}/latency.csv")))
lag = list(csv.DictReader(open(f"{res}/lag.csv")))
dr = list(csv.DictReader(open(f"{res}/drains.csv")))
loops = {r["run"]: int(r["loops"]) for r in csv.DictReader(open(f"{res}/loops.csv"))}
print(f"# A consumer group that waits for a standby, on a healthy one ({desc})\n")
print("bench/standby.sh: primary and asynchronous streaming standby on one machine (loopback, slot `sb`),")
print("one outbox, groups `plain` and `safe` (standby_slots `{sb}`). Load (uptime):\n")
for line in open(f"{res}/load.txt"):
    print(f"    {line.rstrip()}")
print(f"\n## (a) Latency, producer at {rate} events/s, relay runs of {secs} s alternating plain, safe, ...\n")
print("Per event: clock_timestamp() at eo_relay_fetch minus created_at (the producer's transaction start).\n")
print("| group | runs | events per run (median) | relay loops per run (median) | p50 ms (median of runs) | p99 ms (median of runs) | p50 range | p99 range |")
print("|---|---|---|---|---|---|---|---|")
by = {g: [r for r in lat if r["grp"] == g] for g in ("plain", "safe")}
m = {}
for g, rows in by.items():
    p50 = [float(r["p50_ms"]) for r in rows]; p99 = [float(r["p99_ms"]) for r in rows]
    m[g] = (med(p50), med(p99))
    print(f"| {g} | {len(rows)} | {med(int(r['events']) for r in rows):.0f} | {med(loops[r['run']] for r in rows):.0f} | {med(p50):.2f} | {med(p99):.2f} | "
          f"{min(p50):.2f}-{max(p50):.2f} | {min(p99):.2f}-{max(p99):.2f} |")
pairs = list(zip(by["plain"], by["safe"]))
r50 = [float(s["p50_ms"]) / float(p["p50_ms"]) for p, s in pairs]
r99 = [float(s["p99_ms"]) / float(p["p99_ms"]) for p, s in pairs]
print(f"\nsafe/plain, of the medians: p50 {m['safe'][0] / m['plain'][0]:.2f}x ({m['safe'][0] - m['plain'][0]:+.2f} ms), "
      f"p99 {m['safe'][1] / m['plain'][1]:.2f}x ({m['safe'][1] - m['plain'][1]:+.2f} ms); "
      f"per pair of adjacent runs: p50 median {med(r50):.2f}x (range {min(r50):.2f}-{max(r50):.2f}), "
      f"p99 median {med(r99):.2f}x (range {min(r99):.2f}-{max(r99):.2f}).\n")
print("The standby meanwhile, pg_stat_replication every 0.5 s (flush_lag: from the primary's flush of a WAL position")
print("to the standby's reply that it flushed it; NULL, counted as caught up, when the standby's last reply had")
print("everything sent; behind: pg_current_wal_lsn() - flush_lsn at the sample):\n")
print("| during runs of | samples | caught up (lag NULL) | flush_lag p50 ms | flush_lag max ms | write_lag p50 ms | behind p50 / max, bytes |")
print("|---|---|---|---|---|---|---|")
for g in ("plain", "safe"):
    rows = [r for r in lag if r["grp"] == g]
    fl = [float(r["flush_lag_ms"]) for r in rows if r["flush_lag_ms"]]
    wl = [float(r["write_lag_ms"]) for r in rows if r["write_lag_ms"]]
    bb = [int(r["behind_bytes"]) for r in rows if r["behind_bytes"]]
    f = lambda v, fn, fmt: format(fn(v), fmt) if v else "-"
    print(f"| {g} | {len(rows)} | {len(rows) - len(fl)} | {f(fl, med, '.2f')} | {f(fl, max, '.2f')} | "
          f"{f(wl, med, '.2f')} | {f(bb, med, '.0f')} / {f(bb, max, 'd')} |")
print(f"\n## (b) Throughput: a backlog drained, fetches of {page} events from up to 8 slots\n")
print("| group | rounds | events | fetches (median) | events/s (median) | range |")
print("|---|---|---|---|---|---|")
rates = {g: {r["round"]: float(r["events_per_s"]) for r in dr if r["grp"] == g} for g in ("plain", "safe")}
for g in ("plain", "safe"):
    rows = [r for r in dr if r["grp"] == g]
    v = list(rates[g].values())
    print(f"| {g} | {len(rows)} | {rows[0]['events']} | {med(int(r['fetches']) for r in rows):.0f} | {med(v):.0f} | {min(v):.0f}-{max(v):.0f} |")
rr = [rates["safe"][k] / rates["plain"][k] for k in rates["plain"] if k in rates["safe"]]
secs = {g: {r["round"]: (float(r["secs"]), int(r["fetches"])) for r in dr if r["grp"] == g} for g in ("plain", "safe")}
add = [1000 * (secs["safe"][k][0] - secs["plain"][k][0]) / secs["safe"][k][1] for k in secs["plain"] if k in secs["safe"]]
print(f"\nsafe/plain events/s per round: median {med(rr):.2f}x (range {min(rr):.2f}-{max(rr):.2f}, {len(rr)} rounds); "
      f"time the wait added per fetch, (safe - plain) / fetches: median {med(add):.2f} ms (range {min(add):.2f}-{max(add):.2f}).")
EOF
}

bench_exit() {
    local rc=$?
    stop_bg
    [ -z "${SAMPLER:-}" ] || stop_lag_sampler
    stop_standby
    set +e          # else the (exit) below would end the trap before on_exit
    (exit "$rc")
    on_exit
}

[ "$(id -u)" -eq 0 ] || die "run as root (initdb runs as user postgres)"
bench_packages
make_scratch
trap bench_exit EXIT
RESULTS=$BENCH_DIR/results/standby-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS/pgbench"
T_START=$SECONDS
load "start"
bench_build_install
start_primary
start_standby
setup_db
T_A=$SECONDS
part_latency
load "after (a), $((SECONDS - T_A)) s"
T_B=$SECONDS
part_drain
load "after (b), $((SECONDS - T_B)) s; $((SECONDS - T_START)) s in all"
summary >"$RESULTS/summary.md"
log "summary ($RESULTS/summary.md)"
cat "$RESULTS/summary.md"
