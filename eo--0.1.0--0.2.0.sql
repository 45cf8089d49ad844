-- eo 0.1.0 -> 0.2.0.  CREATE EXTENSION runs eo--0.1.0.sql and then this
-- script, so fresh installs and upgrades end in the same state.
\echo Use "ALTER EXTENSION eo UPDATE TO '0.2.0'" to load this file. \quit

-- ---- eo's private schema ----
--
-- Everything eo acts on with its owner's rights lives in eo_internal, which
-- only the extension owner can create objects in: its tables, the key
-- generations, outbox partitions and the functions eo itself calls.  The
-- API stays in the schema the extension was installed in (often public,
-- which in PostgreSQL 15 the database owner owns and may drop or shadow
-- anything in).  If a schema of this name already exists, this fails: drop
-- it and install again.
CREATE SCHEMA eo_internal;
REVOKE ALL ON SCHEMA eo_internal FROM PUBLIC;
COMMENT ON SCHEMA eo_internal IS 'eo''s own tables: written only by eo''s functions';

ALTER TABLE @extschema@.eo_keys_template SET SCHEMA eo_internal;
ALTER TABLE @extschema@.eo_generations SET SCHEMA eo_internal;
ALTER TABLE @extschema@.eo_counters SET SCHEMA eo_internal;
ALTER SEQUENCE @extschema@.eo_lease_token_seq SET SCHEMA eo_internal;
ALTER TABLE @extschema@.eo_outboxes SET SCHEMA eo_internal;
ALTER TABLE @extschema@.eo_outbox_groups SET SCHEMA eo_internal;
ALTER TABLE @extschema@.eo_outbox_slots SET SCHEMA eo_internal;
ALTER SEQUENCE @extschema@.eo_outbox_token_seq SET SCHEMA eo_internal;
ALTER FUNCTION @extschema@.eo_outbox_notify() SET SCHEMA eo_internal;

-- The key generations made at run time (eo_keys_1 comes with 0.1.0).
DO $$
DECLARE
    r pg_catalog.regclass;
BEGIN
    FOR r IN SELECT c.oid FROM eo_internal.eo_generations g
             JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) g.relid
             WHERE c.relnamespace OPERATOR(pg_catalog.<>) 'eo_internal'::pg_catalog.regnamespace
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s SET SCHEMA eo_internal', r);
    END LOOP;
END
$$;

-- ---- the key store in pg_dump ----
--
-- Generation tables are ordinary tables in eo_internal, not members of the
-- extension, so that pg_dump dumps them with their keys; the registry is a
-- configuration table whose rows pg_dump dumps (relid is a regclass, so it
-- follows the tables into the restored database), and key owners are
-- regroles, restored by name.  A new installation has no generation: the
-- first claim makes one (eo_keys_1 of 0.1.0, still empty in a fresh
-- CREATE EXTENSION, is dropped here), so that a restore brings its own.
DROP VIEW @extschema@.eo_partitions;
ALTER TABLE eo_internal.eo_generations ALTER COLUMN relid TYPE pg_catalog.regclass;
CREATE VIEW @extschema@.eo_partitions AS
SELECT g.gen,
       g.relid AS "table",
       CASE g.state WHEN 'a' THEN 'ahead' WHEN 'c' THEN 'current'
                    WHEN 'o' THEN 'old' ELSE 'retired' END AS state,
       g.started_at,
       g.ended_at,
       c.reltuples::pg_catalog.int8 AS estimated_keys,
       pg_catalog.pg_total_relation_size(g.relid) AS bytes
FROM eo_internal.eo_generations g
LEFT JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) g.relid;
REVOKE ALL ON TABLE @extschema@.eo_partitions FROM PUBLIC;
ALTER TABLE eo_internal.eo_keys_template ALTER COLUMN owner TYPE pg_catalog.regrole;
DO $$
DECLARE
    r pg_catalog.regclass;
    fresh pg_catalog.bool;
BEGIN
    SELECT pg_catalog.count(*) OPERATOR(pg_catalog.=) 1 INTO fresh FROM eo_internal.eo_generations;
    IF fresh THEN
        EXECUTE 'SELECT NOT EXISTS (SELECT FROM eo_internal.eo_keys_1)' INTO fresh;
    END IF;
    IF fresh THEN
        DROP TABLE eo_internal.eo_keys_1;
        DELETE FROM eo_internal.eo_generations;
    END IF;
    FOR r IN SELECT c.oid FROM eo_internal.eo_generations g
             JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) g.relid
    LOOP
        EXECUTE pg_catalog.format('ALTER EXTENSION eo DROP TABLE %s', r);
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN owner TYPE pg_catalog.regrole', r);
    END LOOP;
END
$$;
SELECT pg_catalog.pg_extension_config_dump('eo_internal.eo_generations', '');

-- The consumer-group tables are loaded in parallel by pg_restore -j: no
-- foreign keys between them (eo_outbox_drop and eo_group_drop delete what
-- belongs to what).
ALTER TABLE eo_internal.eo_outbox_slots DROP CONSTRAINT eo_outbox_slots_group_fkey;
ALTER TABLE eo_internal.eo_outbox_groups DROP CONSTRAINT eo_outbox_groups_outbox_fkey;

-- ---- outboxes: recorded by OID, owned by a role ----
--
-- relid is the table eo made (regclass, so that it follows the table
-- through pg_dump and pg_upgrade); owner the role that created it, who may
-- drop it; seq the sequence its seq column draws from.
ALTER TABLE eo_internal.eo_outboxes
    ADD COLUMN relid pg_catalog.regclass,
    ADD COLUMN owner pg_catalog.regrole,
    ADD COLUMN seq pg_catalog.regclass;
