--
-- security: nothing eo does with its owner's rights can be hijacked by
-- objects that untrusted roles own (an audit of 0.1.0, class by class).
--
-- regress_eo_mallory plays the database owner: she owns a schema the
-- outboxes live in (as the database owner owns public in PostgreSQL 15+),
-- may create in public, and holds TRIGGER on an outbox.  Every trap she
-- sets records who ran it in her table regress_eo_mal.ran; eo must never
-- appear there as a superuser, and she must never become one.
--
SET client_min_messages = warning;
\set VERBOSITY terse
DROP ROLE IF EXISTS regress_eo_mallory, regress_eo_app, regress_eo_reader;
CREATE ROLE regress_eo_mallory;
CREATE ROLE regress_eo_app;
CREATE ROLE regress_eo_reader;
GRANT EXECUTE ON FUNCTION eo_test_try(text) TO PUBLIC;
CREATE SCHEMA regress_eo_mal AUTHORIZATION regress_eo_mallory;
GRANT USAGE ON SCHEMA regress_eo_mal TO PUBLIC;
GRANT CREATE ON SCHEMA public TO regress_eo_mallory;
GRANT EXECUTE ON FUNCTION eo_emit(text, text, text, text, jsonb, jsonb) TO regress_eo_app;
GRANT EXECUTE ON FUNCTION eo_relay_fetch(text, text, int, interval),
    eo_relay_ack(text, text, bigint), eo_relay_extend(text, text, bigint, interval),
    eo_relay_release(text, text, bigint), eo_group_create(text, text, text, text),
    eo_group_drop(text, text), eo_outbox_drop(text)
    TO regress_eo_reader, regress_eo_mallory;

-- Mallory's traps: who ran them goes into her table.
SET ROLE regress_eo_mallory;
CREATE TABLE regress_eo_mal.ran (who text, what text);
GRANT INSERT ON regress_eo_mal.ran TO PUBLIC;
CREATE FUNCTION regress_eo_mal.escalate(what text) RETURNS timestamptz
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO regress_eo_mal.ran VALUES (current_user, what);
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE 'ALTER ROLE regress_eo_mallory SUPERUSER';
    END IF;
    RETURN now();
END $$;
-- IMMUTABLE, so that merely planning an INSERT runs it.
CREATE FUNCTION regress_eo_mal.planned() RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN RETURN regress_eo_mal.escalate('planned'); END $$;
CREATE FUNCTION regress_eo_mal.trap() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM regress_eo_mal.escalate(TG_NAME);
    RETURN NEW;
END $$;
RESET ROLE;

