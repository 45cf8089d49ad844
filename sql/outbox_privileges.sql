--
-- outbox_privileges: nothing for PUBLIC that reads or writes.  A producer needs EXECUTE on
-- eo_emit and INSERT on the outbox table; a relay EXECUTE on the relay
-- functions and SELECT on the outbox table; neither can touch eo's own
-- tables, and the caller's search_path changes nothing.
--
SET client_min_messages = warning;
GRANT EXECUTE ON FUNCTION eo_test_try(text) TO PUBLIC;

CREATE ROLE regress_eo_app;
CREATE ROLE regress_eo_relay;
CREATE ROLE regress_eo_nobody;

SELECT eo_outbox_create('priv', slots => 1);
SELECT eo_group_create('priv', 'g', owner => 'regress_eo_relay');

-- The outbox functions: none for PUBLIC but eo_relay_header_lines (it
-- reads nothing but its argument), none SECURITY DEFINER.
SELECT p.oid::regprocedure AS function,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute,
       p.prosecdef AS security_definer
FROM pg_proc p
WHERE p.proname ~ '^eo_(emit|outbox_|group_|relay_)'
ORDER BY p.proname;

-- eo's outbox tables and the outbox table itself: nothing for PUBLIC.
SELECT c.relname,
       has_table_privilege('regress_eo_nobody', c.oid, 'SELECT') AS sel,
       has_table_privilege('regress_eo_nobody', c.oid, 'INSERT') AS ins,
       has_table_privilege('regress_eo_nobody', c.oid, 'UPDATE') AS upd
FROM pg_class c
WHERE c.relname IN ('eo_outboxes', 'eo_outbox_groups', 'eo_outbox_slots',
                    'eo_outbox_token_seq', 'eo_outbox_status', 'priv')
ORDER BY 1;

-- The producer.
GRANT EXECUTE ON FUNCTION eo_emit(text, text, text, text, jsonb, jsonb)
    TO regress_eo_app, regress_eo_nobody;
GRANT INSERT ON TABLE priv TO regress_eo_app;
-- The relay.
GRANT EXECUTE ON FUNCTION eo_relay_fetch(text, text, int, interval),
                          eo_relay_ack(text, text, bigint),
                          eo_relay_ack_pages(text, text, bigint[])
    TO regress_eo_relay, regress_eo_app;
GRANT SELECT ON TABLE priv TO regress_eo_relay;

SET ROLE regress_eo_app;
SELECT eo_emit('priv', 'order', 'o1', 'Created', '{"by": "eo_emit"}') IS NOT NULL AS emitted;
INSERT INTO priv (aggregatetype, aggregateid, type, payload)
VALUES ('order', 'o1', 'Paid', '{"by": "insert"}');
-- a producer cannot read the events, nor consume them
SELECT eo_test_try('SELECT count(*) FROM priv');
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('priv', 'g')$$);
SELECT eo_test_try($$SELECT eo_relay_ack_pages('priv', 'g', '{1}')$$);
SELECT eo_test_try('SELECT count(*) FROM eo_internal.eo_outbox_slots');
SELECT eo_test_try($$UPDATE eo_internal.eo_outbox_slots SET pos_lo = 0$$);
-- nor administer outboxes
SELECT eo_test_try($$SELECT eo_outbox_create('mine')$$);
SELECT eo_test_try($$SELECT eo_group_create('priv', 'mine')$$);
SELECT eo_test_try($$SELECT eo_outbox_drop('priv')$$);
SELECT eo_test_try('SELECT count(*) FROM eo_outbox_status');
RESET ROLE;

-- EXECUTE on eo_emit is not enough: INSERT on the outbox table decides.
SET ROLE regress_eo_nobody;
SELECT eo_test_try($$SELECT eo_emit('priv', 'order', 'o2', 'Created', '{}')$$);
SELECT eo_test_try($$INSERT INTO priv (aggregatetype, aggregateid, type) VALUES ('order', 'o2', 'Created')$$);
RESET ROLE;

