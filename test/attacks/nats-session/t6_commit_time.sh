#!/bin/bash
# T6: the owner's deferred constraint trigger runs at the batch's COMMIT:
# (a) terminates the session there (once); (b) sets synchronous_commit off
# LOCAL at commit time (in the batch transaction that holds other messages).
. /tmp/attack2-tests/env.sh
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
SET ROLE owner;
DROP TRIGGER IF EXISTS t6 ON public.ledger;
DROP SEQUENCE IF EXISTS public.t6s; CREATE SEQUENCE public.t6s; GRANT USAGE ON SEQUENCE public.t6s TO consumer;
CREATE OR REPLACE FUNCTION public.t6() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF pg_catalog.nextval('public.t6s') = 1 THEN
    INSERT INTO public.seen VALUES ('t6 terminating at commit');
    PERFORM pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid());
  END IF;
  RETURN NULL;
END $f$;
CREATE CONSTRAINT TRIGGER t6 AFTER INSERT ON public.ledger DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION public.t6();
SQL
SQLTXT="INSERT INTO public.ledger (id, n) VALUES (\$1, (\$3->>'n')::int) ON CONFLICT (id) DO UPDATE SET applied = ledger.applied + 1"
S=t6$RANDOM
args=(); for i in $(seq 1 5); do args+=("$S-$i" "{\"n\":$i}"); done
/tmp/attack2-tests/pub.py att.$S "${args[@]}"
timeout 60 $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 1000 --batch 100 --once --verbose --sql "$SQLTXT" 2>&1 | grep -vE 'info: connected|applying|debug: eo'
q "SELECT count(*), sum(applied), max(applied) FROM public.ledger WHERE id LIKE '$S-%'"
q "SELECT what, count(*) FROM public.seen WHERE what LIKE 't6%' GROUP BY 1"
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t6 ON public.ledger" >/dev/null
