
-- ---- maintenance and monitoring (src/sql/maintain.sql) ----

-- One maintenance pass by hand (the background worker runs the same pass
-- every eo.naptime when eo is in shared_preload_libraries).
CREATE FUNCTION @extschema@.eo_maintain(
    OUT reclaimed pg_catalog.int8,
    OUT dead pg_catalog.int8)
RETURNS record
AS 'MODULE_PATHNAME', 'eo_maintain'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_maintain() FROM PUBLIC;

-- Keys by state and the oldest lease, for operators.  Counts only: no key
-- or result is shown, so granting SELECT on it reveals no one's data.
CREATE VIEW @extschema@.eo_keys_overview AS
SELECT pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) ANY (ARRAY['c','d']::pg_catalog."char"[])) AS done,
       pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'p') AS processing,
       pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'f') AS failed,
       pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'x') AS dead,
       pg_catalog.min(updated_at) FILTER (WHERE state OPERATOR(pg_catalog.=) 'p') AS oldest_processing_since,
       pg_catalog.min(lease_expires_at) FILTER (WHERE state OPERATOR(pg_catalog.=) 'p') AS next_lease_expiry,
       pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'p'
           AND lease_expires_at OPERATOR(pg_catalog.<) pg_catalog.now()) AS expired_leases
FROM @extschema@.eo_keys;
REVOKE ALL ON TABLE @extschema@.eo_keys_overview FROM PUBLIC;
