#!/bin/bash
# T16: the owner's trigger sets DateStyle (and TimeZone) for the session;
# a later message's date, read by --sql into app.dates (not the owner's),
# changes meaning: 01/02/2026 is 2 January at connect (MDY), 1 February after.
. /tmp/attack2-tests/env.sh
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
DROP TABLE IF EXISTS app.dates;
CREATE TABLE app.dates (id text PRIMARY KEY, d date, ts text);
ALTER TABLE app.dates OWNER TO appowner;
GRANT INSERT, SELECT ON app.dates TO consumer;
SET ROLE owner;
DROP TRIGGER IF EXISTS t16 ON public.ledger;
CREATE OR REPLACE FUNCTION public.t16() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.set_config('DateStyle', 'ISO, DMY', false);
  PERFORM pg_catalog.set_config('TimeZone', 'Pacific/Kiritimati', false);
  RETURN NEW;
END $f$;
CREATE TRIGGER t16 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t16();
SQL
S=t16$RANDOM
/tmp/attack2-tests/pub.py att.$S.app $S-a1 '{"d":"01/02/2026"}'
/tmp/attack2-tests/pub.py att.$S.own $S-own '{"n":2}'
/tmp/attack2-tests/pub.py att.$S.app $S-a3 '{"d":"01/02/2026"}'
SQLTXT="WITH o AS (INSERT INTO public.ledger (id, n) SELECT \$1, 0 WHERE \$2 LIKE '%.own' RETURNING 1)
 INSERT INTO app.dates (id, d, ts) SELECT \$1, (\$3->>'d')::date, \$5::text WHERE \$2 NOT LIKE '%.own'"
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --ack-wait 2000 --batch 1 --once --sql "$SQLTXT" 2>&1 | grep -E 'stopping'
q "SELECT id, d, ts FROM app.dates WHERE id LIKE '$S%' ORDER BY id"
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t16 ON public.ledger" >/dev/null
