--
-- claim: transaction-mode claims.  The claim belongs to the caller's
-- transaction: commit makes the key done, rollback leaves no trace.
--
-- Expected errors go through eo_test_try() (sql/test_setup.sql).
--
-- Claim, do the work, complete with a result, commit.
BEGIN;
SELECT * FROM eo_claim('claim:commit');
SELECT eo_complete('claim:commit', '{"charge": "ch_1"}');
-- still this transaction's own key: claiming again is a duplicate, and
-- it already replays the result given to eo_complete
SELECT * FROM eo_claim('claim:commit');
COMMIT;

-- The next delivery is a duplicate and gets the stored result back.
SELECT * FROM eo_claim('claim:commit');
SELECT * FROM eo_claim('claim:commit');

-- Completing a duplicate is refused: the work was done before.
BEGIN;
SELECT status FROM eo_claim('claim:commit');
SELECT eo_test_try($$SELECT eo_complete('claim:commit', '{"charge": "ch_2"}')$$);
COMMIT;
-- the stored result is unchanged
SELECT status, result FROM eo_claim('claim:commit');

-- A claim that commits without eo_complete makes the key done, no result.
BEGIN;
SELECT * FROM eo_claim('claim:no-complete');
COMMIT;
SELECT * FROM eo_claim('claim:no-complete');
SELECT eo_test_try($$SELECT eo_complete('claim:no-complete')$$);

-- An autocommit claim is a transaction of its own: done at once.
SELECT * FROM eo_claim('claim:autocommit');
SELECT * FROM eo_claim('claim:autocommit');

-- Rollback leaves no trace: the next delivery claims the key again.
BEGIN;
SELECT * FROM eo_claim('claim:rollback');
SELECT eo_complete('claim:rollback', '{"n": 1}');
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM eo_status('claim:rollback');
BEGIN;
SELECT * FROM eo_claim('claim:rollback');
SELECT eo_complete('claim:rollback', '{"n": 2}');
COMMIT;
SELECT * FROM eo_claim('claim:rollback');

-- An error aborts the transaction, and with it the claim.
BEGIN;
SELECT status FROM eo_claim('claim:error');
SELECT 1 / 0;
ROLLBACK;
SELECT status, attempts FROM eo_claim('claim:error');

-- ROLLBACK TO SAVEPOINT undoes a claim made after the savepoint ...
BEGIN;
SELECT status FROM eo_claim('claim:sp-outer');
SAVEPOINT sp;
SELECT status FROM eo_claim('claim:sp-inner');
SELECT eo_complete('claim:sp-inner', '{"inner": true}');
ROLLBACK TO SAVEPOINT sp;
SELECT count(*) AS inner_rows FROM eo_status('claim:sp-inner');
-- ... so it can no longer be completed (55000)
SAVEPOINT try;
SELECT eo_complete('claim:sp-inner', '{"after": "rollback"}');
ROLLBACK TO SAVEPOINT try;
-- ... so the key can be claimed again in the same transaction
SELECT status, result FROM eo_claim('claim:sp-inner');
-- ... but keeps a claim made before it
SELECT status FROM eo_claim('claim:sp-outer');
COMMIT;
SELECT status, result FROM eo_claim('claim:sp-inner');
SELECT status, result FROM eo_claim('claim:sp-outer');

-- A claim made inside a savepoint that is released belongs to the
-- transaction: eo_complete after RELEASE works.
BEGIN;
SAVEPOINT sp;
SELECT status FROM eo_claim('claim:sp-release');
RELEASE SAVEPOINT sp;
SELECT eo_complete('claim:sp-release', '"released"');
COMMIT;
SELECT status, result FROM eo_claim('claim:sp-release');

-- The same key twice in one transaction: the second claim is a duplicate
-- (a redelivery inside one batch must not run the work twice).
BEGIN;
SELECT * FROM eo_claim('claim:twice');
SELECT * FROM eo_claim('claim:twice');
COMMIT;
SELECT status, result FROM eo_claim('claim:twice');