UPDATE eo_internal.eo_outboxes o
SET relid = pg_catalog.to_regclass(pg_catalog.format('%I.%I', o.nspname, o.name)),
    owner = (SELECT e.extowner FROM pg_catalog.pg_extension e
             WHERE e.extname OPERATOR(pg_catalog.=) 'eo')::pg_catalog.regrole;
-- An outbox whose table is gone (dropped, or its schema renamed) is no
-- longer registered, with its groups and their positions: say which.
DO $$
DECLARE
    o record;
BEGIN
    FOR o IN SELECT name, nspname FROM eo_internal.eo_outboxes WHERE relid IS NULL
    LOOP
        RAISE WARNING 'outbox "%" is no longer registered: its table %.% is gone', o.name,
            pg_catalog.quote_ident(o.nspname), pg_catalog.quote_ident(o.name)
            USING HINT = 'Make it again with eo_outbox_create(); its consumer groups were dropped with it.';
    END LOOP;
END
$$;
DELETE FROM eo_internal.eo_outbox_slots s USING eo_internal.eo_outboxes o
WHERE s.outbox OPERATOR(pg_catalog.=) o.name AND o.relid IS NULL;
DELETE FROM eo_internal.eo_outbox_groups g USING eo_internal.eo_outboxes o
WHERE g.outbox OPERATOR(pg_catalog.=) o.name AND o.relid IS NULL;
DELETE FROM eo_internal.eo_outboxes WHERE relid IS NULL;
-- A table of that name that is not the one eo made (the owner of a schema
-- may drop a table there and make another of the same name): stop, naming
-- the outbox, before anything below acts on it with the updater's rights.
DO $$
DECLARE
    o record;
BEGIN
    FOR o IN SELECT x.name, pg_catalog.format('%I.%I', cn.nspname, c.relname) AS tab,
                    pg_catalog.pg_get_userbyid(c.relowner) AS owner,
                    pg_catalog.pg_get_userbyid(e.extowner) AS extowner,
                    pg_catalog.quote_ident(n.nspname) AS extschema
             FROM eo_internal.eo_outboxes x
             JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) x.relid
             JOIN pg_catalog.pg_namespace cn ON cn.oid OPERATOR(pg_catalog.=) c.relnamespace
             JOIN pg_catalog.pg_extension e ON e.extname OPERATOR(pg_catalog.=) 'eo'
             JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
             WHERE c.relowner OPERATOR(pg_catalog.<>) e.extowner
                OR EXISTS (SELECT FROM pg_catalog.pg_inherits i
                           JOIN pg_catalog.pg_class p ON p.oid OPERATOR(pg_catalog.=) i.inhrelid
                           WHERE i.inhparent OPERATOR(pg_catalog.=) x.relid
                             AND p.relowner OPERATOR(pg_catalog.<>) e.extowner)
    LOOP
        RAISE EXCEPTION 'the table of outbox "%" is not the one eo made', o.name
            USING ERRCODE = '42501',
                  DETAIL = pg_catalog.format('Table %s (or a partition of it) is owned by role %I, not by %I, the owner of extension eo: it was replaced, or given away, after eo made it.',
                                             o.tab, o.owner, o.extowner),
                  HINT = pg_catalog.format('Give the outbox the table eo made back under its name, or take the outbox out of eo''s registry (DELETE FROM %s.eo_outboxes WHERE name = %L) and update again.',
                                           o.extschema, o.name);
    END LOOP;
END
$$;
ALTER TABLE eo_internal.eo_outboxes
    ALTER COLUMN relid SET NOT NULL,
    ALTER COLUMN owner SET NOT NULL,
    DROP COLUMN nspname;

-- Consumer groups: owned by a role; id goes into the high bits of the
-- group's lease tokens, so a token names the group it was issued for.
-- Ids are unique per outbox (tokens are only ever looked up within one
-- outbox), so the roles of one outbox cannot use up another's.  They come
-- from a sequence that cycles (eo_group_create skips ids the outbox still
-- uses): created and dropped groups cannot use the 13 bits up, and an id
-- comes back only after all the others have been handed out.  13 bits
-- of group over 40 of counter keep every token below 2^53, so JavaScript
-- numbers and JSON parsers that read numbers as doubles keep it exact.
CREATE SEQUENCE eo_internal.eo_outbox_group_id_seq AS pg_catalog.int4
    MINVALUE 1 MAXVALUE 8191 CYCLE;
REVOKE ALL ON SEQUENCE eo_internal.eo_outbox_group_id_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('eo_internal.eo_outbox_group_id_seq', '');
ALTER TABLE eo_internal.eo_outbox_groups
    ADD COLUMN id pg_catalog.int4,
    ADD COLUMN owner pg_catalog.regrole;
UPDATE eo_internal.eo_outbox_groups
SET id = pg_catalog.nextval('eo_internal.eo_outbox_group_id_seq'),
    owner = (SELECT e.extowner FROM pg_catalog.pg_extension e
             WHERE e.extname OPERATOR(pg_catalog.=) 'eo')::pg_catalog.regrole;
ALTER TABLE eo_internal.eo_outbox_groups
    ALTER COLUMN id SET NOT NULL,
    ALTER COLUMN owner SET NOT NULL,
    ADD CONSTRAINT eo_outbox_groups_id_key UNIQUE (outbox, id);