-- The relay consumes, even with a hostile search_path, and cannot produce.
SET ROLE regress_eo_relay;
CREATE TEMP TABLE eo_outbox_slots (outbox text, grp text, slot int);
CREATE TEMP TABLE priv (id uuid);
SET search_path = pg_temp, public;
CREATE TEMP TABLE got AS SELECT * FROM eo_relay_fetch('priv', 'g');
SELECT aggregateid, type, payload FROM got ORDER BY seq;
SELECT eo_relay_ack('priv', 'g', (SELECT max(lease_token) FROM got));
SELECT eo_relay_ack_pages('priv', 'g', (SELECT array_agg(lease_token) FROM got)) AS acked_again;
RESET search_path;
SELECT aggregateid, type, payload FROM public.eo_relay_fetch('priv', 'g');
SELECT eo_test_try($$SELECT eo_emit('priv', 'order', 'o3', 'Created', '{}')$$);
SELECT eo_test_try($$INSERT INTO public.priv (aggregatetype, aggregateid, type) VALUES ('order', 'o3', 'Created')$$);
DROP TABLE pg_temp.eo_outbox_slots, pg_temp.priv, pg_temp.got;
RESET ROLE;

-- The relay's SELECT is per outbox.
SELECT eo_outbox_create('priv2', slots => 1);
SELECT eo_group_create('priv2', 'g', owner => 'regress_eo_relay');
SET ROLE regress_eo_relay;
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('priv2', 'g')$$);
RESET ROLE;

-- A consumer group of a role the caller is not a member of: 42501 from
-- every function that takes a group, where a group that does not exist
-- is 42704.  That the group exists is not hidden (see docs/security.md,
-- "Outboxes and roles"): it is asked only by a role that may read every
-- event of the outbox, group names are no secret (pg_monitor reads them in
-- eo_metrics.outbox), and the error names the role to relay as.
CREATE ROLE regress_eo_other;
GRANT SELECT ON TABLE priv TO regress_eo_other;
GRANT EXECUTE ON FUNCTION eo_relay_fetch(text, text, int, interval),
                          eo_relay_fetch(text, text, int, interval, int, boolean),
                          eo_relay_ack(text, text, bigint),
                          eo_relay_ack(text, text, bigint, bigint),
                          eo_relay_ack_pages(text, text, bigint[]),
                          eo_relay_extend(text, text, bigint, interval),
                          eo_relay_release(text, text, bigint),
                          eo_relay_status(text, text),
                          eo_relay_wait(text, interval, text, interval),
                          eo_group_drop(text, text)
    TO regress_eo_other;
SET ROLE regress_eo_other;
SELECT call, eo_test_try(format(call, 'g')) AS group_of_another_role,
       eo_test_try(format(call, 'nope')) AS no_such_group
FROM (VALUES ($$SELECT count(*) FROM eo_relay_fetch('priv', %L)$$),
             ($$SELECT count(*) FROM eo_relay_fetch('priv', %L, 10, '1 minute', 2, true)$$),
             ($$SELECT eo_relay_ack('priv', %L, 1)$$),
             ($$SELECT eo_relay_ack('priv', %L, 1, 1)$$),
             ($$SELECT eo_relay_ack_pages('priv', %L, '{1}')$$),
             ($$SELECT eo_relay_extend('priv', %L, 1, '1 minute')$$),
             ($$SELECT eo_relay_release('priv', %L, 1)$$),
             ($$SELECT count(*) FROM eo_relay_status('priv', %L)$$),
             ($$SELECT eo_relay_wait('priv', '1 s', %L, '0')$$),
             ($$SELECT eo_group_drop('priv', %L)$$)) v(call) \gx
-- Without SELECT on the outbox, no group is looked up: the same answer
-- for one that exists and one that does not.
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('priv2', 'g')$$) AS group_exists,
       eo_test_try($$SELECT count(*) FROM eo_relay_fetch('priv2', 'nope')$$) AS no_such_group;
RESET ROLE;

-- Clean up.
SELECT eo_outbox_drop('priv');
SELECT eo_outbox_drop('priv2');
REVOKE ALL ON FUNCTION eo_emit(text, text, text, text, jsonb, jsonb)
    FROM regress_eo_app, regress_eo_nobody;
REVOKE ALL ON FUNCTION eo_relay_fetch(text, text, int, interval),
                       eo_relay_ack(text, text, bigint),
                       eo_relay_ack_pages(text, text, bigint[])
    FROM regress_eo_relay, regress_eo_app;
DROP OWNED BY regress_eo_other;	-- its grants
DROP ROLE regress_eo_app, regress_eo_relay, regress_eo_nobody, regress_eo_other;
