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
