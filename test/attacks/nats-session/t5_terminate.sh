#!/bin/bash
# T5: the apply session terminated mid-batch: (a) by the owner's trigger
# itself, once, at message 5 of 10; (b) from outside, at random moments,
# while 60 messages are applied in fetches of 10.  Each applied exactly once?
. /tmp/attack2-tests/env.sh
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
SET ROLE owner;
DROP TRIGGER IF EXISTS t5 ON public.ledger;
DROP SEQUENCE IF EXISTS public.t5s; CREATE SEQUENCE public.t5s; GRANT USAGE ON SEQUENCE public.t5s TO consumer;
CREATE OR REPLACE FUNCTION public.t5() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF NEW.n = 5 AND pg_catalog.nextval('public.t5s') = 1 THEN
    PERFORM pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid());
  END IF;
  RETURN NEW;
END $f$;
CREATE TRIGGER t5 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t5();
SQL
SQLTXT="INSERT INTO public.ledger (id, n) VALUES (\$1, (\$3->>'n')::int) ON CONFLICT (id) DO UPDATE SET applied = ledger.applied + 1"
S=t5a$RANDOM
args=(); for i in $(seq 1 10); do args+=("$S-$i" "{\"n\":$i}"); done
/tmp/attack2-tests/pub.py att.$S "${args[@]}"
echo "== (a) trigger terminates its own session once"
timeout 60 $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 1000 --batch 100 --once --verbose --sql "$SQLTXT" 2>&1 | grep -vE 'info: connected|applying|debug: eo'
q "SELECT count(*), sum(applied) FROM public.ledger WHERE id LIKE '$S-%'"
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t5 ON public.ledger" >/dev/null
echo "== (b) killed from outside at random moments"
S=t5b$RANDOM
args=(); for i in $(seq 1 60); do args+=("$S-$i" "{\"n\":$i}"); done
/tmp/attack2-tests/pub.py att.$S "${args[@]}"
( for k in $(seq 1 40); do sleep 0.0$((RANDOM % 9 + 1)); $PSQL -d inbox -Atc "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = 'consumer'" >> /tmp/attack2-tests/t5.kills; done ) &
KP=$!
for r in 1 2 3 4 5 6; do
  timeout 60 $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 1000 --batch 10 --once --sql "$SQLTXT" 2>&1 | grep -E 'stopping:'
done
wait $KP
echo "kills that hit: $(paste -sd+ /tmp/attack2-tests/t5.kills | bc)"; rm -f /tmp/attack2-tests/t5.kills
timeout 60 $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 1000 --batch 10 --once --sql "$SQLTXT" 2>&1 | grep -E 'stopping:'
q "SELECT count(*), sum(applied), max(applied) FROM public.ledger WHERE id LIKE '$S-%'"
$EO $NATS consumer-info --stream ATT --durable $S 2>&1 | grep -E '^(pending|ack_pending)'
