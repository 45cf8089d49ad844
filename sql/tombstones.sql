--
-- tombstones: the second tier of retention.  With
-- eo.tombstone_retention set, a key generation that retires leaves a
-- compact tombstone of each done or dead key; a claim that meets one is a
-- duplicate (or dead) with no result and result_expired set.
--
SHOW eo.tombstone_retention;
SET eo.tombstone_retention = '90d';

-- Keys of every kind, in a generation that will retire.
BEGIN;
SELECT status FROM eo_claim('ts:done', 'fp-1');
SELECT eo_complete('ts:done', '{"charge": "ch_1"}');
COMMIT;
SELECT status FROM eo_claim('ts:no-result');
SELECT eo_scope_create('ts-scope');
SELECT status FROM eo_claim('ts:scoped', scope => 'ts-scope');
SET eo.max_attempts = 1;
SELECT eo_fail('ts:dead', 'gave up');
RESET eo.max_attempts;
SELECT eo_fail('ts:rejected', 'bad amount', sqlstate => '22003');
SELECT eo_fail('ts:failed', 'later');
SELECT status, result_expired FROM eo_claim('ts:done');

-- Switch twice, then retire with eo.retention = 1 s: the first generation
-- goes, its finished keys become tombstones in the same transaction.
SET eo.partition_interval = 1;
SELECT pg_sleep(1.1);
SELECT switched FROM eo_maintain();
SELECT pg_sleep(1.1);
SELECT switched FROM eo_maintain();
SET eo.retention = 1;
SELECT pg_sleep(1.1);
-- (with an operator = on "char" put before pg_catalog on the search_path:
-- the burial, run as the extension owner, must not use it)
CREATE SCHEMA regress_eo_evil;
CREATE FUNCTION regress_eo_evil.char_eq("char", "char") RETURNS bool
LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'hijacked as %', current_user; END$$;
CREATE OPERATOR regress_eo_evil.= (LEFTARG = "char", RIGHTARG = "char", FUNCTION = regress_eo_evil.char_eq);
SET search_path = regress_eo_evil, pg_catalog, public;
SELECT retired > 0 AS retired FROM eo_maintain();
RESET search_path;
DROP SCHEMA regress_eo_evil CASCADE;
RESET eo.retention;
SELECT state, count(*) FROM eo_internal.eo_tombstone_generations GROUP BY state ORDER BY state;
SELECT k, t.state, t.fp IS NOT NULL AS has_fingerprint
FROM (VALUES ('ts:done', 0), ('ts:no-result', 0), ('ts:dead', 0), ('ts:rejected', 0),
             ('ts:scoped', (SELECT id FROM eo_internal.eo_scopes WHERE name = 'ts-scope'))) AS v(k, scope)
LEFT JOIN eo_internal.eo_tombstones_1 t
  ON t.hash = eo_internal.eo_tombstone_hash(v.scope, v.k)
ORDER BY k;
SELECT count(*) AS full_records FROM eo_keys() WHERE key IN ('ts:done', 'ts:no-result', 'ts:scoped', 'ts:dead');

-- Redeliveries after the full record is gone.
SELECT * FROM eo_claim('ts:done');
SELECT status, result, result_expired FROM eo_claim('ts:done', 'fp-1');
SELECT eo_test_try($$SELECT status FROM eo_claim('ts:done', 'fp-2')$$);
SELECT status, result_expired FROM eo_claim('ts:no-result', 'any-fingerprint');
SELECT status, result_expired FROM eo_claim('ts:scoped', scope => 'ts-scope');
SELECT status, result_expired FROM eo_claim('ts:scoped');
SELECT status, result_expired FROM eo_claim('ts:dead');
-- a lease-mode claim meets it too
SELECT status, lease_token, result_expired FROM eo_claim('ts:done', lease => '1 min');
-- A rejected key leaves no tombstone (its error could not be replayed):
-- it is claimed again.  A failed key was moved on, not retired.
SELECT status, result_expired FROM eo_claim('ts:rejected');
SELECT status, attempts, result_expired FROM eo_claim('ts:failed');
SELECT status, result_expired FROM eo_claim('ts:brand-new');

-- A tombstone belongs to the key's owner, as the key did: another role's
-- claim is refused (42501), as it was while the full record lived.
CREATE ROLE regress_eo_ts_other;
GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text) TO regress_eo_ts_other;
GRANT EXECUTE ON FUNCTION eo_fail(text, text, bigint, interval, text, text, boolean) TO regress_eo_ts_other;
SET ROLE regress_eo_ts_other;
SELECT eo_test_try($$SELECT status FROM eo_claim('ts:done')$$);
-- nor can it take the key over by failing it
SELECT eo_test_try($$SELECT eo_fail('ts:done', 'boom')$$);
RESET ROLE;
-- The owner's eo_fail of a tombstoned key: done is finished, dead stays dead.
SELECT eo_test_try($$SELECT eo_fail('ts:done', 'late failure')$$);
SELECT eo_fail('ts:dead', 'again');
SELECT status, result_expired FROM eo_claim('ts:done');

-- Nothing for PUBLIC: the hash functions and the tables.
SELECT has_function_privilege('public', 'eo_internal.eo_tombstone_hash(int4, text)', 'EXECUTE') AS hash_public,
       has_table_privilege('public', 'eo_internal.eo_tombstones_1', 'SELECT') AS table_public;

-- Off: claims no longer look, and old tombstone generations go.
SET eo.tombstone_retention = 0;
SELECT status, result_expired FROM eo_claim('ts:dead');
SET eo.tombstone_retention = '90d';
SELECT status, result_expired FROM eo_claim('ts:no-result');

-- Expiry: with eo.tombstone_retention = 1 s the tombstone generation is
-- switched, retired and dropped, and the key is new again.
SET eo.tombstone_retention = 1;
SELECT pg_sleep(1.1);
SELECT dropped >= 0 AS ran FROM eo_maintain();
SELECT pg_sleep(1.1);
SELECT dropped >= 0 AS ran FROM eo_maintain();
SELECT dropped >= 0 AS ran FROM eo_maintain();
SELECT count(*) AS tombstones_1_left FROM pg_class WHERE relname = 'eo_tombstones_1';
SELECT status, result_expired FROM eo_claim('ts:no-result');
RESET eo.tombstone_retention;
RESET eo.partition_interval;
