--
-- key_indexes: a new key's row gets an entry in every index of its
-- generation.  eo writes it without the executor when the generation has
-- exactly the template's two indexes (the unique one on (key, scope), the
-- partial one on lease_expires_at); with any other index, here one a
-- superuser added, it takes the executor's path, which indexes it in all.
-- Each count below is read through one index alone (the plan is checked),
-- so a missing entry shows as a missing row.
--
-- Does the plan of `q` read index `idx`?
CREATE FUNCTION pg_temp.reads(q text, idx oid) RETURNS bool LANGUAGE plpgsql AS $$
DECLARE l text;
BEGIN
    FOR l IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
        IF l LIKE '%' || (SELECT relname FROM pg_class WHERE oid = idx) || '%' THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END $$;

CREATE FUNCTION pg_temp.counts(gen oid, key_idx oid, lease_idx oid, prefix text)
RETURNS TABLE (by_key bigint, key_plan bool, by_lease bigint, lease_plan bool)
LANGUAGE plpgsql AS $$
DECLARE
    qk text := format('SELECT count(*) FROM %s WHERE key LIKE %L AND key >= %L AND key < %L AND scope = 0',
                      gen::regclass, prefix || '%', prefix, prefix || '~');
    ql text := format('SELECT count(*) FROM %s WHERE lease_expires_at IS NOT NULL AND key LIKE %L',
                      gen::regclass, prefix || '%');
BEGIN
    SET LOCAL enable_seqscan = off;
    SET LOCAL enable_bitmapscan = off;
    EXECUTE qk INTO by_key;
    key_plan := pg_temp.reads(qk, key_idx);
    EXECUTE ql INTO by_lease;
    lease_plan := pg_temp.reads(ql, lease_idx);
    RETURN NEXT;
END $$;

-- The template's indexes: a key in transaction mode (written at commit)
-- and one in lease mode (written at once, with its expiry).
SELECT status FROM eo_claim('ki-a:txn');
SELECT status FROM eo_claim('ki-a:lease', lease => '1 hour');
-- (the current generation: the first claim made it if no test had)
SELECT g.relid::oid AS gen,
       (SELECT i.indexrelid FROM pg_index i WHERE i.indrelid = g.relid AND i.indisunique) AS key_idx,
       (SELECT i.indexrelid FROM pg_index i WHERE i.indrelid = g.relid AND NOT i.indisunique) AS lease_idx
FROM eo_internal.eo_generations g WHERE g.state = 'c' \gset
SELECT * FROM pg_temp.counts(:gen, :key_idx, :lease_idx, 'ki-a:');

-- One more index: the executor's path, and every index has the new rows.
CREATE FUNCTION pg_temp.add_index(gen oid) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE INDEX ki_extra ON %s (created_at)', gen::regclass);
END $$;
CREATE FUNCTION pg_temp.by_extra(gen oid, OUT n bigint, OUT plan bool) LANGUAGE plpgsql AS $$
DECLARE
    q text := format('SELECT count(*) FROM %s WHERE created_at > %L AND key LIKE %L',
                     gen::regclass, '-infinity', 'ki-%');
BEGIN
    SET LOCAL enable_seqscan = off;
    SET LOCAL enable_bitmapscan = off;
    EXECUTE q INTO n;
    plan := pg_temp.reads(q, 'eo_internal.ki_extra'::regclass);
END $$;
SELECT pg_temp.add_index(:gen);
SELECT status FROM eo_claim('ki-b:txn');
SELECT status FROM eo_claim('ki-b:lease', lease => '1 hour');
SELECT * FROM pg_temp.counts(:gen, :key_idx, :lease_idx, 'ki-b:');
-- ki-a's two rows (indexed when the index was built) and ki-b's two
SELECT * FROM pg_temp.by_extra(:gen);
DROP INDEX eo_internal.ki_extra;

-- Without it, the template's indexes again.
SELECT status FROM eo_claim('ki-c:txn');
SELECT status FROM eo_claim('ki-c:lease', lease => '1 hour');
SELECT * FROM pg_temp.counts(:gen, :key_idx, :lease_idx, 'ki-c:');