-- The outboxes, made by the administrator in mallory's schema.
SELECT eo_outbox_create('swapme', schema => 'regress_eo_mal', slots => 1)::text;
SELECT eo_outbox_create('trig', schema => 'regress_eo_mal', slots => 1)::text;
SELECT eo_outbox_create('honest', slots => 1)::text;
SELECT eo_outbox_create('other', slots => 1)::text;
-- A grantee of eo_outbox_create who is not the extension's owner cannot
-- have eo adopt a table (taking it over with the owner's rights) that
-- happens to carry the name: that is for restores, an administrator's call.
CREATE TABLE regress_eo_mal.taken (LIKE honest);
ALTER TABLE regress_eo_mal.taken OWNER TO regress_eo_mallory;
GRANT EXECUTE ON FUNCTION eo_outbox_create(text, name, text, int4, interval, int4, interval, bool)
    TO regress_eo_mallory;
SET ROLE regress_eo_mallory;
SELECT eo_test_try($$SELECT eo_outbox_create('taken', schema => 'regress_eo_mal')$$);
RESET ROLE;
REVOKE EXECUTE ON FUNCTION eo_outbox_create(text, name, text, int4, interval, int4, interval, bool)
    FROM regress_eo_mallory;
DROP TABLE regress_eo_mal.taken;
GRANT INSERT ON regress_eo_mal.swapme, regress_eo_mal.trig, honest TO regress_eo_app;
GRANT SELECT ON regress_eo_mal.swapme, regress_eo_mal.trig, honest TO regress_eo_reader;
GRANT TRIGGER ON regress_eo_mal.trig TO regress_eo_mallory;
SELECT eo_group_create('swapme', 'g', owner => 'regress_eo_reader');
SELECT eo_group_create('honest', 'g', owner => 'regress_eo_reader');

--
-- 1. Swap an outbox for a look-alike whose created_at default runs her
--    code: eo refuses the look-alike everywhere, and nothing of hers runs.
--
SET ROLE regress_eo_mallory;
-- (eo's view of the outbox depends on it: only CASCADE drops it)
SELECT eo_test_try($$DROP TABLE regress_eo_mal.swapme$$);
DROP TABLE regress_eo_mal.swapme CASCADE;
CREATE TABLE regress_eo_mal.swapme (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL,
    payload jsonb, headers jsonb,
    created_at timestamptz NOT NULL DEFAULT regress_eo_mal.planned(),
    txid xid8 NOT NULL DEFAULT pg_current_xact_id(), seq int8
) PARTITION BY RANGE (created_at);
CREATE TABLE regress_eo_mal.swapme_all PARTITION OF regress_eo_mal.swapme
    FOR VALUES FROM (MINVALUE) TO (MAXVALUE);
CREATE TRIGGER trap BEFORE INSERT ON regress_eo_mal.swapme_all
    FOR EACH ROW EXECUTE FUNCTION regress_eo_mal.trap();
GRANT ALL ON regress_eo_mal.swapme TO PUBLIC;
RESET ROLE;
-- the worker's pass, by hand: the broken outbox is a warning, the others are kept
SELECT outbox, action FROM eo_outbox_maintain() ORDER BY 1, 2;
SELECT reclaimed, switched FROM eo_maintain();
SELECT outbox, consumer_group FROM eo_outbox_status ORDER BY 1, 2;
SET ROLE regress_eo_app;
SELECT eo_test_try($$SELECT eo_emit('swapme', 'order', '1', 'Paid', '{}')$$);
SELECT eo_test_try($$SELECT eo_emit('honest', 'order', '1', 'Paid', '{}') IS NOT NULL$$);
RESET ROLE;
SET ROLE regress_eo_reader;
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('swapme', 'g')$$);
SELECT eo_test_try($$SELECT eo_relay_ack('honest', 'g',
                       (SELECT max(lease_token) FROM eo_relay_fetch('honest', 'g')))$$);
RESET ROLE;
SELECT who, what FROM regress_eo_mal.ran;
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_eo_mallory';
-- its owner may unregister it; mallory's table is left alone
SELECT eo_test_try($$SELECT eo_outbox_drop('swapme')$$);
SELECT count(*) AS lookalike_kept FROM pg_class WHERE oid = 'regress_eo_mal.swapme'::regclass;

--
-- 2. A trigger added by a grantee of TRIGGER runs as whoever inserts (the
--    producer), never as eo's owner; maintenance fires nothing.
--
SET ROLE regress_eo_mallory;
CREATE TRIGGER trap BEFORE INSERT ON regress_eo_mal.trig
    FOR EACH STATEMENT EXECUTE FUNCTION regress_eo_mal.trap();
RESET ROLE;
SET ROLE regress_eo_app;
SELECT eo_emit('trig', 'order', '1', 'Paid', '{}') IS NOT NULL AS emitted;
RESET ROLE;
SELECT count(*) FROM eo_outbox_maintain();
SELECT who, what FROM regress_eo_mal.ran;
-- (only a table's owner may drop a trigger on it)
DROP TRIGGER trap ON regress_eo_mal.trig;
TRUNCATE regress_eo_mal.ran;

--
-- 3. A table with other columns under eo's own OID (only the owner could
--    do this) is refused with a clear error, never read.
--
SELECT eo_outbox_create('shape', slots => 1)::text;
SELECT eo_group_create('shape', 'g');
ALTER TABLE shape ADD COLUMN extra regclass;
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('shape', 'g')$$);
SELECT eo_test_try($$SELECT eo_emit('shape', 'order', '1', 'Paid', '{}')$$);
ALTER TABLE shape DROP COLUMN extra;
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('shape', 'g')$$);
SELECT eo_outbox_drop('shape');

