-- eo 0.2.0 -> 0.3.0.  CREATE EXTENSION runs eo--0.1.0.sql, then each
-- update script in turn, so fresh installs and upgrades end in the same
-- state.  0.2.0's scripts are released: never edit them, add here.
\echo Use "ALTER EXTENSION eo UPDATE TO '0.3.0'" to load this file. \quit

-- ---- relays ----

-- eo_relay_wait(outbox, timeout, consumer_group, linger): the doorbell,
-- with the group's leases in view.  The sleep also ends when a lease of
-- the group expires (or its session is gone, for one taken with
-- release_on_disconnect), so a relay that found the rest leased fetches
-- again as soon as it can be taken over; and once the bell rang it
-- sleeps `linger` more (not past the timeout), so that a page can fill:
-- fewer, fuller fetches at low rates, for that much more latency.  Like
-- the 0.1.0 one since 0.3.0, it comes back at once if the last fetch may
-- have left events behind, so a relay can wait right after acknowledging
-- a page that was not full.  A second function next to the 0.1.0 one,
-- whose grants stay as they are.
CREATE FUNCTION @extschema@.eo_relay_wait(
    outbox pg_catalog.text,
    timeout pg_catalog.interval,
    consumer_group pg_catalog.text,
    linger pg_catalog.interval)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'eo_relay_wait'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_wait(pg_catalog.text, pg_catalog.interval, pg_catalog.text, pg_catalog.interval) FROM PUBLIC;

-- eo_relay_ack_pages(outbox, consumer_group, lease_tokens): the pages of
-- several tokens (one fetch of several slots) acknowledged whole in one
-- call, all or nothing, with the rights eo_relay_ack needs.  Its own name:
-- an overload of eo_relay_ack would make a call with an untyped third
-- argument ambiguous.
CREATE FUNCTION @extschema@.eo_relay_ack_pages(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    lease_tokens pg_catalog.int8[])
RETURNS pg_catalog.int4
AS 'MODULE_PATHNAME', 'eo_relay_ack_pages'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_ack_pages(pg_catalog.text, pg_catalog.text, pg_catalog.int8[]) FROM PUBLIC;

-- ---- keys: recovery points and redrive (src/claim.c, src/redrive.c) ----