-- seq and txid of an event are eo's: the column default draws seq (after
-- the transaction id is assigned), and a CHECK refuses a row whose seq is
-- not the value the default just drew for it from this outbox's sequence
-- or whose txid is not the inserting transaction's.  NOT VALID: rows already stored (and rows a
-- restore loads before the constraint) are not re-checked.
CREATE FUNCTION eo_internal.eo_outbox_next_seq(pg_catalog.regclass)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'eo_outbox_next_seq'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

CREATE FUNCTION eo_internal.eo_outbox_row_check(pg_catalog.xid8, pg_catalog.int8, pg_catalog.regclass)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'eo_outbox_row_check'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Column defaults and constraints run as whoever inserts: producers need
-- EXECUTE (not USAGE on eo_internal: stored expressions name nothing).
-- eo_outbox_next_seq draws only from registered outboxes' sequences, for
-- roles that may insert into the outbox.
GRANT EXECUTE ON FUNCTION eo_internal.eo_outbox_next_seq(pg_catalog.regclass),
    eo_internal.eo_outbox_row_check(pg_catalog.xid8, pg_catalog.int8, pg_catalog.regclass) TO PUBLIC;

-- What a partition of a table-mode outbox is made LIKE.  Partitions live
-- in eo_internal and are attached to the outbox by OID; each carries the
-- CHECK above as a NOT VALID constraint of its own (the outbox table has
-- none, so pg_dump restores rows before any constraint).
CREATE TABLE eo_internal.eo_outbox_template (
    id            pg_catalog.uuid        NOT NULL,
    aggregatetype pg_catalog.text        NOT NULL,
    aggregateid   pg_catalog.text        NOT NULL,
    type          pg_catalog.text        NOT NULL,
    payload       pg_catalog.jsonb,
    headers       pg_catalog.jsonb,
    created_at    pg_catalog.timestamptz NOT NULL,
    txid          pg_catalog.xid8        NOT NULL,
    seq           pg_catalog.int8        NOT NULL
);
REVOKE ALL ON TABLE eo_internal.eo_outbox_template FROM PUBLIC;

-- Existing table-mode outboxes: the identity column becomes a sequence of
-- eo's (continuing where the identity stopped), partitions move into
-- eo_internal.  (Their trigger names its function by OID: it follows the
-- function into eo_internal.)
DO $$
DECLARE
    o record;
    p pg_catalog.regclass;
    last pg_catalog.int8;
    seqname pg_catalog.text;
BEGIN
    FOR o IN SELECT name, relid FROM eo_internal.eo_outboxes
             WHERE mode OPERATOR(pg_catalog.=) 't'
    LOOP
        last := pg_catalog.pg_sequence_last_value(
                    pg_catalog.pg_get_serial_sequence(o.relid::pg_catalog.text, 'seq'));
        -- in the table's schema (an owned sequence must be), named as the
        -- identity sequence it replaces was
        seqname := pg_catalog.format('%I.%I',
                       (SELECT n.nspname FROM pg_catalog.pg_class c
                        JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                        WHERE c.oid OPERATOR(pg_catalog.=) o.relid),
                       o.name || '_seq_seq');
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN seq DROP IDENTITY', o.relid);
        EXECUTE pg_catalog.format('CREATE SEQUENCE %s AS pg_catalog.int8 CACHE 1', seqname);
        IF last IS NOT NULL THEN
            PERFORM pg_catalog.setval(seqname, last);
        END IF;
        EXECUTE pg_catalog.format(
            'ALTER TABLE %s ALTER COLUMN seq SET DEFAULT eo_internal.eo_outbox_next_seq(%L::pg_catalog.regclass)',
            o.relid, seqname);
        EXECUTE pg_catalog.format('ALTER SEQUENCE %s OWNED BY %s.seq', seqname, o.relid);
        UPDATE eo_internal.eo_outboxes SET seq = seqname::pg_catalog.regclass
        WHERE name OPERATOR(pg_catalog.=) o.name;
        -- the view eo's statements name instead of the table (src/outbox.c)
        EXECUTE pg_catalog.format(
            'CREATE VIEW eo_internal.%I WITH (security_invoker = true) AS'
            ' SELECT id, aggregatetype, aggregateid, type, payload, headers, created_at, txid, seq'
            ' FROM %s', o.name || '_v', o.relid);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT ON TABLE eo_internal.%I TO PUBLIC', o.name || '_v');
        FOR p IN SELECT i.inhrelid FROM pg_catalog.pg_inherits i
                 WHERE i.inhparent OPERATOR(pg_catalog.=) o.relid
        LOOP
            EXECUTE pg_catalog.format('ALTER TABLE %s SET SCHEMA eo_internal', p);
            EXECUTE pg_catalog.format(
                'ALTER TABLE %s ADD CONSTRAINT eo_outbox_row'
                ' CHECK (eo_internal.eo_outbox_row_check(txid, seq, %L::pg_catalog.regclass)) NOT VALID',
                p, seqname);
        END LOOP;
    END LOOP;
END
$$;


-- Positions across a restore into another cluster (src/cluster.c): the
-- cluster (system identifier) an outbox's seq values and its slots'
-- positions belong to; the last seq of an earlier cluster (boundary); each
-- slot's state there for the events it had not yet acknowledged (old_*),
-- delivered before anything newer.
ALTER TABLE eo_internal.eo_outboxes
    ADD COLUMN sysid pg_catalog.int8,
    ADD COLUMN boundary pg_catalog.int8;
ALTER TABLE eo_internal.eo_outbox_slots
    ADD COLUMN sysid pg_catalog.int8,
    ADD COLUMN old_hi pg_catalog.int8,
    ADD COLUMN old_seq pg_catalog.int8,
    ADD COLUMN old_pos_snap pg_catalog.pg_snapshot,
    ADD COLUMN old_pos_lo pg_catalog.int8,
    ADD COLUMN old_batch_snap pg_catalog.pg_snapshot,
    ADD COLUMN old_acked_seq pg_catalog.int8,
    ADD COLUMN page_old pg_catalog.bool NOT NULL DEFAULT false;
