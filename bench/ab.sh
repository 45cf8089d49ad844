#!/usr/bin/env bash
# bench/ab.sh -- the claim path of two builds of eo, side by side: "is it
# no slower than before?" for a change on the claim path.
#
# Usage, as root, from a clone of the repository:
#
#     bash bench/ab.sh OLD_REF [NEW_REF]
#
# OLD_REF and NEW_REF are git commits (NEW_REF defaults to the working
# tree).  Each build is installed into its own private copy of the
# PostgreSQL installation and gets its own throwaway server (configured as
# bench/run.sh's: fsync and synchronous_commit on, autovacuum off); both
# servers are up for the whole run but only one is measured at a time.
# Each round runs every script at every client count once on each build,
# in alternating order (old first in odd rounds, new first in even ones),
# from the same starting state (eo dropped and created again, accounts
# refilled, a checkpoint); the ratio new/old is taken within a round, and
# the summary reports the median of the rounds' ratios and their range.
#
# Settings (environment): ROUNDS=6, DURATION=8 (s per run), CLIENTS="1 8",
# DUP_PCT=10, AB_SCRIPTS="eo eo_noresult" (scripts in bench/scripts/, each
# prefixed with _delivery.sql as in run.sh; eo_emit gets run.sh's outbox),
# NACCOUNTS=10000, SEED,
# AB_CPU_CLAIMS=200000: per round and build, also that many claims of new
# keys in one transaction in the server (PL/pgSQL loop: rows written at
# once after the 16th, no commit per key) and then the same keys again
# (all duplicates), as claims per CPU second of the backend: the claim
# path's CPU alone, without the WAL flush that dominates the pgbench runs
# (0: skip).
# Output: bench/results/ab-<timestamp>-<old>-<new>/ with runs.csv and
# summary.md.  A benchmark, not a test: it fails only if a run fails.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

OLD_REF=${1:?usage: bench/ab.sh OLD_REF [NEW_REF]}
NEW_REF=${2:-}
ROUNDS=${ROUNDS:-6}
DURATION=${DURATION:-8}
CLIENTS=${CLIENTS-"1 8"}
DUP_PCT=${DUP_PCT:-10}
AB_SCRIPTS=${AB_SCRIPTS-"eo eo_noresult"}
NACCOUNTS=${NACCOUNTS:-10000}
SEED=${SEED:-20241129}
AB_CPU_CLAIMS=${AB_CPU_CLAIMS:-200000}

# The tree of one side: a commit (git archive) or the working tree.
ab_source() {
    local side=$1 ref=$2 dir=$EO_TMP/src-$1
    mkdir -p "$dir"
    if [ -n "$ref" ]; then
        git -C "$REPO_ROOT" archive "$ref" | tar -C "$dir" -xf -
    else
        tar -C "$REPO_ROOT" --exclude=.git --exclude=results --exclude=output_iso \
            --exclude=tmp_check --exclude=log -cf - . | tar -C "$dir" -xf -
    fi
}

# Build one side into its own copy of the PostgreSQL installation.
ab_install() {
    local side=$1 root=$EO_TMP/pginst-$1 d
    for d in "$("$PG_CONFIG" --bindir)" "$("$PG_CONFIG" --pkglibdir)" \
             "$("$PG_CONFIG" --sharedir)"; do
        mkdir -p "$root$(dirname "$d")"
        cp -a "$d" "$root$(dirname "$d")/"
    done
    { make -C "$EO_TMP/src-$side" PG_CONFIG="$PG_CONFIG" &&
      make -C "$EO_TMP/src-$side" PG_CONFIG="$PG_CONFIG" DESTDIR="$root" install; } \
        >"$EO_TMP/build-$side.log" 2>&1 ||
        { tail -n 40 "$EO_TMP/build-$side.log" >&2; die "building $side failed"; }
}

declare -A PORT
ab_bin() { echo "$EO_TMP/pginst-$1$("$PG_CONFIG" --bindir)"; }
ab_psql() { local side=$1; shift; "$(ab_bin "$side")/psql" -X -q -A -t -v ON_ERROR_STOP=1 \
    -h "$EO_TMP/pg-$side/sock" -p "${PORT[$side]}" -U postgres "$@"; }

