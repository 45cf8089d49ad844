#!/usr/bin/env bash
# tools/demo.sh -- show eo working: one payment message delivered four times,
# the first consumer dying mid-transaction, and the payment made exactly once.
# Builds and installs eo, runs a throwaway server, removes it at the end.
set -euo pipefail
# shellcheck source=tools/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KEY=payment:order-42

say() { printf '\n-- %s\n' "$*"; }

# The consumer every delivery runs: the code an application would have.
write_consumer() {
    cat >"$EO_TMP/consumer.sql" <<'SQL'
\set QUIET on
BEGIN;
SELECT status = 'claimed' AS claimed, coalesce(result::text, 'null') AS result,
       format('delivery %s: eo_claim -> %s', :'n', status) AS said
  FROM eo_claim(:'key') \gset
\echo :said
\if :claimed
  INSERT INTO ledger (order_id, amount) VALUES ('order-42', 100);
  \if :crash
    \echo '   ...paid, and now the consumer hangs before COMMIT'
    SELECT pg_sleep(60);
  \endif
  SELECT eo_complete(:'key', '{"charge": "ch_1"}') \gset
  \echo '   did the work (one ledger row) and eo_complete with {"charge": "ch_1"}'
\else
  \echo '   already done: reply with the stored result' :result 'and change nothing'
\endif
COMMIT;
SQL
    chown_scratch
}

deliver() {
    run_psql -v key="$KEY" -v n="$1" -v crash="${2:-off}" -f "$EO_TMP/consumer.sql"
}

# Delivery 1 claims and pays, then its backend is killed before COMMIT (as if
# the consumer's host died).  Nothing of it must survive.
crashing_delivery() {
    PGAPPNAME=eo-demo-crash deliver 1 on 2>/dev/null &
    local client=$! pid=""
    while [ -z "$pid" ]; do
        sleep 0.2
        kill -0 "$client" 2>/dev/null || die "delivery 1 ended before it could be killed"
        pid=$(run_psql -Atc "SELECT pid FROM pg_stat_activity
              WHERE application_name = 'eo-demo-crash' AND query LIKE '%pg_sleep%'")
    done
    say "killing that consumer's backend (pid $pid) before it commits"
    run_psql -Atc "SELECT pg_terminate_backend($pid)" >/dev/null
    wait "$client" || true   # its psql fails (connection gone); stderr hidden
}

main() {
    ensure_packages
    build_install
    make_scratch
    start_server
    write_consumer
    say "CREATE EXTENSION eo, and a ledger that stands for the side effect"
    run_psql -q -c "CREATE EXTENSION eo" \
        -c "CREATE TABLE ledger (order_id text, amount int, paid_at timestamptz DEFAULT now())"
    say "the broker delivers '$KEY' four times"
    crashing_delivery
    say "eo_status after the crash: no row, the killed claim left no trace"
    run_psql -c "SELECT * FROM eo_status('$KEY')"
    deliver 2
    deliver 3
    deliver 4
    say "the ledger: one payment"
    run_psql -c "TABLE ledger"
    say "eo_status('$KEY')"
    run_psql -x -c "SELECT * FROM eo_status('$KEY')"
    say "done; stopping the throwaway server"
}

main "$@"
