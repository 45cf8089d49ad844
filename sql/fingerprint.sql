--
-- fingerprint: a key reused with a different request (a different
-- fingerprint) is an error, never a replay of another request's result.
--
-- Done key.
BEGIN;
SELECT * FROM eo_claim('fp:done', 'body-A');
SELECT eo_complete('fp:done', '{"answer": 42}');
COMMIT;
-- the same fingerprint replays the result
SELECT * FROM eo_claim('fp:done', 'body-A');
-- a different fingerprint is refused, and shows no result
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:done', 'body-B')$$);
-- fingerprints are compared exactly
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:done', 'BODY-A')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:done', 'body-A ')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:done', '')$$);
-- a NULL fingerprint skips the check
SELECT * FROM eo_claim('fp:done', NULL);
SELECT * FROM eo_claim('fp:done');
-- the refusals changed nothing
SELECT state, result, attempts FROM eo_status('fp:done');

-- The mismatch is an ERROR: it aborts the caller's transaction.
BEGIN;
SELECT status FROM eo_claim('fp:done', 'body-B');
SELECT 'not reached';
ROLLBACK;

-- Key claimed earlier in the same transaction.
BEGIN;
SELECT status FROM eo_claim('fp:same-xact', 'body-A');
SELECT status FROM eo_claim('fp:same-xact', 'body-A');
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:same-xact', 'body-B')$$);
SELECT status FROM eo_claim('fp:same-xact');
COMMIT;
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:same-xact', 'body-B')$$);
SELECT status FROM eo_claim('fp:same-xact', 'body-A');

-- Busy key (a live lease).
SELECT status, attempts, lease_token > 0 AS has_token
FROM eo_claim('fp:busy', 'body-A', lease => '1 hour');
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:busy', 'body-B')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:busy', 'body-B', lease => '1 hour')$$);
SELECT status, result, attempts, lease_token FROM eo_claim('fp:busy', 'body-A');
SELECT status, result, attempts, lease_token FROM eo_claim('fp:busy', NULL, lease => '1 hour');

-- Failed key, retry not yet due.
BEGIN;
SELECT status FROM eo_claim('fp:failed', 'body-A');
SELECT eo_fail('fp:failed', 'upstream timeout', retry_after => '1 hour');
COMMIT;
SELECT state, attempts, last_error FROM eo_status('fp:failed');
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:failed', 'body-B')$$);
SELECT status, attempts FROM eo_claim('fp:failed', 'body-A');
SELECT status, attempts FROM eo_claim('fp:failed');

-- Failed key, retry due: still refused with a different fingerprint,
-- claimed again with the same one.
BEGIN;
SELECT status FROM eo_claim('fp:failed-due', 'body-A');
SELECT eo_fail('fp:failed-due', 'upstream timeout');
COMMIT;
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:failed-due', 'body-B')$$);
SELECT state, attempts FROM eo_status('fp:failed-due');
BEGIN;
SELECT status, attempts FROM eo_claim('fp:failed-due', 'body-A');
SELECT eo_complete('fp:failed-due', '"second try"');
COMMIT;
SELECT status, result, attempts FROM eo_claim('fp:failed-due', 'body-A');
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:failed-due', 'body-B')$$);

-- Dead key: a different fingerprint is refused as well.
SET eo.max_attempts = 1;
BEGIN;
SELECT status FROM eo_claim('fp:dead', 'body-A');
SELECT eo_fail('fp:dead', 'bad payload');
COMMIT;
RESET eo.max_attempts;
SELECT status, attempts FROM eo_claim('fp:dead', 'body-A');
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:dead', 'body-B')$$);

-- First claim without a fingerprint: none is stored, so later claims
-- with any fingerprint are duplicates (the check needs both sides).
BEGIN;
SELECT status FROM eo_claim('fp:none-first');
SELECT eo_complete('fp:none-first', '{"v": 1}');
COMMIT;
SELECT status, result FROM eo_claim('fp:none-first', 'body-A');
SELECT status, result FROM eo_claim('fp:none-first', 'body-B');

-- A key that failed without a fingerprint takes the fingerprint of the
-- attempt that claims it again.
SELECT eo_fail('fp:none-then-retry', 'first delivery rolled back');
SELECT status, attempts FROM eo_claim('fp:none-then-retry', 'body-A');
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:none-then-retry', 'body-B')$$);
SELECT status FROM eo_claim('fp:none-then-retry', 'body-A');

-- An empty fingerprint is a fingerprint like any other.
SELECT status FROM eo_claim('fp:empty', '');
SELECT status FROM eo_claim('fp:empty', '');
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:empty', 'x')$$);

-- The longest allowed fingerprint (512 bytes) is stored and compared.
SELECT status FROM eo_claim('fp:long', repeat('f', 512));
SELECT status FROM eo_claim('fp:long', repeat('f', 512));
SELECT eo_test_try($$SELECT status FROM eo_claim('fp:long', repeat('f', 511) || 'g')$$);