ab_start() {
    local side=$1 pg=$EO_TMP/pg-$1 bin
    bin=$(ab_bin "$side")
    mkdir -p "$pg/sock" && chown_scratch
    as_pg "$bin/initdb" -D "$pg/data" -U postgres -A trust --locale=C -E UTF8 >"$pg/initdb.log" ||
        die "initdb ($side) failed"
    PORT[$side]=$(free_port)
    [ "$side" = old ] || [ "${PORT[$side]}" != "${PORT[old]:-}" ] || PORT[$side]=$((PORT[old] + 1))
    cat >>"$pg/data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$pg/sock'
port = ${PORT[$side]}
shared_preload_libraries = 'eo'
eo.naptime = 3600
synchronous_commit = on
fsync = on
shared_buffers = 256MB
max_wal_size = 8GB
checkpoint_timeout = 1h
autovacuum = off
jit = off
EOF
    as_pg "$bin/pg_ctl" -D "$pg/data" -l "$pg/server.log" -w -t 60 start >/dev/null ||
        die "server ($side) did not start"
    ab_psql "$side" -d postgres -c "CREATE DATABASE bench"
    ab_psql "$side" -d bench -f "$BENCH_DIR/setup.sql" >/dev/null
}

ab_stop() {
    local side
    for side in old new; do
        [ -f "$EO_TMP/pg-$side/data/postmaster.pid" ] &&
            as_pg "$(ab_bin "$side")/pg_ctl" -D "$EO_TMP/pg-$side/data" -m immediate -w stop \
                >/dev/null 2>&1 || true
    done
}

# eo_emit's outbox, as run.sh makes it, only where a script emits (an
# outbox gives the worker more to keep).  The grant is run.sh's too: the
# functions eo_emit needs differ between builds.
ab_emit_setup() {
    case " $AB_SCRIPTS " in
        *" eo_emit "*)
            echo "SELECT eo_outbox_create('bench_outbox');"
            echo "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO bench_app;"
            echo "GRANT INSERT ON bench_outbox TO bench_app;" ;;
    esac
}

# The same starting point for every run, as run.sh's reset_state.  The
# grant names the functions without their arguments: they differ between
# builds.
ab_reset() {
    ab_psql "$1" -d bench >/dev/null <<EOF
SET client_min_messages = warning;
DROP EXTENSION eo CASCADE;
DROP TABLE IF EXISTS bench_outbox CASCADE;
CREATE EXTENSION eo;
GRANT EXECUTE ON FUNCTION eo_claim, eo_complete TO bench_app;
$(ab_emit_setup)
TRUNCATE accounts;
INSERT INTO accounts (id, balance) SELECT g, 0 FROM generate_series(1, $NACCOUNTS) g;
VACUUM (ANALYZE) accounts;
CHECKPOINT;
EOF
}

ab_run() {
    local round=$1 side=$2 script=$3 clients=$4 out tps
    ab_reset "$side"
    out=$RESULTS/pgbench/r${round}_${side}_${script}_c${clients}.txt
    "$(ab_bin "$side")/pgbench" -n -M prepared -c "$clients" -j 1 -T "$DURATION" \
        --random-seed="$SEED" -D n=0 -D dup_pct="$DUP_PCT" -D naccounts="$NACCOUNTS" \
        -h "$EO_TMP/pg-$side/sock" -p "${PORT[$side]}" -U bench_app \
        -f "$EO_TMP/scripts/$script.sql" bench >"$out" 2>&1 || die "pgbench failed: $out"
    ! grep -q aborted "$out" || die "pgbench aborted: $out"
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$out")
    printf '  round %s %-4s %-12s c=%-2s %10s tps\n' "$round" "$side" "$script" "$clients" "$tps"
    echo "$round,$side,$script,$clients,$tps" >>"$RESULTS/runs.csv"
}

