#!/bin/bash
# T15: the owner's trigger ends apply's session each time it fires
# (pg_terminate_backend of its own pid).  Messages fetched with it, whose
# --sql writes only app.mine, are they ever applied?
. /tmp/attack2-tests/env.sh
/tmp/attack2-tests/t1_session_state.sh >/dev/null 2>&1
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
TRUNCATE app.mine;
SET ROLE owner;
DROP OPERATOR IF EXISTS public.->> (jsonb, text);
DROP TRIGGER IF EXISTS t1 ON public.ledger;
CREATE OR REPLACE FUNCTION public.t15() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid());
  RETURN NEW;
END $f$;
DROP TRIGGER IF EXISTS t15 ON public.ledger;
CREATE TRIGGER t15 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t15();
SQL
S=t15$RANDOM
/tmp/attack2-tests/pub.py att.$S.app $S-a1 '{"n":1}'
/tmp/attack2-tests/pub.py att.$S.own $S-own '{"n":2}'
/tmp/attack2-tests/pub.py att.$S.app $S-a3 '{"n":3}' $S-a4 '{"n":4}'
SQLTXT="WITH o AS (INSERT INTO public.ledger (id, n) SELECT \$1, (\$3->>'n')::int WHERE \$2 LIKE '%.own' RETURNING 1)
 INSERT INTO app.mine (id, n) SELECT \$1, (\$3->>'n')::int WHERE \$2 NOT LIKE '%.own'"
timeout -s INT 20 $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --ack-wait 1000 --batch ${BATCH:-100} --sql "$SQLTXT" > /tmp/attack2-tests/t15.log 2>&1
echo "in 20 s: $(grep -c 'lost the connection' /tmp/attack2-tests/t15.log) reconnects"; grep stopping /tmp/attack2-tests/t15.log
echo "--- app.mine:"; q "SELECT string_agg(id, ' ' ORDER BY id) FROM app.mine WHERE id LIKE '$S%'"
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t15 ON public.ledger" >/dev/null