-- eo_complete twice in the claiming transaction: the second is refused.
BEGIN;
SELECT status FROM eo_claim('claim:complete-twice');
SELECT eo_complete('claim:complete-twice', '{"first": true}');
SELECT eo_test_try($$SELECT eo_complete('claim:complete-twice', '{"second": true}')$$);
COMMIT;
SELECT status, result FROM eo_claim('claim:complete-twice');
-- and in a later transaction
SELECT eo_test_try($$SELECT eo_complete('claim:complete-twice', '{"third": true}')$$);

-- eo_complete of a key that was never claimed.
SELECT eo_test_try($$SELECT eo_complete('claim:never-claimed')$$);
SELECT count(*) AS rows_never_claimed FROM eo_status('claim:never-claimed');
-- ... or whose claim rolled back
BEGIN;
SELECT status FROM eo_claim('claim:gone');
ROLLBACK;
SELECT eo_test_try($$SELECT eo_complete('claim:gone')$$);
-- ... or that another transaction claimed and committed
SELECT eo_test_try($$SELECT eo_complete('claim:autocommit')$$);

-- eo_complete with a NULL result stores no result.
BEGIN;
SELECT status FROM eo_claim('claim:null-result');
SELECT eo_complete('claim:null-result', NULL);
COMMIT;
SELECT * FROM eo_claim('claim:null-result');

-- Results of every JSON kind are replayed as given.
BEGIN;
SELECT status FROM eo_claim('claim:json-1');
SELECT eo_complete('claim:json-1', '[1, "two", null, {"three": 3.0}]');
SELECT status FROM eo_claim('claim:json-2');
SELECT eo_complete('claim:json-2', '"just a string"');
SELECT status FROM eo_claim('claim:json-3');
SELECT eo_complete('claim:json-3', 'null');
COMMIT;
SELECT k, c.status, c.result, jsonb_typeof(c.result) AS kind
FROM unnest(ARRAY['claim:json-1', 'claim:json-2', 'claim:json-3']) AS k,
     LATERAL eo_claim(k) AS c
ORDER BY k;

-- Many keys in one transaction (a batch consumer): 100,000 keys must
-- work with default server settings.
BEGIN;
SELECT c.status, count(*)
FROM generate_series(1, 100000) AS i,
     LATERAL eo_claim('claim:batch:' || i) AS c
GROUP BY c.status;
SELECT count(*) AS completed
FROM generate_series(1, 100000, 2) AS i,
     LATERAL eo_complete('claim:batch:' || i, jsonb_build_object('i', i)) AS c;
-- a redelivery within the same batch is a duplicate
SELECT c.status, count(*) AS keys, count(c.result) AS with_result
FROM generate_series(1, 1000) AS i,
     LATERAL eo_claim('claim:batch:' || i) AS c
GROUP BY c.status;
COMMIT;
-- after commit: every key is done; odd keys replay their result
SELECT c.status,
       count(*) AS keys,
       count(c.result) AS with_result,
       count(*) FILTER (WHERE c.result = jsonb_build_object('i', i)) AS right_result
FROM generate_series(1, 100000, 7) AS i,
     LATERAL eo_claim('claim:batch:' || i) AS c
GROUP BY c.status;
SELECT s.state, count(*) AS keys, sum(s.attempts) AS attempts
FROM generate_series(99001, 100000) AS i,
     LATERAL eo_status('claim:batch:' || i) AS s
GROUP BY s.state;

-- A rolled-back batch leaves nothing behind.
BEGIN;
SELECT c.status, count(*)
FROM generate_series(1, 1000) AS i,
     LATERAL eo_claim('claim:batch-rb:' || i) AS c
GROUP BY c.status;
ROLLBACK;
SELECT count(*) AS rows_left
FROM generate_series(1, 1000) AS i,
     LATERAL eo_status('claim:batch-rb:' || i) AS s;

-- Claims that were duplicates do not count attempts.
SELECT state, result, attempts, lease_token, lease_expires_at IS NULL AS no_expiry,
       last_error, created_at <= updated_at AS times_ordered
FROM eo_status('claim:commit');

-- Keys are compared exactly: case and trailing spaces matter.
SELECT format('%L', k) AS key, c.status
FROM unnest(ARRAY['claim:Case', 'claim:case', 'claim:case ', 'claim:case']) WITH ORDINALITY AS u(k, n),
     LATERAL eo_claim(k) AS c
ORDER BY n;