-- A schema renamed and a look-alike with a trap made under the old name,
-- while a session (a superuser's) holds statements eo planned: eo's
-- statements name the outbox's view in eo_internal, not the table, so
-- they still reach eo's table and nothing of hers runs.
SELECT eo_outbox_create('moved', schema => 'regress_eo_mal', slots => 1)::text;
GRANT INSERT ON regress_eo_mal.moved TO regress_eo_app;
SET ROLE regress_eo_app;
SELECT eo_emit('moved', 'order', '1', 'Paid', '{}') IS NOT NULL AS emitted;
RESET ROLE;
ALTER SCHEMA regress_eo_mal RENAME TO regress_eo_mal_old;
CREATE SCHEMA regress_eo_mal AUTHORIZATION regress_eo_mallory;
GRANT USAGE ON SCHEMA regress_eo_mal TO PUBLIC;
SET ROLE regress_eo_mallory;
CREATE TABLE regress_eo_mal.moved (id uuid, aggregatetype text, aggregateid text, type text,
                                   payload jsonb, headers jsonb);
CREATE TRIGGER trap BEFORE INSERT ON regress_eo_mal.moved
    FOR EACH ROW EXECUTE FUNCTION regress_eo_mal_old.trap();
GRANT ALL ON regress_eo_mal.moved TO PUBLIC;
RESET ROLE;
SET search_path = pg_catalog, public;   -- makes PostgreSQL parse the statement again
SELECT eo_emit('moved', 'order', '2', 'Paid', '{}') IS NOT NULL AS emitted;
RESET search_path;
SELECT eo_emit('moved', 'order', '3', 'Paid', '{}') IS NOT NULL AS emitted;
SELECT aggregateid FROM regress_eo_mal_old.moved ORDER BY 1;
SELECT count(*) AS lookalike_rows FROM regress_eo_mal.moved;
SELECT who, what FROM regress_eo_mal_old.ran;
SELECT eo_outbox_drop('moved');
DROP SCHEMA regress_eo_mal CASCADE;
ALTER SCHEMA regress_eo_mal_old RENAME TO regress_eo_mal;

--
-- 4. eo's names cannot be taken: nobody else may create in eo_internal,
--    and overloads in the API schema do not confuse eo's own calls.
--
SET ROLE regress_eo_mallory;
SELECT eo_test_try($$CREATE TABLE eo_internal.eo_keys_99 (key text)$$);
SELECT eo_test_try($$CREATE TABLE eo_internal.honest_p29990101_000000 (x int)$$);
CREATE FUNCTION public.eo_keys(x int DEFAULT 0) RETURNS SETOF int
    LANGUAGE sql AS $$ SELECT regress_eo_mal.escalate('eo_keys overload')::text::int $$;
CREATE FUNCTION public.eo_outbox_maintain(x int DEFAULT 0) RETURNS SETOF int
    LANGUAGE sql AS $$ SELECT regress_eo_mal.escalate('maintain overload')::text::int $$;
CREATE FUNCTION public.eo_key_rows() RETURNS SETOF int
    LANGUAGE sql AS $$ SELECT regress_eo_mal.escalate('key_rows shadow')::text::int $$;
RESET ROLE;
-- (an unqualified call of eo_outbox_maintain() by a user is now ambiguous,
-- as for any function in a schema its owner writes to; eo's own are not)
SELECT reclaimed FROM eo_maintain();
SELECT done >= 0 AS overview_works FROM eo_keys_overview;
SELECT count(*) > 0 AS listed FROM eo_keys();
SELECT who, what FROM regress_eo_mal.ran;
DROP FUNCTION public.eo_keys(int), public.eo_outbox_maintain(int), public.eo_key_rows();

-- ... nor pin an outbox partition with a view of her own (by OID) to keep
-- eo from dropping it when it is past retention
SELECT eo_outbox_create('pinbox', slots => 1, retention => '1 day')::text;
CREATE TABLE eo_internal.pinbox_2020 PARTITION OF pinbox
    FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-02 00:00+00');
SELECT 'eo_internal.pinbox_2020'::regclass::oid AS pin_oid \gset
SET ROLE regress_eo_mallory;
CREATE VIEW regress_eo_mal.pin AS SELECT :'pin_oid'::regclass AS pinned;
RESET ROLE;
SELECT outbox, action, partition FROM eo_outbox_maintain() WHERE outbox = 'pinbox';
SELECT to_regclass('regress_eo_mal.pin') IS NULL AS pinning_view_gone;
SELECT eo_outbox_drop('pinbox');

--
-- 5. Every interval has bounds; an absurd retention is refused.  Partition
--    bounds do not depend on the session's DateStyle or TimeZone (which
--    the database owner may set for the database).
--
SELECT eo_test_try($$SELECT eo_outbox_create('huge', retention => '10000 years')$$);
SET datestyle = 'Postgres';
SET timezone = 'Asia/Kolkata';
SELECT eo_outbox_create('tzbox', slots => 1, partition_interval => '1 hour', premake => 1)::text;
SELECT eo_emit('tzbox', 'order', '1', 'Paid', '{}') IS NOT NULL AS emitted_now;
SELECT count(*) FROM eo_outbox_maintain() WHERE outbox = 'tzbox';
SELECT eo_emit('tzbox', 'order', '1', 'Paid', '{}') IS NOT NULL AS emitted_after_maintenance;
RESET datestyle;
RESET timezone;
SELECT eo_outbox_drop('tzbox');

--
-- 6. Dropping an outbox or a group takes its owner (or a member).
--
SET ROLE regress_eo_mallory;
SELECT eo_test_try($$SELECT eo_outbox_drop('honest')$$);
SELECT eo_test_try($$SELECT eo_group_drop('honest', 'g')$$);
RESET ROLE;

--
-- 7. A consumer group belongs to a role: SELECT on the outbox is not
--    enough to fetch, acknowledge, extend or release its pages, and a token
--    is good only for the group it was issued for (55000 elsewhere).
--
GRANT SELECT ON honest TO regress_eo_mallory;
SELECT eo_group_create('honest', 'other');
SET ROLE regress_eo_app;
SELECT eo_emit('honest', 'order', '7', 'Paid', '{}') IS NOT NULL AS emitted;
SET ROLE regress_eo_reader;
SELECT max(lease_token) AS reader_token FROM eo_relay_fetch('honest', 'g', 10, '1 hour') \gset
RESET ROLE;
SET ROLE regress_eo_mallory;
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('honest', 'g')$$);
SELECT eo_test_try(format($$SELECT eo_relay_ack('honest', 'g', %s)$$, :reader_token));
SELECT eo_test_try(format($$SELECT eo_relay_extend('honest', 'g', %s, '1 day')$$, :reader_token));
SELECT eo_test_try(format($$SELECT eo_relay_release('honest', 'g', %s)$$, :reader_token));
SELECT eo_test_try($$SELECT eo_group_create('honest', 'mine', owner => 'regress_eo_reader')$$);
-- a group holds the outbox's retention back: only its owner makes groups
SELECT eo_test_try($$SELECT eo_group_create('honest', 'mine')$$);
RESET ROLE;
SELECT eo_test_try(format($$SELECT eo_relay_ack('honest', 'other', %s)$$, :reader_token));
SET ROLE regress_eo_reader;
SELECT eo_relay_ack('honest', 'g', :reader_token) AS acked;
RESET ROLE;

