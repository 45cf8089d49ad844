#!/bin/bash
# T13: the owner's trigger changes the session's client_encoding (which
# eo_nats fixes as a connection keyword, UTF8, only at connect).  Later
# messages, whose --sql writes only app.names (not the owner's), are read by
# the server in that encoding: ENC=LATIN1 garbles their text (committed,
# acked); ENC=EUC_KR makes an id with a non-ASCII character fail eo_claim
# with 22021, taken for the message's own fault: terminated.
. /tmp/attack2-tests/env.sh
ENC=${ENC:-LATIN1}
$PSQL -d inbox <<SQL 2>&1 | grep -v NOTICE
DROP TABLE IF EXISTS app.names;
CREATE TABLE app.names (id text PRIMARY KEY, name text);
ALTER TABLE app.names OWNER TO appowner;
GRANT INSERT, SELECT ON app.names TO consumer;
SET ROLE owner;
DROP TRIGGER IF EXISTS t13 ON public.ledger;
CREATE OR REPLACE FUNCTION public.t13() RETURNS trigger LANGUAGE plpgsql AS \$f\$
BEGIN
  PERFORM pg_catalog.set_config('client_encoding', '$ENC', false);
  RETURN NEW;
END \$f\$;
CREATE TRIGGER t13 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t13();
SQL
S=t13$RANDOM
/tmp/attack2-tests/pub.py att.$S.own $S-own '{"n":1}'
/tmp/attack2-tests/pub.py att.$S.app $S-a2 '{"name":"Müller"}' "€-$S-a3" '{"name":"plain"}' $S-a4 '{"name":"Ørsted"}'
SQLTXT="WITH o AS (INSERT INTO public.ledger (id, n) SELECT \$1, (\$3->>'n')::int WHERE \$2 LIKE '%.own' RETURNING 1)
 INSERT INTO app.names (id, name) SELECT \$1, \$3->>'name' WHERE \$2 NOT LIKE '%.own'"
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --ack-wait 2000 --batch 1 --once --sql "$SQLTXT" 2>&1 | grep -vE 'info: connected|applying|debug: eo'
echo "--- app.names (should hold Müller, plain, Ørsted):"; q "SELECT id, name FROM app.names WHERE id LIKE '%$S%' ORDER BY name"
echo "--- JetStream: pending for durable"
$EO $NATS consumer-info --stream ATT --durable $S 2>&1 | grep -E '^(pending|ack_pending|redelivered)'
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t13 ON public.ledger" >/dev/null
