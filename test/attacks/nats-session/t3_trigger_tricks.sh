#!/bin/bash
# T3: a batch of 10 into the owner's table, whose trigger deallocates and
# prepares statements, discards plans, RESETs ALL, and raises on every
# third row: each good message applied once, each bad one offered again.
. /tmp/attack2-tests/env.sh
$PSQL -d inbox <<'SQL'
TRUNCATE public.ledger, public.seen;
SET ROLE owner;
DROP TRIGGER IF EXISTS t1 ON public.ledger;
DROP TRIGGER IF EXISTS t3 ON public.ledger;
CREATE OR REPLACE FUNCTION public.t3() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE r record;
BEGIN
  FOR r IN SELECT name FROM pg_catalog.pg_prepared_statements LOOP
    INSERT INTO public.seen VALUES ('prepared: ' || r.name);
  END LOOP;
  DEALLOCATE ALL;
  EXECUTE 'PREPARE eo_claim (text, text) AS SELECT ''duplicate''::text AS status';
  EXECUTE 'DISCARD PLANS';
  EXECUTE 'DISCARD SEQUENCES';
  EXECUTE 'RESET ALL';
  INSERT INTO public.seen VALUES ('after RESET ALL: search_path=' || pg_catalog.current_setting('search_path')
     || ' synchronous_commit=' || pg_catalog.current_setting('synchronous_commit'));
  IF NEW.n % 3 = 0 THEN RAISE EXCEPTION 'owner says no to %', NEW.n; END IF;
  RETURN NEW;
END $f$;
CREATE TRIGGER t3 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t3();
SQL
S=t3$RANDOM
args=(); for i in $(seq 1 10); do args+=("$S-$i" "{\"n\":$i}"); done
/tmp/attack2-tests/pub.py att.$S "${args[@]}"
SQLTXT="INSERT INTO public.ledger (id, n) VALUES (\$1, (\$3->>'n')::int) ON CONFLICT (id) DO UPDATE SET applied = ledger.applied + 1"
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 2000 --batch 100 --once --verbose --sql "$SQLTXT" 2>&1 | grep -vE 'info: connected|applying'
echo "--- ledger:"; q "SELECT string_agg(n || ':' || applied, ' ' ORDER BY n) FROM public.ledger WHERE id LIKE '$S-%'"
echo "--- seen:"; q "SELECT what, count(*) FROM public.seen GROUP BY 1 ORDER BY 1"
echo "--- statuses:"; q "SELECT k, (SELECT state FROM eo.eo_status(k, 'att')) FROM (SELECT '$S-' || g AS k FROM generate_series(1,10) g) s" 2>&1 | head -12
