#!/bin/bash
# T10: forward's session: does any code of a TRIGGER grantee on the outbox
# (or of the database owner) run in it?  Statement and row triggers on the
# outbox for INSERT/UPDATE/DELETE/TRUNCATE by a grantee log current_user,
# application_name and pid; then forward --once as role relay.
. /tmp/attack2-tests/env.sh
$PSQL -d postgres <<'SQL' 2>&1 | grep -v NOTICE
DROP DATABASE IF EXISTS shop;
DROP ROLE IF EXISTS trig; CREATE ROLE trig LOGIN;
DROP ROLE IF EXISTS relay; CREATE ROLE relay LOGIN;
CREATE DATABASE shop OWNER owner;
SQL
$PSQL -d shop <<'SQL' 2>&1 | grep -v NOTICE
CREATE SCHEMA eo; CREATE EXTENSION eo SCHEMA eo;
SELECT eo.eo_outbox_create('orders', slots => 2) IS NOT NULL;
GRANT USAGE ON SCHEMA eo TO relay;
GRANT EXECUTE ON FUNCTION eo.eo_relay_fetch(text, text, int, interval, int, boolean),
      eo.eo_relay_ack(text, text, bigint), eo.eo_relay_ack(text, text, bigint, bigint),
      eo.eo_relay_ack_pages(text, text, bigint[]),
      eo.eo_relay_wait(text, interval), eo.eo_relay_wait(text, interval, text, interval) TO relay;
GRANT SELECT ON eo.orders TO relay;
SELECT eo.eo_group_create('orders', 'nats', owner => 'relay');
DO $d$ DECLARE r record; BEGIN FOR r IN SELECT c.oid::regclass AS t FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'eo.orders'::regclass LOOP EXECUTE format('GRANT TRIGGER ON %s TO trig', r.t); END LOOP; END $d$; GRANT USAGE ON SCHEMA eo_internal TO trig;
GRANT TRIGGER ON eo.orders TO trig; GRANT USAGE ON SCHEMA eo TO trig;
CREATE TABLE public.fired (what text); CREATE SCHEMA trigs AUTHORIZATION trig;
GRANT INSERT ON public.fired TO PUBLIC;
SET ROLE trig;
CREATE FUNCTION trigs.spy() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO public.fired VALUES (TG_OP || ' ' || TG_LEVEL || ' as ' || current_user || ' app ' ||
     pg_catalog.current_setting('application_name'));
  RETURN NULL;
END $f$;
CREATE TRIGGER spy_r AFTER INSERT OR UPDATE OR DELETE ON eo.orders FOR EACH ROW EXECUTE FUNCTION trigs.spy();
CREATE TRIGGER spy_s AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON eo.orders FOR EACH STATEMENT EXECUTE FUNCTION trigs.spy();
RESET ROLE;
SELECT count(eo.eo_emit('orders', 'order', 'agg-' || g, 'placed', jsonb_build_object('n', g))) FROM generate_series(1, 5) g;
SQL
$EO $NATS stream-delete --stream ORDERS --yes >/dev/null 2>&1
$EO $NATS stream-add --stream ORDERS --subjects 'orders.>' 2>&1 | tail -1
$EO $NATS --pg "host=/tmp/attack2-pg port=5497 dbname=shop user=relay" forward --outbox orders --group nats --stream ORDERS --once 2>&1 | grep -vE 'info: connected'
echo "rc=${PIPESTATUS[0]}"
echo "--- fired:"; $PSQL -d shop -Atc "SELECT what, count(*) FROM public.fired GROUP BY 1 ORDER BY 1"
$EO $NATS stream-info --stream ORDERS 2>&1 | grep -i messages