--
-- 8. Producers cannot set seq or txid, whichever way they insert; nor can
--    a trigger of a grantee change them on the way.
--
SET ROLE regress_eo_app;
SELECT eo_test_try($$INSERT INTO honest (aggregatetype, aggregateid, type, seq) VALUES ('o', '1', 'x', 1)$$);
SELECT eo_test_try($$INSERT INTO honest (aggregatetype, aggregateid, type, txid) VALUES ('o', '1', 'x', '3')$$);
SELECT eo_test_try($$INSERT INTO honest (aggregatetype, aggregateid, type, seq)
                     SELECT 'o', i::text, 'x', 1000 + i FROM generate_series(1, 3) i RETURNING 1$$);
SELECT eo_test_try($$INSERT INTO honest (aggregatetype, aggregateid, type)
                     SELECT 'o', i::text, 'x' FROM generate_series(1, 3) i RETURNING 1$$);
RESET ROLE;
-- A grantee of TRIGGER cannot add a row trigger: it needs rights on the
-- partitions, which are eo's.
GRANT TRIGGER ON honest TO regress_eo_mallory;
SET ROLE regress_eo_mallory;
CREATE FUNCTION regress_eo_mal.reseq() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN NEW.seq := 1; RETURN NEW; END $$;
SELECT eo_test_try($$CREATE TRIGGER zz_reseq BEFORE INSERT ON honest
                     FOR EACH ROW EXECUTE FUNCTION regress_eo_mal.reseq()$$);
