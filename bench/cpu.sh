#!/usr/bin/env bash
# bench/cpu.sh -- the CPU a claim costs, side by side with the hand-written
# patterns, counted in instructions (valgrind's callgrind), not seconds:
# where commits do not wait for the disk (synchronous_commit = off, fast
# disks, group commit), the CPU per transaction decides, and instruction
# counts are the same from one run to the next whatever else the machine
# does, which timings on a shared 2-core machine are not.
#
# Usage, as root, from a clone of the repository:
#
#     bash bench/cpu.sh
#
# It builds eo from a copy of the tree into a private copy of the
# PostgreSQL installation (bench/lib.sh), makes a cluster
# (synchronous_commit = off), and runs each contender as N transactions of
# prepared statements in a single-user backend under callgrind, for two
# values of N; the difference divided by the difference of N is the cost
# of one transaction, start-up cancelled out.  Every key is new, and every
# run starts from a copy of the same data directory.  Each transaction
# also makes the same business change (an UPDATE of one row).
#
# Contenders (bench/scripts/ has their pgbench forms):
#   nothing      BEGIN; SELECT 1; COMMIT  (the floor)
#   baseline     BEGIN; SELECT 1; the change; COMMIT  (what a claim adds to)
#   hand_min     INSERT the key ON CONFLICT DO NOTHING, the change
#   eo_noresult  eo_claim, the change (COMMIT marks the key done)
#   eo_noresult_field  the same, the claim written SELECT (eo_claim(k)).status
#                (no FunctionScan: see docs/performance.md)
#   hand         INSERT PROCESSING ON CONFLICT, the change, UPDATE to DONE with a result
#   eo           eo_claim, the change, eo_complete with the result
#   hand_lease   the hand-written two-transaction pattern (bench/scripts/
#                hand_lease.sql): INSERT PROCESSING with a lease and a token
#                ON CONFLICT, committed; then the change and UPDATE to DONE
#                guarded by the token in a second transaction
#   eo_lease     eo_claim with a lease, committed; then the change and
#                eo_complete with the token in a second transaction (both
#                pass the token from the first transaction to the second in
#                a custom setting, the same set_config and current_setting
#                for each)
#   relay_emit   eo_emit of one event into an outbox with the default 8
#                slots, committed (no change)
#   relay_paced  the same, then in a second transaction eo_relay_fetch of
#                all 8 slots and eo_relay_ack_pages of what it got: a relay
#                woken for every commit; relay_paced - relay_emit is what
#                one fetch and acknowledgement of one event cost
# Settings: CPU_N1=300 CPU_N2=1300 (transactions), CPU_CONTENDERS.
# Output: bench/results/cpu-<timestamp>/summary.md (and printed).
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"

N1=${CPU_N1:-300}
N2=${CPU_N2:-1300}
CONTENDERS=${CPU_CONTENDERS:-"nothing baseline hand_min eo_noresult eo_noresult_field hand eo hand_lease eo_lease relay_emit relay_paced"}
RESULTS=$REPO_ROOT/bench/results/cpu-$(date -u +%Y%m%d-%H%M%S)

