#!/bin/bash
# T14: T13's LATIN1 poisoning makes eo_claim key a non-ASCII id under a
# garbled text; a second copy of the same message (a publisher's or a
# relay's resend after JetStream's duplicate window, which eo_claim is
# there to catch) met by a clean session is claimed again: applied twice.
# CONTROL=1: without the trigger (the second copy is a duplicate).
. /tmp/attack2-tests/env.sh
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
DROP TABLE IF EXISTS app.orders;
CREATE TABLE app.orders (order_no text PRIMARY KEY, applied int);
ALTER TABLE app.orders OWNER TO appowner;
GRANT INSERT, SELECT, UPDATE ON app.orders TO consumer;
SET ROLE owner;
DROP TRIGGER IF EXISTS t13 ON public.ledger;
CREATE OR REPLACE FUNCTION public.t13() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.set_config('client_encoding', 'LATIN1', false);
  RETURN NEW;
END $f$;
CREATE TRIGGER t13 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t13();
SQL
if [ -n "$CONTROL" ]; then $PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t13 ON public.ledger" >/dev/null; fi
S=t14$RANDOM
SQLTXT="WITH o AS (INSERT INTO public.ledger (id, n) SELECT \$1, 0 WHERE \$2 LIKE '%.own' RETURNING 1)
 INSERT INTO app.orders (order_no, applied) SELECT \$3->>'order', 1 WHERE \$2 NOT LIKE '%.own'
 ON CONFLICT (order_no) DO UPDATE SET applied = orders.applied + 1"
run() { $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --ack-wait 2000 --batch 1 --once --sql "$SQLTXT" 2>&1 | grep -E 'stopping'; }
/tmp/attack2-tests/pub.py att.$S.own $S-own '{"n":1}'
/tmp/attack2-tests/pub.py att.$S.app "é-$S" "{\"order\":\"$S\"}"
echo "run 1 (the owner's message first, then é-$S):"; run
sleep 1.5   # past the stream's 1 s duplicate window
/tmp/attack2-tests/pub.py att.$S.app "é-$S" "{\"order\":\"$S\"}"
echo "run 2 (a second copy of é-$S, a fresh session):"; run
echo "--- app.orders:"; q "SELECT order_no, applied FROM app.orders WHERE order_no = '$S'"
echo "--- keys:"; q "SELECT k, (SELECT state FROM eo.eo_status(k, 'att')) FROM unnest(ARRAY['é-$S', convert_from(convert_to('é-$S', 'UTF8'), 'LATIN1')]) k"
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER IF EXISTS t13 ON public.ledger" >/dev/null 2>&1
