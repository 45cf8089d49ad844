-- eo 0.1.0 install script, assembled by the Makefile from src/sql/*.sql.
\echo Use "CREATE EXTENSION eo" to load this file. \quit

-- ---- idempotency keys (src/sql/keys.sql) ----

-- One row per idempotency key.  state: c = claimed in a transaction (done
-- once committed), d = done, p = processing under a lease, f = failed
-- (retry allowed after lease_expires_at), x = dead.  Written only through
-- the functions below, which run their statements as the table owner.
--
-- Keys live in time generations (src/partition.c): one table per
-- generation, eo_keys_<n>, each made LIKE this template, registered in
-- eo_generations.  Old generations are dropped whole, never DELETEd.
CREATE TABLE @extschema@.eo_keys_template (
    key              pg_catalog.text        NOT NULL,
    owner            pg_catalog.oid         NOT NULL,
    state            pg_catalog."char"      NOT NULL,
    fingerprint      pg_catalog.text,
    result           pg_catalog.jsonb,
    attempts         pg_catalog.int4        NOT NULL,
    lease_token      pg_catalog.int8,
    lease_expires_at pg_catalog.timestamptz,
    last_error       pg_catalog.text,
    created_at       pg_catalog.timestamptz NOT NULL,
    updated_at       pg_catalog.timestamptz NOT NULL,
    UNIQUE (key)
);
-- No CHECK on state: only eo's own code writes it, and the executor would
-- parse the constraint's expression again for every statement.
-- Leases and retry times, for the reclaimer.  The predicate names only
-- lease_expires_at, which a transaction-mode eo_complete does not change,
-- so that update stays HOT.
CREATE INDEX ON @extschema@.eo_keys_template (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
REVOKE ALL ON TABLE @extschema@.eo_keys_template FROM PUBLIC;

-- The generations: a = made ahead, c = current (receives new keys),
-- o = old (read and updated), r = retired (no longer read; dropped next).
CREATE TABLE @extschema@.eo_generations (
    gen        pg_catalog.int4 PRIMARY KEY,
    relid      pg_catalog.oid NOT NULL,
    state      pg_catalog."char" NOT NULL
               CHECK (state OPERATOR(pg_catalog.=) ANY (ARRAY['a','c','o','r']::pg_catalog."char"[])),
    started_at pg_catalog.timestamptz,
    ended_at   pg_catalog.timestamptz
);
CREATE UNIQUE INDEX eo_generations_one_current ON @extschema@.eo_generations (state)
    WHERE state OPERATOR(pg_catalog.=) 'c';
REVOKE ALL ON TABLE @extschema@.eo_generations FROM PUBLIC;

CREATE TABLE @extschema@.eo_keys_1 (LIKE @extschema@.eo_keys_template INCLUDING ALL);
REVOKE ALL ON TABLE @extschema@.eo_keys_1 FROM PUBLIC;
INSERT INTO @extschema@.eo_generations (gen, relid, state, started_at)
    VALUES (1, '@extschema@.eo_keys_1'::pg_catalog.regclass, 'c', pg_catalog.clock_timestamp());

-- Running totals kept by the maintenance pass (shown in eo_keys_overview).
CREATE TABLE @extschema@.eo_counters (
    name  pg_catalog.text PRIMARY KEY,
    value pg_catalog.int8 NOT NULL
);
INSERT INTO @extschema@.eo_counters VALUES ('leases_reclaimed', 0);
REVOKE ALL ON TABLE @extschema@.eo_counters FROM PUBLIC;

-- Fencing tokens: strictly increasing per key because they are strictly
-- increasing overall.
CREATE SEQUENCE @extschema@.eo_lease_token_seq AS pg_catalog.int8;
REVOKE ALL ON SEQUENCE @extschema@.eo_lease_token_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.eo_lease_token_seq', '');

CREATE FUNCTION @extschema@.eo_claim(
    key pg_catalog.text,
    fingerprint pg_catalog.text DEFAULT NULL,
    lease pg_catalog.interval DEFAULT NULL,
    OUT status pg_catalog.text,
    OUT result pg_catalog.jsonb,
    OUT attempts pg_catalog.int4,
    OUT lease_token pg_catalog.int8,
    OUT lease_expires_at pg_catalog.timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'eo_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_complete(
    key pg_catalog.text,
    result pg_catalog.jsonb DEFAULT NULL,
    lease_token pg_catalog.int8 DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'eo_complete'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_fail(
    key pg_catalog.text,
    error pg_catalog.text DEFAULT NULL,
    lease_token pg_catalog.int8 DEFAULT NULL,
    retry_after pg_catalog.interval DEFAULT NULL)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'eo_fail'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_extend(
    key pg_catalog.text,
    lease_token pg_catalog.int8,
    lease pg_catalog.interval)
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'eo_extend'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_status(
    key pg_catalog.text,
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

-- Nothing is granted to PUBLIC: an administrator grants the API to the
-- roles that process messages (see README, "Privileges").  Each key still
-- belongs to the role that claimed it.
REVOKE ALL ON FUNCTION @extschema@.eo_claim(pg_catalog.text, pg_catalog.text, pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_complete(pg_catalog.text, pg_catalog.jsonb, pg_catalog.int8) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_fail(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_extend(pg_catalog.text, pg_catalog.int8, pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_status(pg_catalog.text) FROM PUBLIC;

-- ---- transactional outbox and relay (src/sql/outbox.sql) ----

-- One row per outbox.  The outbox table itself is made by eo_outbox_create
-- (owned by the extension owner, not a member of the extension, so pg_dump
-- dumps it like any table).  mode: t = table, w = WAL messages.
CREATE TABLE @extschema@.eo_outboxes (
    name               pg_catalog.text        NOT NULL,
    nspname            pg_catalog.name        NOT NULL,
    mode               pg_catalog."char"      NOT NULL,
    slots              pg_catalog.int4        NOT NULL,
    partition_interval pg_catalog.interval    NOT NULL,
    premake            pg_catalog.int4        NOT NULL,
    retention          pg_catalog.interval    NOT NULL,
    channel            pg_catalog.text,       -- NULL: no NOTIFY
    created_at         pg_catalog.timestamptz NOT NULL,
    CONSTRAINT eo_outboxes_pkey PRIMARY KEY (name),
    CONSTRAINT eo_outboxes_mode_check
        CHECK (mode OPERATOR(pg_catalog.=) ANY (ARRAY['t','w']::pg_catalog."char"[]))
);
REVOKE ALL ON TABLE @extschema@.eo_outboxes FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.eo_outboxes', '');

CREATE TABLE @extschema@.eo_outbox_groups (
    outbox     pg_catalog.text        NOT NULL,
    name       pg_catalog.text        NOT NULL,
    created_at pg_catalog.timestamptz NOT NULL,
    CONSTRAINT eo_outbox_groups_pkey PRIMARY KEY (outbox, name),
    CONSTRAINT eo_outbox_groups_outbox_fkey FOREIGN KEY (outbox)
        REFERENCES @extschema@.eo_outboxes (name) ON DELETE CASCADE
);
REVOKE ALL ON TABLE @extschema@.eo_outbox_groups FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.eo_outbox_groups', '');

-- The position of each slot of each consumer group (see src/relay.c):
-- pos_snap: every event whose transaction is visible in it is acknowledged;
-- pos_lo: no event invisible in pos_snap has a lower seq;
-- batch_*: the batch (pos_snap, batch_snap] being handed out in pages,
--   acked_seq the last seq acknowledged in it;
-- page_*: the last page handed out (state o = outstanding, a = acknowledged,
--   r = released), lease_token / lease_expires_at its lease;
-- hist_*: recent (next txid, last seq) pairs that bound pos_lo.
CREATE TABLE @extschema@.eo_outbox_slots (
    outbox           pg_catalog.text        NOT NULL,
    grp              pg_catalog.text        NOT NULL,
    slot             pg_catalog.int4        NOT NULL,
    pos_snap         pg_catalog.pg_snapshot NOT NULL,
    pos_lo           pg_catalog.int8        NOT NULL,
    batch_snap       pg_catalog.pg_snapshot,
    batch_hi         pg_catalog.int8,
    batch_lo         pg_catalog.int8,
    acked_seq        pg_catalog.int8,
    page_state       pg_catalog."char",
    page_end         pg_catalog.int8,
    page_last        pg_catalog.bool,
    page_count       pg_catalog.int4,
    lease_token      pg_catalog.int8,
    lease_expires_at pg_catalog.timestamptz,
    hist_xid         pg_catalog.xid8[]      NOT NULL,
    hist_seq         pg_catalog.int8[]      NOT NULL,
    fetched_at       pg_catalog.timestamptz,
    acked_at         pg_catalog.timestamptz,
    CONSTRAINT eo_outbox_slots_pkey PRIMARY KEY (outbox, grp, slot),
    CONSTRAINT eo_outbox_slots_group_fkey FOREIGN KEY (outbox, grp)
        REFERENCES @extschema@.eo_outbox_groups (outbox, name) ON DELETE CASCADE,
    CONSTRAINT eo_outbox_slots_page_state_check
        CHECK (page_state OPERATOR(pg_catalog.=) ANY (ARRAY['o','a','r']::pg_catalog."char"[]))
);
REVOKE ALL ON TABLE @extschema@.eo_outbox_slots FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.eo_outbox_slots', '');

-- Relay lease tokens: strictly increasing, so a superseded token is
-- recognisably older than the slot's current one.
CREATE SEQUENCE @extschema@.eo_outbox_token_seq AS pg_catalog.int8;
REVOKE ALL ON SEQUENCE @extschema@.eo_outbox_token_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.eo_outbox_token_seq', '');

-- ---- administration ----

CREATE FUNCTION @extschema@.eo_outbox_create(
    name pg_catalog.text,
    schema pg_catalog.name DEFAULT NULL,
    mode pg_catalog.text DEFAULT 'table',
    slots pg_catalog.int4 DEFAULT 8,
    partition_interval pg_catalog.interval DEFAULT '1 day',
    premake pg_catalog.int4 DEFAULT 4,
    retention pg_catalog.interval DEFAULT '7 days',
    notify pg_catalog.bool DEFAULT true)
RETURNS pg_catalog.regclass
AS 'MODULE_PATHNAME', 'eo_outbox_create'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_outbox_drop(name pg_catalog.text)
RETURNS void
AS 'MODULE_PATHNAME', 'eo_outbox_drop'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_outbox_maintain(
    OUT outbox pg_catalog.text,
    OUT action pg_catalog.text,
    OUT partition pg_catalog.text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'eo_outbox_maintain'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_group_create(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    start_at pg_catalog.text DEFAULT 'beginning')
RETURNS void
AS 'MODULE_PATHNAME', 'eo_group_create'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_group_drop(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text)
RETURNS void
AS 'MODULE_PATHNAME', 'eo_group_drop'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- ---- producing ----

CREATE FUNCTION @extschema@.eo_emit(
    outbox pg_catalog.text,
    aggregatetype pg_catalog.text,
    aggregateid pg_catalog.text,
    type pg_catalog.text,
    payload pg_catalog.jsonb,
    headers pg_catalog.jsonb DEFAULT NULL)
RETURNS pg_catalog.uuid
AS 'MODULE_PATHNAME', 'eo_emit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The statement trigger every table-mode outbox gets: one NOTIFY per
-- transaction on the outbox's channel.
CREATE FUNCTION @extschema@.eo_outbox_notify()
RETURNS trigger
AS 'MODULE_PATHNAME', 'eo_outbox_notify'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- ---- relaying ----

CREATE FUNCTION @extschema@.eo_relay_fetch(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    max_events pg_catalog.int4 DEFAULT 1000,
    lease pg_catalog.interval DEFAULT '30 seconds',
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

-- After a fetch that returned nothing: sleep until a transaction that wrote
-- events into the outbox commits (true) or the timeout ends (false).
-- Wakes through shared memory with the preload; without it, sleeps the
-- timeout (poll).
CREATE FUNCTION @extschema@.eo_relay_wait(
    outbox pg_catalog.text,
    timeout pg_catalog.interval DEFAULT '10 seconds')
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'eo_relay_wait'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_relay_ack(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    lease_token pg_catalog.int8)
RETURNS pg_catalog.int4
AS 'MODULE_PATHNAME', 'eo_relay_ack'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_relay_extend(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    lease_token pg_catalog.int8,
    lease pg_catalog.interval)
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'eo_relay_extend'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.eo_relay_release(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    lease_token pg_catalog.int8)
RETURNS void
AS 'MODULE_PATHNAME', 'eo_relay_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- ---- monitoring ----

CREATE FUNCTION @extschema@.eo_outbox_stats(
    OUT outbox pg_catalog.text,
    OUT consumer_group pg_catalog.text,
    OUT slots pg_catalog.int4,
    OUT leased_slots pg_catalog.int4,
    OUT backlog pg_catalog.int8,
    OUT oldest_unacked_at pg_catalog.timestamptz,
    OUT lag pg_catalog.interval,
    OUT holds_retention pg_catalog.bool,
    OUT last_fetch_at pg_catalog.timestamptz,
    OUT last_ack_at pg_catalog.timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'eo_outbox_stats'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Per outbox and consumer group: events not yet acknowledged (backlog),
-- the age of the oldest of them (lag), and whether the group keeps a
-- partition past retention from being dropped.
CREATE VIEW @extschema@.eo_outbox_status AS
SELECT * FROM @extschema@.eo_outbox_stats();

-- Nothing for PUBLIC.  Producers need EXECUTE on eo_emit and INSERT on the
-- outbox table; relays EXECUTE on the eo_relay_* functions and SELECT on
-- the outbox table; administrators the rest (see README, "Outbox").
REVOKE ALL ON FUNCTION @extschema@.eo_outbox_create(pg_catalog.text, pg_catalog.name, pg_catalog.text, pg_catalog.int4, pg_catalog.interval, pg_catalog.int4, pg_catalog.interval, pg_catalog.bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_outbox_drop(pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_outbox_maintain() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_group_create(pg_catalog.text, pg_catalog.text, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_group_drop(pg_catalog.text, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_emit(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_outbox_notify() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_fetch(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_ack(pg_catalog.text, pg_catalog.text, pg_catalog.int8) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_wait(pg_catalog.text, pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_extend(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_release(pg_catalog.text, pg_catalog.text, pg_catalog.int8) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.eo_outbox_stats() FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.eo_outbox_status FROM PUBLIC;

-- ---- maintenance and monitoring (src/sql/maintain.sql) ----

-- One maintenance pass by hand (the background worker runs the same pass
-- every eo.naptime when eo is in shared_preload_libraries).
CREATE FUNCTION @extschema@.eo_maintain(
    OUT reclaimed pg_catalog.int8,
    OUT dead pg_catalog.int8,
    OUT switched pg_catalog.int8,
    OUT retired pg_catalog.int8,
    OUT dropped pg_catalog.int8)
RETURNS record
AS 'MODULE_PATHNAME', 'eo_maintain'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_maintain() FROM PUBLIC;

-- Every key row of the live generations (operators only; the functions
-- never read it).
CREATE FUNCTION @extschema@.eo_keys()
RETURNS SETOF @extschema@.eo_keys_template
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g pg_catalog.oid;
BEGIN
    FOR g IN SELECT relid FROM @extschema@.eo_generations
             WHERE state OPERATOR(pg_catalog.=) ANY ('{c,o}') ORDER BY gen DESC
    LOOP
        RETURN QUERY EXECUTE pg_catalog.format('SELECT * FROM %s', g::pg_catalog.regclass);
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION @extschema@.eo_keys() FROM PUBLIC;

-- Keys by state and the oldest lease, for operators.  Counts only: no key
-- or result is shown, so granting it reveals no one's data.  It reads
-- every generation, so it is SECURITY DEFINER (with a fixed search_path).
CREATE FUNCTION @extschema@.eo_key_stats(
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
       (SELECT value FROM @extschema@.eo_counters
        WHERE name OPERATOR(pg_catalog.=) 'leases_reclaimed')
FROM @extschema@.eo_keys()
$$;
REVOKE ALL ON FUNCTION @extschema@.eo_key_stats() FROM PUBLIC;

-- What the claim functions replayed or refused, in this database since the
-- server started (shared memory: NULLs without shared_preload_libraries).
CREATE FUNCTION @extschema@.eo_claim_stats(
    OUT duplicates_served pg_catalog.int8,
    OUT fingerprint_conflicts pg_catalog.int8,
    OUT stale_tokens_refused pg_catalog.int8)
RETURNS record
AS 'MODULE_PATHNAME', 'eo_claim_stats'
LANGUAGE C VOLATILE PARALLEL SAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_claim_stats() FROM PUBLIC;

CREATE VIEW @extschema@.eo_keys_overview AS
SELECT k.*, c.* FROM @extschema@.eo_key_stats() k, @extschema@.eo_claim_stats() c;
REVOKE ALL ON TABLE @extschema@.eo_keys_overview FROM PUBLIC;

-- The key store's generations and their sizes.
CREATE VIEW @extschema@.eo_partitions AS
SELECT g.gen,
       g.relid::pg_catalog.regclass AS "table",
       CASE g.state WHEN 'a' THEN 'ahead' WHEN 'c' THEN 'current'
                    WHEN 'o' THEN 'old' ELSE 'retired' END AS state,
       g.started_at,
       g.ended_at,
       c.reltuples::pg_catalog.int8 AS estimated_keys,
       pg_catalog.pg_total_relation_size(g.relid) AS bytes
FROM @extschema@.eo_generations g
LEFT JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) g.relid;
REVOKE ALL ON TABLE @extschema@.eo_partitions FROM PUBLIC;
