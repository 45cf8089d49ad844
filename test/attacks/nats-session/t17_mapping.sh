#!/bin/bash
# T17: claims' answers mapped to the right messages across pipeline chunks:
# one fetch of 130 (chunks of 63 claims); every third id already applied
# (duplicates, payload copy 2), ids 5 and 100 held by another session
# (busy), and id 1 sent again as message 130 (after the duplicate window).
. /tmp/attack2-tests/env.sh
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER IF EXISTS t13 ON public.ledger; DROP TRIGGER IF EXISTS t16 ON public.ledger" >/dev/null 2>&1
$PSQL -d inbox -c "DROP TABLE IF EXISTS app.map; CREATE TABLE app.map (id text PRIMARY KEY, copy int, applied int DEFAULT 1); ALTER TABLE app.map OWNER TO appowner; GRANT INSERT, SELECT, UPDATE ON app.map TO consumer;" >/dev/null
S=t17$RANDOM
SQLTXT="INSERT INTO app.map (id, copy) VALUES (\$1, (\$3->>'copy')::int) ON CONFLICT (id) DO UPDATE SET applied = map.applied + 1"
# the first copies of every third id, applied now
args=(); for i in $(seq 3 3 129); do args+=("$S-$i" '{"copy":1}'); done
/tmp/attack2-tests/pub.py att.$S "${args[@]}"
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 3000 --batch 200 --once --sql "$SQLTXT" 2>&1 | grep stopping
sleep 1.2
# another session holds ids 5 and 100 (claimed, not committed) for 8 s
$PSQL -d inbox -U consumer -c "BEGIN; SELECT eo.eo_claim('$S-5', scope => 'att'), eo.eo_claim('$S-100', scope => 'att'); SELECT pg_sleep(8); ROLLBACK;" >/dev/null &
HP=$!
args=(); for i in $(seq 1 129); do c=1; [ $((i % 3)) = 0 ] && c=2; args+=("$S-$i" "{\"copy\":$c}"); done
/tmp/attack2-tests/pub.py att.$S "${args[@]}"
sleep 1.2; /tmp/attack2-tests/pub.py att.$S "$S-1" '{"copy":2}'
sleep 0.5
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 3000 --batch 200 --once --verbose --sql "$SQLTXT" 2>&1 | grep -E 'fetch:|stopping'
wait $HP
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 3000 --batch 200 --once --sql "$SQLTXT" 2>&1 | grep -E 'stopping'
echo "--- rows, copies 2 applied (must be 0), applied twice (must be 0):"
q "SELECT count(*), count(*) FILTER (WHERE copy = 2), count(*) FILTER (WHERE applied > 1) FROM app.map WHERE id LIKE '$S-%'"