UPDATE eo_internal.eo_outboxes
SET sysid = (SELECT system_identifier FROM pg_catalog.pg_control_system());
UPDATE eo_internal.eo_outbox_slots
SET sysid = (SELECT system_identifier FROM pg_catalog.pg_control_system());

-- ---- maintenance and monitoring: eo calls only what lives in eo_internal ----

-- Every key row of the live generations.
CREATE FUNCTION eo_internal.eo_key_rows()
RETURNS SETOF eo_internal.eo_keys_template
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g pg_catalog.oid;
BEGIN
    FOR g IN SELECT relid FROM eo_internal.eo_generations
             WHERE state OPERATOR(pg_catalog.=) ANY ('{c,o}') ORDER BY gen DESC
    LOOP
        RETURN QUERY EXECUTE pg_catalog.format('SELECT * FROM %s', g::pg_catalog.regclass);
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION eo_internal.eo_key_rows() FROM PUBLIC;

CREATE OR REPLACE FUNCTION @extschema@.eo_keys()
RETURNS SETOF eo_internal.eo_keys_template
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM eo_internal.eo_key_rows() $$;

CREATE OR REPLACE FUNCTION @extschema@.eo_key_stats(
    OUT done pg_catalog.int8,
    OUT processing pg_catalog.int8,
    OUT failed pg_catalog.int8,
    OUT dead pg_catalog.int8,
    OUT oldest_processing_since pg_catalog.timestamptz,
    OUT next_lease_expiry pg_catalog.timestamptz,
    OUT expired_leases pg_catalog.int8,
    OUT leases_reclaimed pg_catalog.int8)
RETURNS record
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) ANY (ARRAY['c','d']::pg_catalog."char"[])),
       pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'p'),
       pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'f'),
       pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'x'),
       pg_catalog.min(updated_at) FILTER (WHERE state OPERATOR(pg_catalog.=) 'p'),
       pg_catalog.min(lease_expires_at) FILTER (WHERE state OPERATOR(pg_catalog.=) 'p'),
       pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'p'
           AND lease_expires_at OPERATOR(pg_catalog.<) pg_catalog.now()),
       (SELECT value FROM eo_internal.eo_counters
        WHERE name OPERATOR(pg_catalog.=) 'leases_reclaimed')
FROM eo_internal.eo_key_rows()
$$;

-- A consumer group belongs to a role: the caller, or one it is a member of.
DROP FUNCTION @extschema@.eo_group_create(pg_catalog.text, pg_catalog.text, pg_catalog.text);
CREATE FUNCTION @extschema@.eo_group_create(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    start_at pg_catalog.text DEFAULT 'beginning',
    owner pg_catalog.text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'eo_group_create'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_group_create(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text) FROM PUBLIC;

-- New outboxes do not NOTIFY unless asked (notify => true): NOTIFY
-- serialises the commits of every emitting transaction; relays wake by
-- eo_relay_wait (the doorbell).  Existing outboxes keep what they had.
CREATE OR REPLACE FUNCTION @extschema@.eo_outbox_create(
    name pg_catalog.text,
    schema pg_catalog.name DEFAULT NULL,
    mode pg_catalog.text DEFAULT 'table',
    slots pg_catalog.int4 DEFAULT 8,
    partition_interval pg_catalog.interval DEFAULT '1 day',
    premake pg_catalog.int4 DEFAULT 4,
    retention pg_catalog.interval DEFAULT '7 days',
    notify pg_catalog.bool DEFAULT false)
RETURNS pg_catalog.regclass
AS 'MODULE_PATHNAME', 'eo_outbox_create'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- ---- metrics for scrapers (issue 13): cheap to read, readable by pg_monitor ----
-- Counts and ages only: no key, result, payload or event is shown.  Each
-- costs O(generations), O(live leases) or O(slots), never a scan of keys
-- or events, so a scrape every few seconds stays cheap at any size.  They
-- live in schema eo_metrics, whatever schema eo is installed in, so that
-- an exporter names them fully qualified (monitoring/queries.yaml) and no
-- object a database owner puts on its search_path is found instead.
CREATE SCHEMA eo_metrics;
REVOKE ALL ON SCHEMA eo_metrics FROM PUBLIC;
GRANT USAGE ON SCHEMA eo_metrics TO pg_monitor;

-- Per-slot counters of the relay, written with the slot row anyway.
ALTER TABLE eo_internal.eo_outbox_slots
    ADD COLUMN fetched_events pg_catalog.int8 NOT NULL DEFAULT 0,
    ADD COLUMN acked_events pg_catalog.int8 NOT NULL DEFAULT 0,
    ADD COLUMN redelivered_events pg_catalog.int8 NOT NULL DEFAULT 0;

-- What the key functions answered in this database (shared memory, kept
-- across restarts; NULLs without shared_preload_libraries).
CREATE FUNCTION eo_metrics.claims(
    OUT since pg_catalog.timestamptz,
    OUT claimed pg_catalog.int8,
    OUT duplicates pg_catalog.int8,
    OUT busy pg_catalog.int8,
    OUT dead_answers pg_catalog.int8,
    OUT leases_taken_over pg_catalog.int8,
    OUT completed pg_catalog.int8,
    OUT failed pg_catalog.int8,
    OUT keys_dead pg_catalog.int8,
    OUT leases_reclaimed pg_catalog.int8,
    OUT fingerprint_conflicts pg_catalog.int8,
    OUT stale_tokens_refused pg_catalog.int8)
RETURNS record
AS 'MODULE_PATHNAME', 'eo_metrics_claims'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW eo_metrics.claims AS
SELECT * FROM eo_metrics.claims();

-- The maintenance passes (the worker's and eo_maintain()'s) in this database.
CREATE FUNCTION eo_metrics.maintenance(
    OUT since pg_catalog.timestamptz,
    OUT last_pass_end pg_catalog.timestamptz,
    OUT last_pass_seconds pg_catalog.float8,
    OUT passes pg_catalog.int8,
    OUT leases_reclaimed pg_catalog.int8,
    OUT generations_switched pg_catalog.int8,
    OUT generations_retired pg_catalog.int8,
    OUT generations_dropped pg_catalog.int8,
    OUT switches_postponed_retention pg_catalog.int8,
    OUT switches_postponed_lock pg_catalog.int8,
    OUT outbox_failures pg_catalog.int8,
    OUT drop_step_errors pg_catalog.int8,
    OUT reclaim_step_errors pg_catalog.int8,
    OUT switch_step_errors pg_catalog.int8,
    OUT retire_step_errors pg_catalog.int8,
    OUT outbox_step_errors pg_catalog.int8,
    OUT lock_waits_given_up pg_catalog.int8)
RETURNS record
AS 'MODULE_PATHNAME', 'eo_metrics_maintenance'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW eo_metrics.maintenance AS
SELECT m.*,
       pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) m.last_pass_end)
           AS seconds_since_last_pass
