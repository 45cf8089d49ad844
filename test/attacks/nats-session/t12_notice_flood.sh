#!/bin/bash
# T12: the owner's trigger lowers client_min_messages and RAISEs 20000
# NOTICEs per row (each 2 kB) in a batch of 10 sent in pipelines: hang,
# desync or lost messages?
. /tmp/attack2-tests/env.sh
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
SET ROLE owner;
DROP TRIGGER IF EXISTS t12 ON public.ledger;
CREATE OR REPLACE FUNCTION public.t12() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.set_config('client_min_messages', 'notice', false);
  FOR i IN 1..20000 LOOP RAISE NOTICE '%', pg_catalog.repeat('n', 2000); END LOOP;
  RETURN NEW;
END $f$;
CREATE TRIGGER t12 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t12();
SQL
SQLTXT="INSERT INTO public.ledger (id, n) VALUES (\$1, (\$3->>'n')::int) ON CONFLICT (id) DO UPDATE SET applied = ledger.applied + 1"
S=t12$RANDOM
args=(); for i in $(seq 1 10); do args+=("$S-$i" "{\"n\":$i}"); done
/tmp/attack2-tests/pub.py att.$S "${args[@]}"
/usr/bin/time -f "apply: %e s, max RSS %M kB" timeout 120 $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 20000 --batch 100 --once --verbose --sql "$SQLTXT" 2>&1 | grep -vE 'info: connected|applying|debug: eo' | cut -c1-160
q "SELECT count(*), sum(applied) FROM public.ledger WHERE id LIKE '$S-%'"
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t12 ON public.ledger" >/dev/null
