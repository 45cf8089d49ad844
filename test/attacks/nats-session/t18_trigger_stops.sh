#!/bin/bash
# T18: the owner's trigger raises a "set-up" SQLSTATE (42501): apply
# takes it for its own set-up's fault and exits 3 (the packaged unit's
# RestartPreventExitStatus=2 3: not restarted); messages for app.mine in
# the same fetch wait with it.
. /tmp/attack2-tests/env.sh
/tmp/attack2-tests/t1_session_state.sh >/dev/null 2>&1
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
TRUNCATE app.mine;
SET ROLE owner;
DROP OPERATOR IF EXISTS public.->> (jsonb, text);
DROP TRIGGER IF EXISTS t1 ON public.ledger;
CREATE OR REPLACE FUNCTION public.t18() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  RAISE EXCEPTION 'no' USING ERRCODE = '42501';
END $f$;
DROP TRIGGER IF EXISTS t18 ON public.ledger;
CREATE TRIGGER t18 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t18();
SQL
S=t18$RANDOM
/tmp/attack2-tests/pub.py att.$S.own $S-own '{"n":1}'
/tmp/attack2-tests/pub.py att.$S.app $S-a2 '{"n":2}' $S-a3 '{"n":3}'
SQLTXT="WITH o AS (INSERT INTO public.ledger (id, n) SELECT \$1, (\$3->>'n')::int WHERE \$2 LIKE '%.own' RETURNING 1)
 INSERT INTO app.mine (id, n) SELECT \$1, (\$3->>'n')::int WHERE \$2 NOT LIKE '%.own'"
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --ack-wait 2000 --once --sql "$SQLTXT" 2>&1 | grep -E 'error|stopping'
echo "rc=${PIPESTATUS[0]}"
echo "--- app.mine:"; q "SELECT count(*) FROM app.mine WHERE id LIKE '$S%'"
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t18 ON public.ledger" >/dev/null