FROM eo_metrics.maintenance() m;

-- The key store: sizes from the catalog (estimates, as fresh as the last
-- ANALYZE), leases and retries through the partial index on
-- lease_expires_at, which holds only keys in flight or failed.  A
-- generation dropped while this runs (its table gone) is skipped.
-- SECURITY DEFINER: it reads eo_internal; it shows counts only.
CREATE FUNCTION eo_metrics.keys(
    OUT generations pg_catalog.int4,
    OUT estimated_keys pg_catalog.int8,
    OUT bytes pg_catalog.int8,
    OUT leases pg_catalog.int8,
    OUT expired_leases pg_catalog.int8,
    OUT oldest_lease_age_seconds pg_catalog.float8,
    OUT retries_waiting pg_catalog.int8)
RETURNS record
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g pg_catalog.regclass;
    n pg_catalog.int8;
    x pg_catalog.int8;
    r pg_catalog.int8;
    oldest pg_catalog.timestamptz;
    since pg_catalog.timestamptz;
BEGIN
    SELECT pg_catalog.count(*), pg_catalog.sum(GREATEST(c.reltuples, 0))::pg_catalog.int8,
           pg_catalog.sum(pg_catalog.pg_total_relation_size(c.oid))::pg_catalog.int8
      INTO generations, estimated_keys, bytes
      FROM eo_internal.eo_generations gen
      JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) gen.relid
     WHERE gen.state OPERATOR(pg_catalog.=) ANY ('{c,o}');
    leases := 0;
    expired_leases := 0;
    retries_waiting := 0;
    FOR g IN SELECT relid FROM eo_internal.eo_generations
             WHERE state OPERATOR(pg_catalog.=) ANY ('{c,o}')
    LOOP
        BEGIN
            EXECUTE pg_catalog.format(
                'SELECT pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) ''p''),'
                ' pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) ''p'''
                '   AND lease_expires_at OPERATOR(pg_catalog.<) pg_catalog.now()),'
                ' pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) ''f''),'
                ' pg_catalog.min(updated_at) FILTER (WHERE state OPERATOR(pg_catalog.=) ''p'')'
                ' FROM %s WHERE lease_expires_at IS NOT NULL', g)
              INTO n, x, r, since;
        EXCEPTION WHEN undefined_table OR syntax_error THEN
            CONTINUE;           -- dropped since the registry was read
        END;
        leases := leases OPERATOR(pg_catalog.+) n;
        expired_leases := expired_leases OPERATOR(pg_catalog.+) x;
        retries_waiting := retries_waiting OPERATOR(pg_catalog.+) r;
        IF since IS NOT NULL AND (oldest IS NULL OR since OPERATOR(pg_catalog.<) oldest) THEN
            oldest := since;
        END IF;
    END LOOP;
    generations := coalesce(generations, 0);
    estimated_keys := coalesce(estimated_keys, 0);
    bytes := coalesce(bytes, 0);
    oldest_lease_age_seconds := pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) oldest);
END
$$;

CREATE VIEW eo_metrics.keys AS
SELECT * FROM eo_metrics.keys();

