#!/bin/bash
# T8: apply with --search-path app (schemas only trusted roles create in,
# as docs/nats.md asks) and an --sql naming its table unqualified.  The
# owner's trigger on public.ledger (written for some subjects) creates, as
# the consumer, a temporary table "mine": every later message's --sql
# writes it instead of app.mine, is committed and acked, and is gone when
# the session ends.
. /tmp/attack2-tests/env.sh
/tmp/attack2-tests/t1_session_state.sh >/dev/null 2>&1   # app.mine owned by appowner; consumer may insert
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
TRUNCATE app.mine;
SET ROLE owner;
DROP OPERATOR IF EXISTS public.->> (jsonb, text);
DROP TRIGGER IF EXISTS t1 ON public.ledger;
CREATE OR REPLACE FUNCTION public.t8() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  CREATE TEMP TABLE IF NOT EXISTS mine (id text PRIMARY KEY, n int, sc text, sp text, applied int DEFAULT 1);
  RETURN NEW;
END $f$;
DROP TRIGGER IF EXISTS t8 ON public.ledger;
CREATE TRIGGER t8 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t8();
SQL
S=t8$RANDOM
/tmp/attack2-tests/pub.py att.$S.own $S-own '{"n":1}'
/tmp/attack2-tests/pub.py att.$S.app $S-a2 '{"n":2}' $S-a3 '{"n":3}' $S-a4 '{"n":4}'
SQLTXT="WITH o AS (INSERT INTO public.ledger (id, n) SELECT \$1, (\$3->>'n')::int WHERE \$2 LIKE '%.own' RETURNING 1)
 INSERT INTO mine (id, n) SELECT \$1, (\$3->>'n')::int WHERE \$2 NOT LIKE '%.own'"
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --ack-wait 2000 --batch 1 --once --search-path app --sql "$SQLTXT" 2>&1 | grep -E 'stopping|error'
echo "--- app.mine:"; q "SELECT count(*) FROM app.mine WHERE id LIKE '$S%'"
echo "--- statuses:"; q "SELECT k, (SELECT state FROM eo.eo_status(k, 'att')) FROM unnest(ARRAY['$S-own','$S-a2','$S-a3','$S-a4']) k"
echo "--- apply again: does JetStream offer them?"
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --ack-wait 2000 --batch 1 --once --search-path app --sql "$SQLTXT" 2>&1 | grep -E 'stopping|error'
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t8 ON public.ledger" >/dev/null
