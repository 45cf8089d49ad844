--
-- deferred: a transaction-mode claim of a new key writes no row until
-- commit; it holds eo's lock of the key instead (pg_locks: advisory,
-- objsubid 17743), and the row is written once, done, with the result of
-- eo_complete.  Savepoints, early writes (eo_fail, eo_status) and batches
-- larger than the deferred limit must keep the semantics of claim.sql.
--
-- Rows of the key store, and eo's key locks this backend holds.
CREATE FUNCTION def_rows(prefix text) RETURNS bigint
LANGUAGE sql AS $$ SELECT count(*) FROM eo_keys() WHERE key LIKE prefix || '%' $$;
CREATE FUNCTION def_key_locks() RETURNS bigint
LANGUAGE sql AS $$
    SELECT count(*) FROM pg_locks
    WHERE locktype = 'advisory' AND objsubid = 17743 AND pid = pg_backend_pid()
$$;

-- A claim holds the key's lock and has no row until commit.
BEGIN;
SELECT status FROM eo_claim('def:one');
SELECT def_rows('def:one') AS rows_before_commit, def_key_locks() AS key_locks;
SELECT eo_complete('def:one', '{"n": 1}');
SELECT def_rows('def:one') AS rows_after_complete;
COMMIT;
SELECT def_rows('def:one') AS rows_after_commit, def_key_locks() AS key_locks;
SELECT state, result FROM eo_status('def:one');
SELECT status, result FROM eo_claim('def:one');

-- One write: the committed row is the first and only version (a row
-- inserted and then updated would count an update too).
CREATE FUNCTION def_writes() RETURNS TABLE (inserted bigint, updated bigint)
LANGUAGE sql AS $$
    SELECT s.n_tup_ins, s.n_tup_upd
    FROM pg_stat_user_tables s JOIN eo_internal.eo_generations g ON g.relid = s.relid
    WHERE g.state = 'c'
$$;
SELECT pg_stat_force_next_flush();
SELECT 1 AS flushed;
SELECT pg_stat_clear_snapshot();
CREATE TEMP TABLE def_before AS SELECT * FROM def_writes();
BEGIN;
SELECT status FROM eo_claim('def:one-write');
SELECT eo_complete('def:one-write', '"r"');
COMMIT;
SELECT pg_stat_force_next_flush();
SELECT 1 AS flushed;
SELECT pg_stat_clear_snapshot();
SELECT w.inserted - b.inserted AS rows_inserted, w.updated - b.updated AS rows_updated
FROM def_writes() w, def_before b;

-- Rollback: no row, no lock, the key can be claimed again.
BEGIN;
SELECT status FROM eo_claim('def:rollback');
SELECT eo_complete('def:rollback', '"lost"');
ROLLBACK;
SELECT def_rows('def:rollback') AS rows, def_key_locks() AS key_locks;
SELECT status FROM eo_claim('def:rollback');

-- Claimed twice in one transaction: duplicate, with the result so far;
-- a different fingerprint is still an error; completing twice is refused.
BEGIN;
SELECT status FROM eo_claim('def:twice', 'fp-1');
SELECT status, result FROM eo_claim('def:twice', 'fp-1');
SELECT eo_complete('def:twice', '"first"');
SELECT status, result FROM eo_claim('def:twice');
SELECT eo_test_try($$SELECT status FROM eo_claim('def:twice', 'fp-2')$$);
SELECT eo_test_try($$SELECT eo_complete('def:twice', '"second"')$$);
COMMIT;
SELECT state, result FROM eo_status('def:twice');

-- A claim in a savepoint that rolls back is undone, lock and all.
BEGIN;
SAVEPOINT a;
SELECT status FROM eo_claim('def:sp-claim');
ROLLBACK TO SAVEPOINT a;
SELECT def_key_locks() AS key_locks_after_rollback_to;
SELECT status FROM eo_claim('def:sp-claim');
SELECT eo_complete('def:sp-claim', '"after savepoint"');
COMMIT;
SELECT state, result FROM eo_status('def:sp-claim');

