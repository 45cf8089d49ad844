#!/bin/bash
# T9b (no --once, stopped after 25 s): the owner's trigger sets lock_timeout/statement_timeout for the session
# (committed with the first message); later batches, whatever table their
# --sql writes, run with it: does apply recover (new session) or stall?
. /tmp/attack2-tests/env.sh
/tmp/attack2-tests/t1_session_state.sh >/dev/null 2>&1
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
TRUNCATE app.mine;
SET ROLE owner;
DROP OPERATOR IF EXISTS public.->> (jsonb, text);
DROP TRIGGER IF EXISTS t1 ON public.ledger;
CREATE OR REPLACE FUNCTION public.t9() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.set_config('statement_timeout', '1', false);
  RETURN NEW;
END $f$;
DROP TRIGGER IF EXISTS t9 ON public.ledger;
CREATE TRIGGER t9 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t9();
SQL
S=t9$RANDOM
/tmp/attack2-tests/pub.py att.$S.own $S-own '{"n":1}'
/tmp/attack2-tests/pub.py att.$S.app $S-a2 '{"n":2}' $S-a3 '{"n":3}' $S-a4 '{"n":4}'
SQLTXT="WITH o AS (INSERT INTO public.ledger (id, n) SELECT \$1, (\$3->>'n')::int WHERE \$2 LIKE '%.own' RETURNING 1)
 INSERT INTO app.mine (id, n) SELECT \$1, (\$3->>'n')::int + (SELECT count(*) FROM pg_catalog.generate_series(1, 20000))::int * 0 WHERE \$2 NOT LIKE '%.own'"
timeout -s INT 25 $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --ack-wait 2000 --batch 1 --sql "$SQLTXT" 2>&1 | grep -vE 'info: connected|applying|debug: eo'
echo "rc=${PIPESTATUS[0]}"
echo "--- app.mine:"; q "SELECT count(*) FROM app.mine WHERE id LIKE '$S%'"
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t9 ON public.ledger" >/dev/null