# Claims per CPU second of one backend: new keys, then the same keys again.
# The backend's own CPU time (utime + stime from /proc, in clock ticks),
# not the wall clock: on a shared machine the wall clock also counts the
# time other guests took.
ab_cpu() {
    local round=$1 side=$2 what out ticks rate hz
    hz=$(getconf CLK_TCK)
    ab_reset "$side"
    for what in cpu_new cpu_dup; do
        out=$(ab_psql "$side" -d bench 2>&1 <<SQL
SELECT pg_backend_pid() AS pid \gset
\setenv EO_PID :pid
\! awk '{print "t0", \$14 + \$15}' /proc/\$EO_PID/stat
DO \$\$
BEGIN
    FOR i IN 1..$AB_CPU_CLAIMS LOOP
        PERFORM eo_claim('cpu:' || i);
    END LOOP;
END
\$\$;
\! awk '{print "t1", \$14 + \$15}' /proc/\$EO_PID/stat
SQL
)
        ticks=$(awk '/^t0/ {t0 = $2} /^t1/ {t1 = $2} END {print t1 - t0}' <<<"$out")
        [ -n "$ticks" ] && [ "$ticks" -gt 0 ] || die "the in-server claim loop ($side, $what) failed: $out"
        rate=$(awk -v n="$AB_CPU_CLAIMS" -v t="$ticks" -v hz="$hz" 'BEGIN {printf "%.0f", n / (t / hz)}')
        printf '  round %s %-4s %-12s      %10s claims per CPU second\n' "$round" "$side" "$what" "$rate"
        echo "$round,$side,$what,1,$rate" >>"$RESULTS/runs.csv"
    done
}

ab_summary() {
    python3 - "$RESULTS/runs.csv" "$OLD_DESC" "$NEW_DESC" >"$RESULTS/summary.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
tps = {(r["round"], r["side"], r["script"], r["clients"]): float(r["tps"]) for r in rows}
print(f"# eo A/B: {sys.argv[3]} (new) against {sys.argv[2]} (old)\n")
print("cpu_new and cpu_dup: claims per CPU second of one backend, no commit per key (see bench/ab.sh); the others: pgbench tps.\n")
print("| script | clients | old (median) | new (median) | new/old, median of rounds | range | rounds |")
print("|---|---|---|---|---|---|---|")
for script, clients in sorted({(k[2], k[3]) for k in tps}, key=lambda k: (k[0], int(k[1]))):
    rounds = sorted({k[0] for k in tps if k[2:] == (script, clients)}, key=int)
    pairs = [(tps[(r, "old", script, clients)], tps[(r, "new", script, clients)]) for r in rounds
             if (r, "old", script, clients) in tps and (r, "new", script, clients) in tps]
    ratios = [n / o for o, n in pairs]
    print(f"| {script} | {clients} | {statistics.median(o for o, _ in pairs):.0f} | "
          f"{statistics.median(n for _, n in pairs):.0f} | {statistics.median(ratios):.3f}x | "
          f"{min(ratios):.3f}-{max(ratios):.3f} | {len(ratios)} |")
EOF
}

[ "$(id -u)" -eq 0 ] || die "run as root (initdb runs as user postgres)"
bench_packages
make_scratch
trap 'ab_stop; on_exit' EXIT
OLD_DESC=$(git -C "$REPO_ROOT" rev-parse --short "$OLD_REF")
NEW_DESC=${NEW_REF:+$(git -C "$REPO_ROOT" rev-parse --short "$NEW_REF")}
NEW_DESC=${NEW_DESC:-"working tree at $(git -C "$REPO_ROOT" rev-parse --short HEAD)"}
RESULTS=$BENCH_DIR/results/ab-$(date +%Y%m%d-%H%M%S)-$OLD_DESC
mkdir -p "$RESULTS/pgbench" "$EO_TMP/scripts"
echo "round,side,script,clients,tps" >"$RESULTS/runs.csv"

log "building $OLD_DESC (old) and $NEW_DESC (new)"
ab_source old "$OLD_REF"
ab_source new "$NEW_REF"
ab_install old
ab_install new
for s in $AB_SCRIPTS; do
    cat "$BENCH_DIR/scripts/_delivery.sql" "$BENCH_DIR/scripts/$s.sql" >"$EO_TMP/scripts/$s.sql"
done
log "starting the two servers"
ab_start old
ab_start new

log "$ROUNDS rounds, ${DURATION} s per run"
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then sides="old new"; else sides="new old"; fi
    for c in $CLIENTS; do
        for s in $AB_SCRIPTS; do
            for side in $sides; do ab_run "$r" "$side" "$s" "$c"; done
        done
    done
    if [ "$AB_CPU_CLAIMS" -gt 0 ]; then
        for side in $sides; do ab_cpu "$r" "$side"; done
    fi
done
ab_summary
log "summary ($RESULTS/summary.md)"
cat "$RESULTS/summary.md"
