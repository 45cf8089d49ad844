
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