-- Per outbox and consumer group (src/outbox_metrics.c).
CREATE FUNCTION eo_metrics.outbox(
    OUT outbox pg_catalog.text,
    OUT consumer_group pg_catalog.text,
    OUT slots pg_catalog.int4,
    OUT leased_slots pg_catalog.int4,
    OUT events_emitted pg_catalog.int8,
    OUT events_fetched pg_catalog.int8,
    OUT events_acked pg_catalog.int8,
    OUT events_redelivered pg_catalog.int8,
    OUT oldest_pending_age_seconds pg_catalog.float8,
    OUT retention_seconds pg_catalog.float8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'eo_outbox_metrics'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW eo_metrics.outbox AS
SELECT * FROM eo_metrics.outbox();

-- Nothing for PUBLIC; monitoring roles read them by default.
REVOKE ALL ON FUNCTION eo_metrics.claims(), eo_metrics.maintenance(), eo_metrics.keys(),
    eo_metrics.outbox() FROM PUBLIC;
REVOKE ALL ON TABLE eo_metrics.claims, eo_metrics.maintenance, eo_metrics.keys,
    eo_metrics.outbox FROM PUBLIC;
GRANT EXECUTE ON FUNCTION eo_metrics.claims(), eo_metrics.maintenance(), eo_metrics.keys(),
    eo_metrics.outbox() TO pg_monitor;
GRANT SELECT ON TABLE eo_metrics.claims, eo_metrics.maintenance, eo_metrics.keys,
    eo_metrics.outbox TO pg_monitor;

-- ---- HTTP answers (issue 14): what an API answers for each outcome ----
-- The IETF Idempotency-Key draft: a replay answers as the first request
-- did (200/201, ...), a request still in flight 409, a key reused with a
-- different request 422, a missing or malformed key 400.  eo adds: a
-- dead key 410 (its work failed eo.max_attempts times and is never tried
-- again under this key), and Retry-After for busy.
CREATE FUNCTION @extschema@.eo_http_answer(
    status pg_catalog.text,
    result pg_catalog.jsonb DEFAULT NULL,
    lease_expires_at pg_catalog.timestamptz DEFAULT NULL,
    OUT http_status pg_catalog.int4,
    OUT retry_after pg_catalog.int4)
RETURNS record
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    stored pg_catalog.numeric;
BEGIN
    CASE status
    WHEN 'claimed' THEN
        NULL;                   -- no answer yet: do the work
    WHEN 'duplicate' THEN
        -- replay: the status stored with the result, if it is one
        http_status := 200;
        IF pg_catalog.jsonb_typeof(result OPERATOR(pg_catalog.->) 'http_status')
               OPERATOR(pg_catalog.=) 'number' THEN
            stored := (result OPERATOR(pg_catalog.->>) 'http_status')::pg_catalog.numeric;
            IF stored OPERATOR(pg_catalog.>=) 100 AND stored OPERATOR(pg_catalog.<=) 599 THEN
                http_status := stored;
            END IF;
        END IF;
    WHEN 'busy' THEN
        http_status := 409;
        IF lease_expires_at IS NOT NULL THEN
            retry_after := GREATEST(1, pg_catalog.ceil(pg_catalog.date_part('epoch',
                lease_expires_at OPERATOR(pg_catalog.-) pg_catalog.now())))::pg_catalog.int4;
        END IF;
    WHEN 'dead' THEN
        http_status := 410;
    ELSE
        RAISE EXCEPTION 'unknown eo_claim status "%"', status
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the status eo_claim returned: claimed, duplicate, busy or dead.';
    END CASE;
END
$$;

-- The HTTP status for an error eo_claim raised about the key itself, or
-- NULL for any other error (the handler's usual error handling).
CREATE FUNCTION @extschema@.eo_http_error_status(sqlstate pg_catalog.text)
RETURNS pg_catalog.int4
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE sqlstate
       WHEN '22004' THEN 400    -- no key
       WHEN '22023' THEN 400    -- an empty key
       WHEN '54000' THEN 400    -- a key (or fingerprint) over 512 bytes
       WHEN '22000' THEN 422    -- the key was used with a different request
       WHEN '40001' THEN 503    -- the transaction lost a race: retry it
       WHEN '40P01' THEN 503
       WHEN '55P03' THEN 503    -- lock_timeout
       WHEN '57014' THEN 503    -- statement_timeout
       END
$$;

-- Pure functions of their arguments: anyone who may claim may call them.
GRANT EXECUTE ON FUNCTION @extschema@.eo_http_answer(pg_catalog.text, pg_catalog.jsonb, pg_catalog.timestamptz),
    @extschema@.eo_http_error_status(pg_catalog.text) TO PUBLIC;

-- ---- scopes: one namespace of keys per consumer or endpoint ----
--
-- A scope is a named namespace of keys that belongs to a role: keys
-- claimed in it are unique within it (the same event id is claimed once
-- per scope) and belong to the scope's role, so every member of that role
-- may claim, complete and read them.  Keys claimed without a scope keep
-- scope 0 and belong to the role that claimed them, as in 0.1.0.  Ids are
-- never reused: the keys of a dropped scope are unreachable and go with
-- their generation.
CREATE SEQUENCE eo_internal.eo_scope_id_seq AS pg_catalog.int4 MINVALUE 1 NO CYCLE;
REVOKE ALL ON SEQUENCE eo_internal.eo_scope_id_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('eo_internal.eo_scope_id_seq', '');
CREATE TABLE eo_internal.eo_scopes (
    id         pg_catalog.int4 PRIMARY KEY,
    name       pg_catalog.text NOT NULL UNIQUE,
    owner      pg_catalog.regrole NOT NULL,
    created_at pg_catalog.timestamptz NOT NULL
);
REVOKE ALL ON TABLE eo_internal.eo_scopes FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('eo_internal.eo_scopes', '');

-- Every key table gains its scope, last (keystore.c reads columns by
-- number), and a key is unique per (key, scope).  Adding the column with a
-- constant default rewrites nothing; the new unique index is built on each
-- generation (claims of new keys wait for it).
DO $$
DECLARE
    r pg_catalog.regclass;
    old pg_catalog.name;
BEGIN
    FOR r IN SELECT 'eo_internal.eo_keys_template'::pg_catalog.regclass
             UNION ALL
             SELECT c.oid FROM eo_internal.eo_generations g
             JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) g.relid
    LOOP
        SELECT conname INTO STRICT old FROM pg_catalog.pg_constraint
        WHERE conrelid OPERATOR(pg_catalog.=) r AND contype OPERATOR(pg_catalog.=) 'u';
        EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN scope pg_catalog.int4 NOT NULL DEFAULT 0,'
                                  ' ADD UNIQUE (key, scope), DROP CONSTRAINT %I', r, old);
    END LOOP;
