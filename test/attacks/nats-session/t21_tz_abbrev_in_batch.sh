#!/bin/bash
# R2-3: a setting that changes what a message's data means but is not
# reported (timezone_abbreviations), set by an owner's trigger for its own
# transaction (SET LOCAL), holds for the next message of the same batch:
# pg_reported_moved sees no change (TimeZone still reads UTC), so no pin.
# The next message's --sql writes only a table the consumer owns.
. /tmp/attack2-tests/env.sh
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
DROP TABLE IF EXISTS app.tsx; CREATE TABLE app.tsx (id text PRIMARY KEY, at timestamptz);
ALTER TABLE app.tsx OWNER TO consumer;
TRUNCATE public.ledger;
SET ROLE owner;
DROP TRIGGER IF EXISTS kill_me ON public.ledger;
CREATE OR REPLACE FUNCTION public.tzab() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.set_config('timezone_abbreviations', 'India', true);
  RETURN NEW;
END $f$;
DROP TRIGGER IF EXISTS tzab ON public.ledger;
CREATE TRIGGER tzab BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.tzab();
SQL
SQLTXT="WITH o AS (INSERT INTO public.ledger (id, n) SELECT \$1, 0 WHERE \$2 LIKE '%.own' RETURNING 1)
 INSERT INTO app.tsx (id, at) SELECT \$1, (\$3->>'ts')::timestamptz WHERE \$2 NOT LIKE '%.own'"
for B in 1 10; do
  S=tz$B$RANDOM
  /tmp/attack2-tests/pub.py att.$S.own $S-own '{}'
  /tmp/attack2-tests/pub.py att.$S.app $S-app '{"ts":"2026-01-01 12:00 IST"}'
  $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --batch $B --once \
     --sql "$SQLTXT" 2>&1 | grep -vE 'info: (connected|applying)'
  echo "--batch $B: '2026-01-01 12:00 IST' stored as $(q "SET TimeZone='UTC'; SELECT at FROM app.tsx WHERE id = '$S-app'")"
done
echo "(Default abbreviations: IST = Israel, +02 -> 10:00 UTC; India: +05:30 -> 06:30 UTC)"