-- eo_recovery_point(key, lease_token, point, state): the holder of a
-- lease records how far it got, fenced by its token, in the caller's
-- transaction (so in the same one as the step's database work).
CREATE FUNCTION @extschema@.eo_recovery_point(
    key pg_catalog.text,
    lease_token pg_catalog.int8,
    point pg_catalog.text,
    state pg_catalog.jsonb DEFAULT NULL,
    scope pg_catalog.text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'eo_recovery_point'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_recovery_point(pg_catalog.text, pg_catalog.int8, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text) FROM PUBLIC;

-- eo_redrive(key): a dead key may be claimed again, with eo.max_attempts
-- more attempts; true if it was dead.  eo_redrive_dead(...): every dead
-- key the caller may act on that matches, in one scope; how many.
CREATE FUNCTION @extschema@.eo_redrive(
    key pg_catalog.text,
    scope pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'eo_redrive'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_redrive(pg_catalog.text, pg_catalog.text) FROM PUBLIC;

CREATE FUNCTION @extschema@.eo_redrive_dead(
    scope pg_catalog.text DEFAULT NULL,
    key_prefix pg_catalog.text DEFAULT NULL,
    dead_since pg_catalog.timestamptz DEFAULT NULL,
    dead_before pg_catalog.timestamptz DEFAULT NULL)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'eo_redrive_dead'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_redrive_dead(pg_catalog.text, pg_catalog.text, pg_catalog.timestamptz, pg_catalog.timestamptz) FROM PUBLIC;

-- eo_list_keys(state, ...): the keys the caller may act on (those of
-- roles it has the privileges of, as eo_redrive_dead), in one state and
-- scope, at most max_rows; no results or fingerprints.  Reads every live
-- generation (src/key_list.c).  Granted as eo_redrive_dead is: to the
-- roles the superuser names.
CREATE FUNCTION @extschema@.eo_list_keys(
    state pg_catalog.text,
    scope pg_catalog.text DEFAULT NULL,
    key_prefix pg_catalog.text DEFAULT NULL,
    max_rows pg_catalog.int4 DEFAULT 100)
RETURNS TABLE (key pg_catalog.text, state pg_catalog.text, attempts pg_catalog.int4,
               last_error pg_catalog.text, updated_at pg_catalog.timestamptz,
               lease_expires_at pg_catalog.timestamptz)
AS 'MODULE_PATHNAME', 'eo_list_keys'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_list_keys(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int4) FROM PUBLIC;

-- eo_keys() shows every role's keys, results included: the superuser's
-- unless granted.  A GRANT EXECUTE to an operator's role used to fail at
-- the call (the function reads eo_internal as its caller); it runs with
-- the owner's rights now, so a grant means what it says.
ALTER FUNCTION @extschema@.eo_keys() SECURITY DEFINER;

-- eo_metrics.claims gains keys_redriven, last: a function of its own, so
-- that the view grows in place (CREATE OR REPLACE VIEW may add columns at
-- the end) and keeps its grants and whatever was built on it.
CREATE FUNCTION eo_metrics.keys_redriven()
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'eo_metrics_keys_redriven'
LANGUAGE C VOLATILE PARALLEL SAFE;
REVOKE ALL ON FUNCTION eo_metrics.keys_redriven() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION eo_metrics.keys_redriven() TO pg_monitor;
CREATE OR REPLACE VIEW eo_metrics.claims AS
SELECT c.*, eo_metrics.keys_redriven() AS keys_redriven FROM eo_metrics.claims() c;

-- Every key row of the live generations, in the template's shape: a
-- generation restored from a dump of 0.2.0 keeps 0.2.0's columns, and
-- shows NULL for those it lacks.  A generation that maintenance retired
-- and dropped after this statement's snapshot read the registry (a long
-- or REPEATABLE READ reader) cannot be read in that snapshot: the
-- retirement moved its unfinished keys to a generation the snapshot sees
-- empty, so passing over it would hide live keys.  That is a
-- serialization failure (40001: run it again), not the syntax error at
-- the table's OID it used to be.
CREATE OR REPLACE FUNCTION eo_internal.eo_key_rows()
RETURNS SETOF eo_internal.eo_keys_template
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g pg_catalog.oid;
    tbl pg_catalog.text;
    cols pg_catalog.text;
BEGIN
    FOR g IN SELECT relid FROM eo_internal.eo_generations
             WHERE state OPERATOR(pg_catalog.=) ANY ('{c,o}') ORDER BY gen DESC
    LOOP
        SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) INTO tbl
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
        WHERE c.oid OPERATOR(pg_catalog.=) g;
        IF tbl IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
                MESSAGE = 'a key generation was dropped after this snapshot was taken',
                HINT = 'Run it again; in a REPEATABLE READ transaction, in a new one.';
        END IF;
        SELECT pg_catalog.string_agg(
                   CASE WHEN a.attname IS NULL
                        THEN pg_catalog.format('NULL::%s', pg_catalog.format_type(t.atttypid, t.atttypmod))
                        ELSE pg_catalog.quote_ident(t.attname) END,
                   ', ' ORDER BY t.attnum)
        INTO cols
        FROM pg_catalog.pg_attribute t
        LEFT JOIN pg_catalog.pg_attribute a
               ON a.attrelid OPERATOR(pg_catalog.=) g AND a.attname OPERATOR(pg_catalog.=) t.attname
              AND NOT a.attisdropped
        WHERE t.attrelid OPERATOR(pg_catalog.=) 'eo_internal.eo_keys_template'::pg_catalog.regclass
          AND t.attnum OPERATOR(pg_catalog.>) 0 AND NOT t.attisdropped;
        BEGIN
            RETURN QUERY EXECUTE pg_catalog.format('SELECT %s FROM %s', cols, tbl);
        EXCEPTION WHEN undefined_table THEN
            -- dropped since the look above (its catalog row is our snapshot's)
            RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
                MESSAGE = 'a key generation was dropped after this snapshot was taken',
                HINT = 'Run it again; in a REPEATABLE READ transaction, in a new one.';
        END;
    END LOOP;
END
$$;

-- ---- comments (\df+, \dd) ----

-- One line each, on what a user calls or reads: the functions and views
-- of the extension's schema and of eo_metrics (eo_internal's are eo's
-- own).  sql/comments.sql lists every member of the extension outside
-- eo_internal that has none.  No COMMENT here waits on another role: on
-- a view it takes SHARE UPDATE EXCLUSIVE, which a reader's ACCESS SHARE
-- does not block; on a function, type or schema a lock that only their
-- owner's statements take.  The extension's own comment comes from
-- eo.control on a fresh install, which CREATE EXTENSION sets before it
-- runs the scripts; it is set here too, so that an updated database
-- says the same.
COMMENT ON EXTENSION eo IS 'effectively-once processing: idempotency keys with leases and fencing tokens, and a transactional outbox';
COMMENT ON SCHEMA eo_metrics IS 'eo''s metrics for scrapers: counts and ages only, cheap at any size, readable by pg_monitor';
COMMENT ON TYPE @extschema@.eo_claim_result IS 'the row eo_claim returns';

-- keys
COMMENT ON FUNCTION @extschema@.eo_claim(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.text) IS
    'claim an idempotency key, in this transaction or under a lease: claimed, duplicate, busy or dead';
COMMENT ON FUNCTION @extschema@.eo_complete(pg_catalog.text, pg_catalog.jsonb, pg_catalog.int8, pg_catalog.text) IS
    'mark a claimed key done, with the result to replay to its duplicates';
COMMENT ON FUNCTION @extschema@.eo_fail(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.bool) IS
    'record a failed attempt of a key, or a final failure: retry, dead or rejected';
COMMENT ON FUNCTION @extschema@.eo_extend(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.text) IS
    'renew the lease on a key, given its current token; returns the new expiry';
COMMENT ON FUNCTION @extschema@.eo_recovery_point(pg_catalog.text, pg_catalog.int8, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text) IS
    'record how far the holder of a key''s lease got, for the key''s next holder to resume from';
COMMENT ON FUNCTION @extschema@.eo_redrive(pg_catalog.text, pg_catalog.text) IS
    'make a dead key claimable again; false if it was not dead';
COMMENT ON FUNCTION @extschema@.eo_redrive_dead(pg_catalog.text, pg_catalog.text, pg_catalog.timestamptz, pg_catalog.timestamptz) IS
    'make every matching dead key the caller may act on claimable again; returns how many';
COMMENT ON FUNCTION @extschema@.eo_list_keys(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'the keys the caller may act on in one state and scope, at most max_rows, without results; reads every key';
COMMENT ON FUNCTION @extschema@.eo_status(pg_catalog.text, pg_catalog.text) IS
    'read a key''s state without claiming it: processing, done, failed, dead, rejected or in_doubt; no row if unknown';
COMMENT ON FUNCTION @extschema@.eo_scope_create(pg_catalog.text, pg_catalog.text) IS
    'create a scope: a namespace of keys owned by a role';
COMMENT ON FUNCTION @extschema@.eo_scope_drop(pg_catalog.text) IS
    'drop a scope; its keys can no longer be reached';
COMMENT ON FUNCTION @extschema@.eo_http_answer(pg_catalog.text, pg_catalog.jsonb, pg_catalog.timestamptz) IS
    'HTTP status and Retry-After seconds for an outcome of eo_claim';
COMMENT ON FUNCTION @extschema@.eo_http_error_status(pg_catalog.text) IS
    'HTTP status for an error eo_claim raised about the key, or NULL';
COMMENT ON VIEW @extschema@.eo_scopes IS
    'the scopes (namespaces of keys) and the roles that own them';

-- outboxes and relays
COMMENT ON FUNCTION @extschema@.eo_outbox_create(pg_catalog.text, pg_catalog.name, pg_catalog.text, pg_catalog.int4, pg_catalog.interval, pg_catalog.int4, pg_catalog.interval, pg_catalog.bool) IS
    'create an outbox table (or adopt one eo made before); returns it';
COMMENT ON FUNCTION @extschema@.eo_outbox_drop(pg_catalog.text) IS
    'drop an outbox with its events and consumer groups';
COMMENT ON FUNCTION @extschema@.eo_emit(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.jsonb) IS
    'write an event to an outbox in the caller''s transaction; returns its id';
COMMENT ON FUNCTION @extschema@.eo_group_create(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'create a consumer group of an outbox, owned by a role';
COMMENT ON FUNCTION @extschema@.eo_group_drop(pg_catalog.text, pg_catalog.text) IS
    'drop a consumer group of an outbox, with its position';
COMMENT ON FUNCTION @extschema@.eo_relay_fetch(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.interval) IS
    'lease the next page of events of a free slot of a consumer group';
COMMENT ON FUNCTION @extschema@.eo_relay_fetch(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.interval, pg_catalog.int4, pg_catalog.bool) IS
    'lease the next pages of events of several free slots of a consumer group, a token each';
COMMENT ON FUNCTION @extschema@.eo_relay_status(pg_catalog.text, pg_catalog.text) IS
    'per slot of a consumer group: exact backlog, and whether caught up, ready or leased';
COMMENT ON FUNCTION @extschema@.eo_relay_ack(pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
    'acknowledge a leased page of events; returns how many events it covered';
COMMENT ON FUNCTION @extschema@.eo_relay_ack(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.int8) IS
    'acknowledge a leased page''s events up to upto_seq (the rest comes back); returns how many';
COMMENT ON FUNCTION @extschema@.eo_relay_ack_pages(pg_catalog.text, pg_catalog.text, pg_catalog.int8[]) IS
    'acknowledge the pages of several lease tokens whole, all or nothing; returns how many events';
COMMENT ON FUNCTION @extschema@.eo_relay_extend(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.interval) IS
    'renew the lease on a page of events; returns the new expiry';
COMMENT ON FUNCTION @extschema@.eo_relay_release(pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
    'give a leased page of events back unacknowledged';
COMMENT ON FUNCTION @extschema@.eo_relay_wait(pg_catalog.text, pg_catalog.interval) IS
    'sleep until a transaction that wrote events to the outbox commits (true) or the timeout ends (false)';
COMMENT ON FUNCTION @extschema@.eo_relay_wait(pg_catalog.text, pg_catalog.interval, pg_catalog.text, pg_catalog.interval) IS
    'sleep as eo_relay_wait(outbox, timeout) does, or until a lease of the group can be taken over; then linger';

-- maintenance and monitoring
COMMENT ON FUNCTION @extschema@.eo_maintain() IS
    'run one maintenance pass: reclaim expired leases, switch, retire and drop key generations, keep outbox partitions';
COMMENT ON FUNCTION @extschema@.eo_outbox_maintain() IS
    'run the outbox part of a maintenance pass alone: partitions made ahead, dropped, held or busy';
COMMENT ON FUNCTION @extschema@.eo_keys() IS
    'every key row of the live generations, every role''s, results included (for debugging; granted to no one)';
COMMENT ON FUNCTION @extschema@.eo_key_stats() IS
    'exact counts of keys by state and of leases, reading every key (behind eo_keys_overview)';
COMMENT ON FUNCTION @extschema@.eo_claim_stats() IS
    'duplicates served, fingerprint conflicts and stale tokens refused in this database (behind eo_keys_overview)';
COMMENT ON FUNCTION @extschema@.eo_outbox_stats() IS
    'per outbox and consumer group: exact backlog, lag, whether it holds retention back (behind eo_outbox_status)';
COMMENT ON VIEW @extschema@.eo_keys_overview IS
    'exact counts of keys by state and of leases, reading every key, and what claims replayed or refused';
COMMENT ON VIEW @extschema@.eo_outbox_status IS
    'per outbox and consumer group: exact backlog, oldest unacknowledged event, lag, whether it holds retention back';
COMMENT ON VIEW @extschema@.eo_partitions IS
    'the key store''s generations: state, time span, estimated keys and size';

-- eo_metrics: for scrapers, cheap at any size
COMMENT ON FUNCTION eo_metrics.claims() IS
    'counters of what the key functions answered in this database (behind view eo_metrics.claims)';
COMMENT ON FUNCTION eo_metrics.keys_redriven() IS
    'dead keys redriven in this database (column keys_redriven of view eo_metrics.claims)';
COMMENT ON FUNCTION eo_metrics.maintenance() IS
    'counters of the maintenance passes in this database (behind view eo_metrics.maintenance)';
COMMENT ON FUNCTION eo_metrics.keys() IS
    'the key store''s size, leases and retries waiting, from the catalog and the lease index (behind view eo_metrics.keys)';
COMMENT ON FUNCTION eo_metrics.outbox() IS
    'per outbox and consumer group: event counters and the oldest pending event''s age (behind view eo_metrics.outbox)';
COMMENT ON VIEW eo_metrics.claims IS
    'what the key functions answered in this database: claimed, duplicates, busy, dead and more, counted';
COMMENT ON VIEW eo_metrics.maintenance IS
    'the maintenance passes in this database: the last one''s end and length, and counters';
COMMENT ON VIEW eo_metrics.keys IS
    'the key store: generations, estimated keys, bytes, leases and retries waiting';
COMMENT ON VIEW eo_metrics.outbox IS
    'per outbox and consumer group: events emitted, fetched, acknowledged, redelivered; oldest pending age';

-- ---- consumer groups that wait for standbys ----

-- A group's standby_slots: the physical replication slots whose standbys
-- must have flushed a transaction before the group hands out its events
-- (outbox_standbys.c): no event a consumer acted on is missing from a
-- standby promoted after an asynchronous failover.  NULL: at once, as
-- before.
ALTER TABLE eo_internal.eo_outbox_groups ADD COLUMN standby_slots pg_catalog.name[]
    CHECK (pg_catalog.array_ndims(standby_slots) OPERATOR(pg_catalog.=) 1
           AND pg_catalog.cardinality(standby_slots) OPERATOR(pg_catalog.<=) 64
           AND pg_catalog.array_position(standby_slots, NULL::pg_catalog.name) IS NULL);

-- eo_group_set_standby_slots(outbox, consumer_group, standby_slots): set
-- or clear (NULL, '{}') the list; same rights as eo_relay_fetch.
CREATE FUNCTION @extschema@.eo_group_set_standby_slots(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    standby_slots pg_catalog.name[])
RETURNS void
AS 'MODULE_PATHNAME', 'eo_group_set_standby_slots'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_group_set_standby_slots(pg_catalog.text, pg_catalog.text, pg_catalog.name[]) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.eo_group_set_standby_slots(pg_catalog.text, pg_catalog.text, pg_catalog.name[]) IS
    'hand out the group''s events only once the standbys of these physical replication slots have flushed their transactions (NULL: at once)';

-- eo_relay_standbys(outbox, consumer_group): the slots the group waits
-- for, whether each exists and is streamed from, what its standby
-- flushed and how many bytes of WAL that is behind.  Same rights as
-- eo_relay_fetch.
CREATE FUNCTION @extschema@.eo_relay_standbys(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    OUT slot_name pg_catalog.name,
    OUT present pg_catalog.bool,
    OUT active pg_catalog.bool,
    OUT flushed_lsn pg_catalog.pg_lsn,
    OUT behind_bytes pg_catalog.int8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'eo_relay_standbys'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_standbys(pg_catalog.text, pg_catalog.text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.eo_relay_standbys(pg_catalog.text, pg_catalog.text) IS
    'the standby slots a consumer group waits for: present, streamed from, flushed position, bytes behind';

-- The same for every group, for monitoring (pg_monitor).
CREATE FUNCTION eo_metrics.relay_standbys(
    OUT outbox pg_catalog.text,
    OUT consumer_group pg_catalog.text,
    OUT slot_name pg_catalog.name,
    OUT present pg_catalog.bool,
    OUT active pg_catalog.bool,
    OUT flushed_lsn pg_catalog.pg_lsn,
    OUT behind_bytes pg_catalog.int8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'eo_relay_standbys'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE VIEW eo_metrics.relay_standbys AS
SELECT * FROM eo_metrics.relay_standbys();
REVOKE ALL ON FUNCTION eo_metrics.relay_standbys() FROM PUBLIC;
REVOKE ALL ON eo_metrics.relay_standbys FROM PUBLIC;
GRANT EXECUTE ON FUNCTION eo_metrics.relay_standbys() TO pg_monitor;
GRANT SELECT ON eo_metrics.relay_standbys TO pg_monitor;
COMMENT ON FUNCTION eo_metrics.relay_standbys() IS
    'per consumer group that waits for standbys, each standby slot: present, streamed from, flushed position, bytes behind (behind view eo_metrics.relay_standbys)';
COMMENT ON VIEW eo_metrics.relay_standbys IS
    'per consumer group that waits for standbys, each standby slot: present, streamed from, flushed position, bytes behind';

-- ---- fencing tokens across promotions ----

-- Lease and relay tokens carry an epoch in their high bits, at least the
-- timeline's ID plus a base (fencing.c): a promoted standby's tokens are
-- above every token of the timeline before, whatever the replication
-- lost.  The base, per token sequence (0 without a row), is raised by the
-- worker when a sequence is ahead of the timeline's epoch (pg_upgrade and
-- a restore into a new cluster begin timeline 1 again).  Epochs count
-- from 1 on this update's timeline (its ID from the current WAL file's
-- name), so that a cluster promoted many times before has as many left
-- as a new one (8,191).  0.2.0's relay tokens carried their group's id
-- where the epoch is now: the relay sequence moves to epoch 1 with its
-- counter kept, so no token after the update equals one before it (a
-- holder of a 0.2.0 token is refused as no longer holding its page).
CREATE TABLE eo_internal.eo_token_epochs (
    sequence pg_catalog.regclass PRIMARY KEY,
    base pg_catalog.int8 NOT NULL CHECK (base BETWEEN -4294967295 AND 8191)
);
REVOKE ALL ON eo_internal.eo_token_epochs FROM PUBLIC;
INSERT INTO eo_internal.eo_token_epochs (sequence, base)
SELECT v.seq, 1 OPERATOR(pg_catalog.-) t.tli
FROM (VALUES ('eo_internal.eo_lease_token_seq'::pg_catalog.regclass),
             ('eo_internal.eo_outbox_token_seq'::pg_catalog.regclass)) v (seq),
     (SELECT ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.pg_walfile_name(
                  pg_catalog.pg_current_wal_lsn()), 1, 8))::pg_catalog.bit(32)::pg_catalog.int8 AS tli) t;
SELECT pg_catalog.setval('eo_internal.eo_outbox_token_seq',
                         (1::pg_catalog.int8 OPERATOR(pg_catalog.<<) 40) OPERATOR(pg_catalog.+) last_value)
FROM eo_internal.eo_outbox_token_seq;
-- Not dumped: a restore's CREATE EXTENSION seeds it for the new cluster's
-- timeline, and the worker raises the base over the restored sequences.
COMMENT ON TABLE eo_internal.eo_token_epochs IS
    'per token sequence, how far its epochs are above the timeline ID (raised after pg_upgrade or a restore)';

-- ---- keys: the new columns, last ----

-- What claims need is changed last, after everything that may wait for a
-- lock another role can hold (eo_metrics.claims, which a pg_monitor
-- member may hold open in a transaction, is replaced above): from the
-- ALTER TYPE on, every new claim waits for this update to commit.  What
-- follows still waits for claims in flight, and for whoever else holds
-- the type or a key table: a role's transaction left open after a claim,
-- or a temporary table made OF eo_claim_result while 0.2.0 let PUBLIC use
-- the type.  So, unless the session chose its own, these waits are
-- bounded here by a lock_timeout of about 2 s: past it the update fails
-- (55P03, nothing changed; run it again) and claims go on, instead of
-- queueing behind it for as long as that role likes.  A lock_timeout the
-- caller chose (SET in the session, or the role's own) is kept; one from
-- the database (ALTER DATABASE ... SET, which its untrusted owner can
-- make a day), the server's configuration or none is bounded.  Set
-- LOCAL, and the value it had set back at the end of this script (kept
-- meanwhile in a placeholder setting): a plain SET in an extension script
-- outlives it.
DO $$
DECLARE
    src pg_catalog.text;
    ms pg_catalog.int8;
BEGIN
    SELECT s.source, s.setting::pg_catalog.int8 INTO src, ms
    FROM pg_catalog.pg_settings s WHERE s.name OPERATOR(pg_catalog.=) 'lock_timeout';
    IF src OPERATOR(pg_catalog.<>) ALL (ARRAY['session', 'client', 'user', 'database user'])
       AND (ms OPERATOR(pg_catalog.=) 0 OR ms OPERATOR(pg_catalog.>) 2000) THEN
        PERFORM pg_catalog.set_config('eo_update.lock_timeout',
                                      pg_catalog.current_setting('lock_timeout'), true);
        PERFORM pg_catalog.set_config('lock_timeout', '2s', true);
    END IF;
END
$$;

-- eo_claim returns a key's recovery point and state (the columns the key
-- tables gain below) to its next holder (status 'claimed').  The type
-- grows in place, so eo_claim and its grants stay as they are; it is
-- locked (ACCESS EXCLUSIVE) to the end of the update.
ALTER TYPE @extschema@.eo_claim_result
    ADD ATTRIBUTE recovery_point pg_catalog.text,
    ADD ATTRIBUTE recovery_state pg_catalog.jsonb;
-- Calling eo_claim needs no USAGE on its type; only making something of
-- the type does, and a table made OF it (by anyone, before this) would
-- stop the next ALTER TYPE.
REVOKE USAGE ON TYPE @extschema@.eo_claim_result FROM PUBLIC;

-- Every key table gains, last (keystore.c reads columns by number):
-- - recovery_point, recovery_state: the progress a lease holder recorded
--   with eo_recovery_point, handed to the next holder by eo_claim;
-- - attempts_before_redrive: the attempts a dead key had when it was last
--   redriven, so that eo.max_attempts counts from there while `attempts`
--   keeps the whole history.
-- Nullable columns without a default: nothing is rewritten, but each
-- table is locked (ACCESS EXCLUSIVE) to the end of the update, so claims
-- wait for it.
DO $$
DECLARE
    r pg_catalog.regclass;
BEGIN
    -- newest first, the order in which claims lock them: the other order
    -- made claims under load deadlock with the update (40P01)
    FOR r IN SELECT 'eo_internal.eo_keys_template'::pg_catalog.regclass
             UNION ALL
             (SELECT c.oid FROM eo_internal.eo_generations g
              JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) g.relid
              ORDER BY g.gen DESC)
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN recovery_point pg_catalog.text,'
                                  ' ADD COLUMN recovery_state pg_catalog.jsonb,'
                                  ' ADD COLUMN attempts_before_redrive pg_catalog.int4', r);
    END LOOP;
END
$$;

-- The lock_timeout bounded above for this script, set back.
DO $$
DECLARE
    saved pg_catalog.text := pg_catalog.current_setting('eo_update.lock_timeout', true);
BEGIN
    IF saved OPERATOR(pg_catalog.<>) '' THEN
        PERFORM pg_catalog.set_config('lock_timeout', saved, true);
        PERFORM pg_catalog.set_config('eo_update.lock_timeout', '', true);
    END IF;
END
$$;