END
$$;

-- ---- tombstones: the second tier of retention (src/tombstones.c) ----
--
-- With eo.tombstone_retention set, a key generation that retires leaves a
-- tombstone of each finished key: a hash of (scope, key), its owner (a
-- regrole, restored by name as key owners are), a hash of the fingerprint
-- and the final state, in generations of their own,
-- dropped whole.  A claim that meets one is a duplicate with no result
-- (result_expired).  Tombstone tables, like key generations, are not
-- members of the extension, so that pg_dump dumps them; the registry is a
-- configuration table.
CREATE TABLE eo_internal.eo_tombstones_template (
    hash  pg_catalog.uuid NOT NULL,
    owner pg_catalog.regrole NOT NULL,
    fp    pg_catalog.int8,
    state pg_catalog."char" NOT NULL,
    UNIQUE (hash)
);
REVOKE ALL ON TABLE eo_internal.eo_tombstones_template FROM PUBLIC;
CREATE TABLE eo_internal.eo_tombstone_generations
    (LIKE eo_internal.eo_generations INCLUDING ALL);
REVOKE ALL ON TABLE eo_internal.eo_tombstone_generations FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('eo_internal.eo_tombstone_generations', '');
CREATE FUNCTION eo_internal.eo_tombstone_hash(pg_catalog.int4, pg_catalog.text)
RETURNS pg_catalog.uuid
AS 'MODULE_PATHNAME', 'eo_tombstone_hash'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION eo_internal.eo_tombstone_fp(pg_catalog.text)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'eo_tombstone_fp'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
REVOKE ALL ON FUNCTION eo_internal.eo_tombstone_hash(pg_catalog.int4, pg_catalog.text),
    eo_internal.eo_tombstone_fp(pg_catalog.text) FROM PUBLIC;

-- Claims, completions, failures, extensions and status take the scope;
-- eo_fail also takes the failure's SQLSTATE, and whether it is final
-- (src/outcome.c).
-- The functions are made again (their argument lists change), so grants
-- made on the 0.1.0 ones are gone: they are listed in a WARNING, to be
-- given again on the new ones (see README, "Upgrading eo").  They are not
-- carried over here: a grant made by this script would count as one of
-- eo's initial privileges, which pg_dump leaves out.
DO $$
DECLARE
    g pg_catalog.record;
    lost pg_catalog.text := '';
