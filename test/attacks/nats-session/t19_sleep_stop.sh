#!/bin/bash
# T19: the owner's trigger sleeps (pg_sleep 30) in the batch's pipeline;
# SIGTERM to apply after 2 s: how long until it stops?
. /tmp/attack2-tests/env.sh
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
SET ROLE owner;
DROP TRIGGER IF EXISTS t19 ON public.ledger;
CREATE OR REPLACE FUNCTION public.t19() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN PERFORM pg_catalog.pg_sleep(30); RETURN NEW; END $f$;
CREATE TRIGGER t19 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t19();
SQL
S=t19$RANDOM
/tmp/attack2-tests/pub.py att.$S $S-1 '{"n":1}'
SQLTXT="INSERT INTO public.ledger (id, n) VALUES (\$1, (\$3->>'n')::int)"
start=$(date +%s.%N)
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 60000 --sql "$SQLTXT" > /tmp/attack2-tests/t19.log 2>&1 &
AP=$!
sleep 2; kill -TERM $AP; wait $AP; echo "rc=$? after $(echo "$(date +%s.%N) - $start" | bc | cut -c1-5) s (SIGTERM at 2 s)"
grep stopping /tmp/attack2-tests/t19.log
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t19 ON public.ledger" >/dev/null