# The prepared statement of each contender; $1 is the key, $2 the account.
prepare_all() {
    cat <<'EOF'
PREPARE nothing_(text, int) AS SELECT 1;

PREPARE hand_min_(text, int) AS WITH i AS (INSERT INTO processed_min VALUES ($1) ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) FROM i;

PREPARE hand_(text, int) AS WITH i AS (INSERT INTO processed (key, status) VALUES ($1, 'PROCESSING') ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) FROM i;

PREPARE hand_done_(text, int) AS UPDATE processed SET status = 'DONE', result = jsonb_build_object('charge', $1, 'amount', 100) WHERE key = $1;

PREPARE baseline_(text, int) AS SELECT 1;

PREPARE eo_noresult_(text, int) AS SELECT status FROM eo_claim($1);

PREPARE eo_noresult_field_(text, int) AS SELECT (eo_claim($1)).status;

PREPARE eo_(text, int) AS SELECT status, result FROM eo_claim($1);

PREPARE eo_done_(text, int) AS SELECT eo_complete($1, jsonb_build_object('charge', $1, 'amount', 100));

PREPARE change_(int) AS UPDATE accounts SET balance = balance + 1 WHERE id = $1;

PREPARE hand_lease_(text, int) AS WITH i AS (INSERT INTO processed_lease (key, status, lease_expires_at) VALUES ($1, 'PROCESSING', now() + interval '30 seconds') ON CONFLICT DO NOTHING RETURNING lease_token) SELECT pg_catalog.set_config('cpu.token', lease_token::text, false) FROM i;

PREPARE hand_lease_done_(text, int) AS UPDATE processed_lease SET status = 'DONE', lease_expires_at = NULL, result = jsonb_build_object('charge', $1, 'amount', 100) WHERE key = $1 AND lease_token = pg_catalog.current_setting('cpu.token')::bigint;

PREPARE eo_lease_(text, int) AS SELECT status, pg_catalog.set_config('cpu.token', lease_token::text, false) FROM eo_claim($1, NULL, interval '30 seconds');

PREPARE eo_lease_done_(text, int) AS SELECT eo_complete($1, jsonb_build_object('charge', $1, 'amount', 100), pg_catalog.current_setting('cpu.token')::bigint);

PREPARE relay_emit_(text, int) AS SELECT eo_emit('pob', 'account', 'a' || $2, 'Moved', '{}');

PREPARE relay_paced_(text, int) AS SELECT eo_emit('pob', 'account', 'a' || $2, 'Moved', '{}');

PREPARE relay_fetch_ack_ AS SELECT eo_relay_ack_pages('pob', 'g', (SELECT array_agg(DISTINCT lease_token) FROM eo_relay_fetch('pob', 'g', 1000, '30 s', 8, true)));

EOF
}

# N transactions of contender $1, keys from $2 on.
script() {
    local c=$1 base=$2 n=$3 i
    prepare_all
    for ((i = base + 1; i <= base + n; i++)); do
        case $c in
            *_lease)    # the claim committed on its own, then the work's transaction
                printf "EXECUTE %s_('k%d', 0);\n\nBEGIN;\n\nEXECUTE change_(%d);\n\nEXECUTE %s_done_('k%d', 0);\n\nCOMMIT;\n\n" \
                    "$c" "$i" $((i % 1000 + 1)) "$c" "$i"
                continue ;;
        esac
        printf "BEGIN;\n\nEXECUTE %s_('k%d', %d);\n\n" "$c" "$i" $((i % 1000 + 1))
        case $c in nothing | relay_*) ;; *) printf "EXECUTE change_(%d);\n\n" $((i % 1000 + 1)) ;; esac
        case $c in
            hand) printf "EXECUTE hand_done_('k%d', 0);\n\n" "$i" ;;
            eo) printf "EXECUTE eo_done_('k%d', 0);\n\n" "$i" ;;
        esac
        printf "COMMIT;\n\n"
        [ "$c" = relay_paced ] && printf "BEGIN;\n\nEXECUTE relay_fetch_ack_;\n\nCOMMIT;\n\n"
    done
}

single() {
    as_pg "$PGBIN/postgres" --single -j -D "$EO_TMP/cg/data" postgres
}

# Instructions of a single-user backend running `script` $1 $2 $3.
instructions() {
    local out=$EO_TMP/cg/out.$1.$2
    # every run from the same data directory, as set up: what one
    # contender left (dead versions and HOT chains in accounts, keys) does
    # not change what the next one costs
    rm -rf "$EO_TMP/cg/data"
    cp -a "$EO_TMP/cg/data.setup" "$EO_TMP/cg/data"
    script "$@" >"$EO_TMP/cg/script.sql"
    as_pg valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$PGBIN/postgres" --single -j -D "$EO_TMP/cg/data" postgres \
        <"$EO_TMP/cg/script.sql" >"$EO_TMP/cg/run.log" 2>"$EO_TMP/cg/valgrind.log"
    # a single-user backend writes its errors to stderr, among valgrind's lines
    if grep -q 'ERROR:' "$EO_TMP/cg/run.log" "$EO_TMP/cg/valgrind.log"; then
        grep -h -m3 'ERROR:' "$EO_TMP/cg/run.log" "$EO_TMP/cg/valgrind.log" >&2
        die "$1 failed"
    fi
    awk '/Collected/ { gsub(",", "", $4); print $4 }' "$EO_TMP/cg/valgrind.log"
}