BEGIN
    FOR g IN SELECT p.proname, a.grantee, a.is_grantable
             FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
             WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                   '@extschema@.eo_claim(pg_catalog.text, pg_catalog.text, pg_catalog.interval)',
                   '@extschema@.eo_complete(pg_catalog.text, pg_catalog.jsonb, pg_catalog.int8)',
                   '@extschema@.eo_fail(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.interval)',
                   '@extschema@.eo_extend(pg_catalog.text, pg_catalog.int8, pg_catalog.interval)',
                   '@extschema@.eo_status(pg_catalog.text)']::pg_catalog.regprocedure[])
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
             ORDER BY 1, 2
    LOOP
        lost := lost OPERATOR(pg_catalog.||) pg_catalog.format(E'\nGRANT EXECUTE ON FUNCTION @extschema@.%s TO %s%s;',
            g.proname,
            CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                 ELSE g.grantee::pg_catalog.regrole::pg_catalog.text END,
            CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    IF lost OPERATOR(pg_catalog.<>) '' THEN
        RAISE WARNING 'eo 0.2.0 makes eo_claim, eo_complete, eo_fail, eo_extend and eo_status again: these grants are gone'
            USING DETAIL = 'They were:' OPERATOR(pg_catalog.||) lost,
                  HINT = 'Run them again (in the same transaction as ALTER EXTENSION eo UPDATE, to lose no call).';
    END IF;
END
$$;
DROP FUNCTION @extschema@.eo_claim(pg_catalog.text, pg_catalog.text, pg_catalog.interval);
DROP FUNCTION @extschema@.eo_complete(pg_catalog.text, pg_catalog.jsonb, pg_catalog.int8);
DROP FUNCTION @extschema@.eo_fail(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.interval);
DROP FUNCTION @extschema@.eo_extend(pg_catalog.text, pg_catalog.int8, pg_catalog.interval);
DROP FUNCTION @extschema@.eo_status(pg_catalog.text);

-- eo_claim's row, as a type of its own rather than OUT parameters: a
-- statement that calls eo_claim in FROM then finds the row's shape in the
-- type cache, instead of building it from the function's catalog entry at
-- every execution (a tenth of a claim's CPU).
CREATE TYPE @extschema@.eo_claim_result AS (
    status pg_catalog.text,
    result pg_catalog.jsonb,
    attempts pg_catalog.int4,
    lease_token pg_catalog.int8,
    lease_expires_at pg_catalog.timestamptz,
    result_expired pg_catalog.bool);
CREATE FUNCTION @extschema@.eo_claim(
    key pg_catalog.text,
    fingerprint pg_catalog.text DEFAULT NULL,
    lease pg_catalog.interval DEFAULT NULL,
    scope pg_catalog.text DEFAULT NULL)
RETURNS @extschema@.eo_claim_result
AS 'MODULE_PATHNAME', 'eo_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_complete(
    key pg_catalog.text,
    result pg_catalog.jsonb DEFAULT NULL,
    lease_token pg_catalog.int8 DEFAULT NULL,
    scope pg_catalog.text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'eo_complete'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_fail(
    key pg_catalog.text,
    error pg_catalog.text DEFAULT NULL,
    lease_token pg_catalog.int8 DEFAULT NULL,
    retry_after pg_catalog.interval DEFAULT NULL,
    scope pg_catalog.text DEFAULT NULL,
    sqlstate pg_catalog.text DEFAULT NULL,
    final pg_catalog.bool DEFAULT NULL)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'eo_fail'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_extend(
    key pg_catalog.text,
    lease_token pg_catalog.int8,
    lease pg_catalog.interval,
    scope pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'eo_extend'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_status(
    key pg_catalog.text,
    scope pg_catalog.text DEFAULT NULL,
    OUT state pg_catalog.text,
    OUT result pg_catalog.jsonb,
    OUT attempts pg_catalog.int4,
    OUT lease_token pg_catalog.int8,
    OUT lease_expires_at pg_catalog.timestamptz,
    OUT last_error pg_catalog.text,
    OUT created_at pg_catalog.timestamptz,
    OUT updated_at pg_catalog.timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'eo_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

REVOKE ALL ON FUNCTION @extschema@.eo_claim(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_complete(pg_catalog.text, pg_catalog.jsonb, pg_catalog.int8, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_fail(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_extend(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_status(pg_catalog.text, pg_catalog.text) FROM PUBLIC;

-- eo_scope_create(name, owner): a new scope, owned by `owner` (default:
-- the caller, who must have its privileges).  Owners are given as text,
-- not regrole, here and in eo_group_create: an untyped literal prefers a
-- text parameter, so a regrole one would lose to a text overload put in
-- a schema searched first (public, owned by the database owner).  eo_scope_drop(name): by a
-- member of the scope's role.  Granted to nobody: an administrator
-- decides who makes scopes.
CREATE FUNCTION @extschema@.eo_scope_create(
    name pg_catalog.text,
    owner pg_catalog.text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'eo_scope_create'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION @extschema@.eo_scope_drop(name pg_catalog.text)
RETURNS void
AS 'MODULE_PATHNAME', 'eo_scope_drop'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_scope_create(pg_catalog.text, pg_catalog.text),
    @extschema@.eo_scope_drop(pg_catalog.text) FROM PUBLIC;

CREATE VIEW @extschema@.eo_scopes AS
SELECT name, owner, created_at FROM eo_internal.eo_scopes;
REVOKE ALL ON TABLE @extschema@.eo_scopes FROM PUBLIC;

-- eo_relay_ack(outbox, consumer_group, lease_token, upto_seq): a page
-- acknowledged in part, up to and including the event with seq upto_seq;
-- the rest comes back at the slot's next fetch.  For a relay that could
-- deliver only the start of a page (eo_nats, when the broker refuses one
-- event): what it delivered is not handed out again.
CREATE FUNCTION @extschema@.eo_relay_ack(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    lease_token pg_catalog.int8,
    upto_seq pg_catalog.int8)
RETURNS pg_catalog.int4
AS 'MODULE_PATHNAME', 'eo_relay_ack'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_ack(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.int8) FROM PUBLIC;

-- ---- relays: several slots per fetch, leases that end with the session ----

-- holder_pid: for a lease taken with release_on_disconnect, the backend
-- that fetched or extended the page: once it is gone (the relay crashed or
-- lost its connection) the lease is free at once, not when it expires; its
-- token is fenced off as usual.  NULL for every other lease.
ALTER TABLE eo_internal.eo_outbox_slots
    ADD COLUMN holder_pid pg_catalog.int4;

-- eo_relay_fetch(outbox, consumer_group, max_events, lease, slots,
-- release_on_disconnect): up to max_events events from up to `slots` free
-- slots of the group, each slot's events with that slot's own lease token
-- (acknowledge each token the page holds); with release_on_disconnect the
-- leases also end when this session does (for a relay that keeps one
-- connection; not for one that connects per call).  A second function
-- rather than new parameters of the 0.1.0 one: grants on that one stay as
-- they are.
CREATE FUNCTION @extschema@.eo_relay_fetch(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    max_events pg_catalog.int4,
    lease pg_catalog.interval,
    slots pg_catalog.int4,
    release_on_disconnect pg_catalog.bool,
    OUT lease_token pg_catalog.int8,
    OUT slot pg_catalog.int4,
    OUT seq pg_catalog.int8,
    OUT id pg_catalog.uuid,
    OUT aggregatetype pg_catalog.text,
    OUT aggregateid pg_catalog.text,
    OUT type pg_catalog.text,
    OUT payload pg_catalog.jsonb,
    OUT headers pg_catalog.jsonb,
    OUT created_at pg_catalog.timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'eo_relay_fetch'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1000;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_fetch(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.interval, pg_catalog.int4, pg_catalog.bool) FROM PUBLIC;

-- eo_relay_status(outbox, consumer_group): one row per slot, for the
-- group's relays (same rights as eo_relay_fetch): the exact number of
-- events not yet acknowledged, and whether the slot is caught up, has
-- events ready, or is leased (until when, by which backend).
CREATE FUNCTION @extschema@.eo_relay_status(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    OUT slot pg_catalog.int4,
    OUT state pg_catalog.text,
    OUT backlog pg_catalog.int8,
    OUT lease_expires_at pg_catalog.timestamptz,
    OUT holder_pid pg_catalog.int4,
    OUT last_fetch_at pg_catalog.timestamptz,
    OUT last_ack_at pg_catalog.timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'eo_relay_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_status(pg_catalog.text, pg_catalog.text) FROM PUBLIC;
