--
-- key_indexes: a new key's row gets an entry in every index of its
-- generation.  eo writes it without the executor when the generation has
-- exactly the template's two indexes (the unique one on (key, scope), the
-- partial one on lease_expires_at); with any other index, here one a
-- superuser added, it takes the executor's path, which indexes it in all.
-- amcheck's bt_index_check(..., heapallindexed) fails if a row the index
-- should have (its predicate included) is missing from it.
--
CREATE EXTENSION IF NOT EXISTS amcheck;

-- Every index of the current generation checked against its heap.
CREATE FUNCTION pg_temp.check_indexes() RETURNS TABLE (indexes bigint, rows_checked bigint)
LANGUAGE plpgsql AS $$
DECLARE
    gen regclass := (SELECT relid FROM eo_internal.eo_generations WHERE state = 'c');
    i oid;
BEGIN
    indexes := 0;
    FOR i IN SELECT indexrelid FROM pg_index WHERE indrelid = gen LOOP
        PERFORM bt_index_check(i, true);
        indexes := indexes + 1;
    END LOOP;
    EXECUTE format('SELECT count(*) FROM %s WHERE key LIKE %L', gen, 'ki-%') INTO rows_checked;
    RETURN NEXT;
END $$;

-- The template's indexes: a key in transaction mode (written at commit)
-- and one in lease mode (written at once, with its expiry).
SELECT status FROM eo_claim('ki-a:txn');
SELECT status FROM eo_claim('ki-a:lease', lease => '1 hour');
SELECT * FROM pg_temp.check_indexes();

-- One more index: the executor's path, and every index has the new rows.
DO $$
BEGIN
    EXECUTE format('CREATE INDEX ki_extra ON %s (created_at)',
                   (SELECT relid FROM eo_internal.eo_generations WHERE state = 'c'));
END $$;
SELECT status FROM eo_claim('ki-b:txn');
SELECT status FROM eo_claim('ki-b:lease', lease => '1 hour');
SELECT * FROM pg_temp.check_indexes();
DROP INDEX eo_internal.ki_extra;

-- Without it, the template's indexes again.
SELECT status FROM eo_claim('ki-c:txn');
SELECT status FROM eo_claim('ki-c:lease', lease => '1 hour');
SELECT * FROM pg_temp.check_indexes();
DROP EXTENSION amcheck;