RESET ROLE;
-- Nor a seq drawn from another outbox's sequence, through a table made
-- LIKE that outbox (the default comes along): it would be a duplicate here.
-- Drawing needs INSERT on the outbox the sequence belongs to ...
GRANT SELECT ON other TO regress_eo_app;
SET ROLE regress_eo_app;
CREATE TEMP TABLE draw (LIKE other INCLUDING DEFAULTS);
CREATE FUNCTION pg_temp.draw() RETURNS int8 LANGUAGE sql
    AS $$ INSERT INTO draw (aggregatetype, aggregateid, type) VALUES ('x', 'x', 'x') RETURNING seq $$;
SELECT eo_test_try($$INSERT INTO honest (aggregatetype, aggregateid, type, seq)
                     SELECT 'o', '1', 'x', pg_temp.draw() RETURNING 1$$);
RESET ROLE;
-- ... and one drawn with it is still refused by the outbox it is put in
GRANT INSERT ON other TO regress_eo_app;
SET ROLE regress_eo_app;
SELECT eo_test_try($$INSERT INTO honest (aggregatetype, aggregateid, type, seq)
                     SELECT 'o', '1', 'x', pg_temp.draw() RETURNING 1$$);
DROP FUNCTION pg_temp.draw();
DROP TABLE draw;
RESET ROLE;
-- Even one that the owner added cannot change seq on the way.
CREATE TRIGGER zz_reseq BEFORE INSERT ON honest
    FOR EACH ROW EXECUTE FUNCTION regress_eo_mal.reseq();
SET ROLE regress_eo_app;
SELECT eo_test_try($$SELECT eo_emit('honest', 'order', '9', 'Paid', '{}') IS NOT NULL$$);
RESET ROLE;
DROP TRIGGER zz_reseq ON honest;
-- every stored event has a distinct seq and the txid of its writer
SELECT count(*) AS events, count(DISTINCT seq) AS seqs FROM honest;

--
-- 9. eo called again from inside its own statement: a statement trigger
--    of a TRIGGER grantee renames the outbox's schema, invalidates the
--    outbox (CREATE TRIGGER) and calls the relay, which reloads the outbox
--    while eo_emit's INSERT is still running.  eo_emit finishes.
--
CREATE SCHEMA regress_eo_re AUTHORIZATION regress_eo_mallory;
SELECT eo_outbox_create('reent', schema => 'regress_eo_re', slots => 1)::text;
GRANT INSERT ON regress_eo_re.reent TO regress_eo_mallory;
GRANT TRIGGER ON regress_eo_re.reent TO regress_eo_mallory;
GRANT EXECUTE ON FUNCTION eo_emit(text, text, text, text, jsonb, jsonb) TO regress_eo_mallory;
SELECT format('GRANT CREATE ON DATABASE %I TO regress_eo_mallory', current_database()) \gexec
SET ROLE regress_eo_mallory;
CREATE FUNCTION regress_eo_re.again() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_SCHEMA = 'regress_eo_re' THEN
        ALTER SCHEMA regress_eo_re RENAME TO regress_eo_re2;
        CREATE TRIGGER inval BEFORE INSERT ON regress_eo_re2.reent
            FOR EACH STATEMENT EXECUTE FUNCTION regress_eo_re2.again();
        BEGIN
            PERFORM * FROM public.eo_relay_fetch('reent', 'nosuchgroup');
        EXCEPTION WHEN others THEN RAISE WARNING 'inner call: %', SQLERRM;
        END;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER again BEFORE INSERT ON regress_eo_re.reent
    FOR EACH STATEMENT EXECUTE FUNCTION regress_eo_re.again();
SELECT eo_emit('reent', 'order', '1', 'Created', '{}') IS NOT NULL AS emitted;
SELECT eo_emit('reent', 'order', '2', 'Created', '{}') IS NOT NULL AS emitted_again;
RESET ROLE;
SELECT count(*) AS events FROM regress_eo_re2.reent;
SELECT eo_outbox_drop('reent');
DROP SCHEMA regress_eo_re2 CASCADE;
SELECT format('REVOKE CREATE ON DATABASE %I FROM regress_eo_mallory', current_database()) \gexec
REVOKE EXECUTE ON FUNCTION eo_emit(text, text, text, text, jsonb, jsonb) FROM regress_eo_mallory;