-- A completion in a savepoint that rolls back is undone; the claim stays.
BEGIN;
SELECT status FROM eo_claim('def:sp-complete');
SAVEPOINT a;
SELECT eo_complete('def:sp-complete', '"undone"');
ROLLBACK TO SAVEPOINT a;
SELECT status, result FROM eo_claim('def:sp-complete');
SELECT eo_complete('def:sp-complete', '"kept"');
COMMIT;
SELECT state, result FROM eo_status('def:sp-complete');

-- ... and one in a savepoint that is released counts.
BEGIN;
SELECT status FROM eo_claim('def:sp-release');
SAVEPOINT a;
SELECT eo_complete('def:sp-release', '"released"');
RELEASE SAVEPOINT a;
COMMIT;
SELECT state, result FROM eo_status('def:sp-release');

-- eo_status and eo_fail act on a row: the claim's row is written first.
BEGIN;
SELECT status FROM eo_claim('def:status');
SELECT state FROM eo_status('def:status');
SELECT def_rows('def:status') AS rows_written_early;
SELECT eo_complete('def:status', '"via row"');
COMMIT;
SELECT state, result FROM eo_status('def:status');

BEGIN;
SELECT status FROM eo_claim('def:fail');
SELECT eo_fail('def:fail', 'boom');
COMMIT;
SELECT state, attempts, last_error FROM eo_status('def:fail');

-- An early write in a savepoint that rolls back: the claim is pending
-- again and is written at commit.
BEGIN;
SELECT status FROM eo_claim('def:sp-write');
SAVEPOINT a;
SELECT state FROM eo_status('def:sp-write');
ROLLBACK TO SAVEPOINT a;
SELECT def_rows('def:sp-write') AS rows_after_rollback_to;
SELECT eo_complete('def:sp-write', '"pending again"');
COMMIT;
SELECT state, result FROM eo_status('def:sp-write');

-- A batch larger than the deferred limit (16): the first 16 claims hold
-- key locks, the rest write their rows at once; every key ends done with
-- its own result.
BEGIN;
SELECT count(*) FILTER (WHERE c.status = 'claimed') AS claimed
FROM generate_series(1, 40) i, LATERAL eo_claim('def:batch:' || i) c;
SELECT def_key_locks() AS key_locks_held, def_rows('def:batch:') AS rows_written_at_once;
SELECT count(*) AS completed
FROM generate_series(1, 40) i, LATERAL eo_complete('def:batch:' || i, to_jsonb(i));
COMMIT;
SELECT count(*) FILTER (WHERE s.state = 'done' AND s.result = to_jsonb(i)) AS done_with_own_result
FROM generate_series(1, 40) i, LATERAL eo_status('def:batch:' || i) s;

-- Two-phase commit: the row is written at PREPARE TRANSACTION.
BEGIN;
SELECT status FROM eo_claim('def:2pc');
SELECT eo_complete('def:2pc', '"prepared"');
PREPARE TRANSACTION 'eo_deferred_2pc';
SELECT def_key_locks() AS key_locks_of_this_session;
SELECT count(*) AS prepared_key_locks FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.objsubid = 17743 AND l.virtualtransaction IN (
    SELECT t.virtualtransaction FROM pg_locks t JOIN pg_prepared_xacts p
        ON t.locktype = 'transactionid' AND t.transactionid = p.transaction
    WHERE p.gid = 'eo_deferred_2pc');
SELECT count(*) AS rows_written_at_prepare FROM eo_keys() WHERE key = 'def:2pc';
COMMIT PREPARED 'eo_deferred_2pc';
SELECT state, result FROM eo_status('def:2pc');

-- Claims write, so a read-only transaction may not make one.
BEGIN READ ONLY;
SELECT eo_test_try($$SELECT status FROM eo_claim('def:read-only')$$);
SELECT eo_test_try($$SELECT eo_complete('def:read-only')$$);
SELECT eo_test_try($$SELECT eo_fail('def:read-only')$$);
SELECT eo_test_try($$SELECT eo_extend('def:read-only', 1, '1 minute')$$);
COMMIT;

DROP FUNCTION def_writes();
DROP FUNCTION def_key_locks();
DROP FUNCTION def_rows(text);