main() {
    local c a b per base=0
    declare -A PER
    [ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and runs the server as postgres)"
    command -v valgrind >/dev/null || { apt-get update && apt-get install -y valgrind; }
    bench_packages
    make_scratch
    bench_build_install
    mkdir -p "$EO_TMP/cg" "$RESULTS" && chown_scratch
    as_pg "$PGBIN/initdb" -D "$EO_TMP/cg/data" -U postgres -A trust --locale=C -E UTF8 >/dev/null
    printf 'synchronous_commit = off\njit = off\n' >>"$EO_TMP/cg/data/postgresql.conf"
    printf '%s\n\n' "CREATE EXTENSION eo;" \
        "CREATE TABLE processed_min (key text PRIMARY KEY);" \
        "CREATE TABLE processed (key text PRIMARY KEY, status text NOT NULL, result jsonb);" \
        "CREATE SEQUENCE processed_lease_token_seq;" \
        "CREATE TABLE processed_lease (key text PRIMARY KEY, status text NOT NULL, result jsonb, lease_token bigint NOT NULL DEFAULT nextval('processed_lease_token_seq'), lease_expires_at timestamptz, created_at timestamptz NOT NULL DEFAULT now());" \
        "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);" \
        "INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 1000) g;" \
        "SELECT eo_claim('warm-up');" \
        "SELECT eo_outbox_create('pob');" "SELECT eo_group_create('pob', 'g');" |
        single >"$EO_TMP/cg/setup.log" 2>&1
    grep -q ERROR "$EO_TMP/cg/setup.log" && { cat "$EO_TMP/cg/setup.log" >&2; die "setup failed"; }
    cp -a "$EO_TMP/cg/data" "$EO_TMP/cg/data.setup"
    for c in $CONTENDERS; do
        log "$c"
        # (the keys' base is counted here, not inside $(...), whose
        # assignments would not outlive it: every run gets keys of its own)
        base=$((base + 10000000))
        a=$(instructions "$c" "$base" "$N1")
        base=$((base + 10000000))
        b=$(instructions "$c" "$base" "$N2")
        PER[$c]=$(( (b - a) / (N2 - N1) ))
        echo "$c: ${PER[$c]} instructions per transaction"
    done
    {
        echo "# CPU per transaction, in instructions (bench/cpu.sh, $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
        echo
        echo "Single-user backend under callgrind, synchronous_commit = off, every key new,"
        echo "each transaction with the same one-row UPDATE; ($N2 - $N1) transactions counted."
        echo "speed = how many of the hand-written transactions' CPU one eo transaction's buys."
        echo
        echo "| contender | instructions | above the floor | above the baseline (the claim's own) |"
        echo "|---|---|---|---|"
        for c in $CONTENDERS; do
            echo "| $c | ${PER[$c]} | $(( PER[$c] - ${PER[nothing]:-0} )) | $(( PER[$c] - ${PER[baseline]:-0} )) |"
        done
        echo
        [ -n "${PER[hand_min]:-}" ] && [ -n "${PER[eo_noresult]:-}" ] &&
            echo "eo_noresult vs hand_min: $(python3 -c "print(f'{${PER[hand_min]}/${PER[eo_noresult]}:.3f}x')")"
        [ -n "${PER[hand_min]:-}" ] && [ -n "${PER[eo_noresult_field]:-}" ] &&
            echo "eo_noresult_field vs hand_min: $(python3 -c "print(f'{${PER[hand_min]}/${PER[eo_noresult_field]}:.3f}x')")"
        [ -n "${PER[hand]:-}" ] && [ -n "${PER[eo]:-}" ] &&
            echo "eo vs hand: $(python3 -c "print(f'{${PER[hand]}/${PER[eo]}:.3f}x')")"
        [ -n "${PER[hand_lease]:-}" ] && [ -n "${PER[eo_lease]:-}" ] &&
            echo "eo_lease vs hand_lease: $(python3 -c "print(f'{${PER[hand_lease]}/${PER[eo_lease]}:.3f}x')")"
        [ -n "${PER[relay_emit]:-}" ] && [ -n "${PER[relay_paced]:-}" ] &&
            echo "relay: one fetch (8 slots) and acknowledgement of one event: $(( PER[relay_paced] - PER[relay_emit] )) instructions"
    } | tee "$RESULTS/summary.md"
}

main "$@"