--
-- 10. The caller's search path does not matter: eo's statements name
--     eo_internal and are planned as the owner, whatever schemas the
--     caller's path holds ("$user", one the owner may use and the caller
--     not, as a database owner could set for the database).
--
CREATE SCHEMA regress_eo_app AUTHORIZATION regress_eo_app;
CREATE SCHEMA regress_eo_private;
GRANT INSERT ON honest TO regress_eo_app;
SET ROLE regress_eo_app;
SET search_path = "$user", public;
SELECT eo_emit('honest', 'order', 'p1', 'Path', '{}') IS NOT NULL AS emitted_with_user_schema;
SET search_path = public, regress_eo_private;
SELECT eo_emit('honest', 'order', 'p2', 'Path', '{}') IS NOT NULL AS emitted_with_private_schema;
RESET search_path;
RESET ROLE;
GRANT SELECT ON honest TO regress_eo_reader;
SELECT eo_group_create('honest', 'paths', owner => 'regress_eo_reader');
SET ROLE regress_eo_reader;
SET search_path = public, regress_eo_private;
SELECT count(*) > 0 AS fetched FROM eo_relay_fetch('honest', 'paths', 1000);
RESET search_path;
RESET ROLE;
DROP SCHEMA regress_eo_app, regress_eo_private;

--
-- 11. The caller's default_tablespace and default_table_access_method do
--     not reach eo's DDL: a grantee of eo_outbox_create with no CREATE on
--     a tablespace cannot have eo, acting as its owner, put the outbox,
--     its indexes, partitions or sequence there, nor make them with
--     another table access method.
--
SET allow_in_place_tablespaces = on;
CREATE TABLESPACE regress_eo_space LOCATION '';
RESET allow_in_place_tablespaces;
CREATE ACCESS METHOD regress_eo_heap2 TYPE TABLE HANDLER heap_tableam_handler;
GRANT EXECUTE ON FUNCTION eo_outbox_create(text, name, text, int, interval, int, interval, bool)
    TO regress_eo_app;
GRANT CREATE ON SCHEMA public TO regress_eo_app;
SET ROLE regress_eo_app;
SET default_tablespace = regress_eo_space;
SET default_table_access_method = regress_eo_heap2;
-- the settings are in force: its own table would go there
SELECT eo_test_try('CREATE TABLE public.regress_eo_own (i int)');
SELECT eo_outbox_create('placed', slots => 1)::text;
RESET default_tablespace;
RESET default_table_access_method;
RESET ROLE;
SELECT count(*) > 5 AS placed_relations,
       count(*) FILTER (WHERE reltablespace <> 0) AS in_a_tablespace,
       count(*) FILTER (WHERE relam = (SELECT oid FROM pg_am WHERE amname = 'regress_eo_heap2'))
           AS of_another_method
FROM pg_class WHERE relname LIKE 'placed%';
SELECT eo_outbox_drop('placed');
REVOKE CREATE ON SCHEMA public FROM regress_eo_app;
REVOKE ALL ON FUNCTION eo_outbox_create(text, name, text, int, interval, int, interval, bool)
    FROM regress_eo_app;
DROP ACCESS METHOD regress_eo_heap2;
DROP TABLESPACE regress_eo_space;

-- Clean up.
SELECT eo_outbox_drop('honest');
SELECT eo_outbox_drop('other');
SELECT eo_outbox_drop('trig');
DROP SCHEMA regress_eo_mal CASCADE;
REVOKE CREATE ON SCHEMA public FROM regress_eo_mallory;
REVOKE ALL ON FUNCTION eo_emit(text, text, text, text, jsonb, jsonb) FROM regress_eo_app;
REVOKE ALL ON FUNCTION eo_relay_fetch(text, text, int, interval),
    eo_relay_ack(text, text, bigint), eo_relay_extend(text, text, bigint, interval),
    eo_relay_release(text, text, bigint), eo_group_create(text, text, text, text),
    eo_group_drop(text, text), eo_outbox_drop(text)
    FROM regress_eo_reader, regress_eo_mallory;
REVOKE ALL ON FUNCTION eo_test_try(text) FROM PUBLIC;
DROP ROLE regress_eo_mallory, regress_eo_app, regress_eo_reader;
