--
-- fail_retry: eo_fail records failed attempts; retry_after delays the
-- next claim; eo.max_attempts makes a key dead.
--
-- Transaction mode: the work fails, the transaction rolls back, and the
-- consumer records the failure in a new transaction.
BEGIN;
SELECT status, attempts FROM eo_claim('fr:rollback');
ROLLBACK;
SELECT eo_fail('fr:rollback', 'connection reset');
SELECT state, result, attempts, lease_token,
       lease_expires_at <= clock_timestamp() AS retry_due,
       last_error
FROM eo_status('fr:rollback');
-- no retry_after: the next delivery may retry at once, as attempt 2
BEGIN;
SELECT * FROM eo_claim('fr:rollback');
SELECT state, attempts FROM eo_status('fr:rollback');
ROLLBACK;
-- the rolled-back retry left the key failed; its failure counts too
SELECT state, attempts FROM eo_status('fr:rollback');
SELECT eo_fail('fr:rollback', 'connection reset again');
SELECT state, attempts, last_error FROM eo_status('fr:rollback');
-- the third delivery succeeds
BEGIN;
SELECT * FROM eo_claim('fr:rollback');
SELECT eo_complete('fr:rollback', '{"ok": true}');
COMMIT;
SELECT * FROM eo_claim('fr:rollback');
SELECT state, result, attempts, lease_expires_at FROM eo_status('fr:rollback');

-- retry_after: claims are 'busy' until the retry is due, in either mode,
-- and show when it will be.
BEGIN;
SELECT status FROM eo_claim('fr:later');
ROLLBACK;
SELECT eo_fail('fr:later', 'rate limited', retry_after => '1 hour');
SELECT state, attempts,
       lease_expires_at - now() BETWEEN interval '59 minutes' AND interval '61 minutes' AS due_in_one_hour,
       last_error
FROM eo_status('fr:later');
SELECT status, result, attempts, lease_token,
       lease_expires_at = (SELECT lease_expires_at FROM eo_status('fr:later')) AS shows_due_time
FROM eo_claim('fr:later');
SELECT status, result, attempts, lease_token,
       lease_expires_at = (SELECT lease_expires_at FROM eo_status('fr:later')) AS shows_due_time
FROM eo_claim('fr:later', lease => '1 minute');
-- busy claims take no attempt
SELECT state, attempts FROM eo_status('fr:later');

-- ... and once it is due, the key is claimed again (attempt 2).
BEGIN;
SELECT status FROM eo_claim('fr:soon');
ROLLBACK;
SELECT eo_fail('fr:soon', 'rate limited', retry_after => '200 ms');
SELECT pg_sleep(0.4);
BEGIN;
SELECT * FROM eo_claim('fr:soon');
SELECT eo_complete('fr:soon', '"second time lucky"');
COMMIT;
SELECT state, result, attempts FROM eo_status('fr:soon');

-- retry_after of zero: due at once.
SELECT eo_fail('fr:zero', 'x', retry_after => '0');
SELECT status, attempts FROM eo_claim('fr:zero');

-- eo_fail inside the claiming transaction records the failure without
-- counting a second attempt; committing keeps it.
BEGIN;
SELECT status, attempts FROM eo_claim('fr:in-xact');
SELECT eo_fail('fr:in-xact', 'payload rejected', retry_after => '1 hour');
SELECT state, attempts, last_error FROM eo_status('fr:in-xact');
-- the key is not this transaction's any more: no complete, no duplicate
SELECT eo_test_try($$SELECT eo_complete('fr:in-xact')$$);
SELECT status, attempts FROM eo_claim('fr:in-xact');
COMMIT;
SELECT state, attempts, last_error FROM eo_status('fr:in-xact');
SELECT status, attempts FROM eo_claim('fr:in-xact');

-- ... and rolled back together with the claim, it leaves no trace.
BEGIN;
SELECT status FROM eo_claim('fr:in-xact-rb');
SELECT eo_fail('fr:in-xact-rb', 'gone with the rollback');
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM eo_status('fr:in-xact-rb');

-- eo_fail in the transaction of a retry: the retry's claim counted.
SELECT eo_fail('fr:retry-in-xact', 'first');
BEGIN;
SELECT status, attempts FROM eo_claim('fr:retry-in-xact');
SELECT eo_fail('fr:retry-in-xact', 'second');
COMMIT;
SELECT state, attempts, last_error FROM eo_status('fr:retry-in-xact');

-- Dead after eo.max_attempts recorded attempts (default 5).
SHOW eo.max_attempts;
SELECT eo_fail('fr:default', 'attempt 1');
SELECT eo_fail('fr:default', 'attempt 2');
SELECT eo_fail('fr:default', 'attempt 3');
SELECT eo_fail('fr:default', 'attempt 4');
SELECT state, attempts FROM eo_status('fr:default');
SELECT eo_fail('fr:default', 'attempt 5');
SELECT state, result, attempts, lease_expires_at, last_error FROM eo_status('fr:default');
SELECT * FROM eo_claim('fr:default');
SELECT * FROM eo_claim('fr:default', lease => '1 hour');

-- With eo.max_attempts = 3, through claim/rollback/fail cycles.
SET eo.max_attempts = 3;
BEGIN;
SELECT status, attempts FROM eo_claim('fr:dead');
ROLLBACK;
SELECT eo_fail('fr:dead', 'try 1');
BEGIN;
SELECT status, attempts FROM eo_claim('fr:dead');
ROLLBACK;
SELECT eo_fail('fr:dead', 'try 2');
BEGIN;
SELECT status, attempts FROM eo_claim('fr:dead');
ROLLBACK;
SELECT eo_fail('fr:dead', 'try 3');
SELECT state, attempts, lease_expires_at, last_error FROM eo_status('fr:dead');
SELECT * FROM eo_claim('fr:dead');
-- failing a dead key again changes nothing and says so
SELECT eo_fail('fr:dead', 'try 4');
SELECT state, attempts, last_error FROM eo_status('fr:dead');
-- a dead key cannot be completed
SELECT eo_test_try($$SELECT eo_complete('fr:dead', '"too late"')$$);
-- the attempt that fails in its own transaction can be the last one
BEGIN;
SELECT status FROM eo_claim('fr:dead-in-xact');
ROLLBACK;
SELECT eo_fail('fr:dead-in-xact', 'try 1');
SELECT eo_fail('fr:dead-in-xact', 'try 2');
BEGIN;
SELECT status, attempts FROM eo_claim('fr:dead-in-xact');
SELECT eo_fail('fr:dead-in-xact', 'try 3');
COMMIT;
SELECT state, attempts, last_error FROM eo_status('fr:dead-in-xact');
SELECT status, attempts FROM eo_claim('fr:dead-in-xact');
RESET eo.max_attempts;

-- Lease mode: eo_fail needs the current token.
SELECT lease_token AS l1_token FROM eo_claim('fr:lease', lease => '1 hour') \gset
SELECT eo_test_try($$SELECT eo_fail('fr:lease', 'no token')$$);
SELECT eo_test_try(format($$SELECT eo_fail('fr:lease', 'wrong token', lease_token => %s)$$, :l1_token - 1));
SELECT state, attempts, last_error FROM eo_status('fr:lease');
SELECT eo_fail('fr:lease', 'card declined', lease_token => :l1_token, retry_after => '1 hour');
SELECT state, attempts, last_error,
       lease_expires_at - now() BETWEEN interval '59 minutes' AND interval '61 minutes' AS due_in_one_hour
FROM eo_status('fr:lease');
SELECT status, attempts, lease_token FROM eo_claim('fr:lease', lease => '1 hour');
-- the failed attempt's token no longer holds the key
SELECT eo_test_try(format($$SELECT eo_complete('fr:lease', '"x"', lease_token => %s)$$, :l1_token));
SELECT eo_test_try(format($$SELECT eo_extend('fr:lease', %s, '1 hour')$$, :l1_token));
SELECT eo_test_try(format($$SELECT eo_fail('fr:lease', 'again', lease_token => %s)$$, :l1_token));
SELECT state, attempts, last_error FROM eo_status('fr:lease');

-- Lease mode retry when due: attempt 2 with a new, larger token.
SELECT lease_token AS r1_token FROM eo_claim('fr:lease-retry', lease => '1 hour') \gset
SELECT eo_fail('fr:lease-retry', 'timeout', lease_token => :r1_token);
SELECT * FROM eo_claim('fr:lease-retry', lease => '1 hour') \gset r2_
SELECT :'r2_status' AS status, :r2_attempts AS attempts,
       :r2_lease_token > :r1_token AS larger_token;
SELECT eo_test_try(format($$SELECT eo_complete('fr:lease-retry', '"old"', lease_token => %s)$$, :r1_token));
SELECT eo_complete('fr:lease-retry', '"charged"', lease_token => :r2_lease_token);
SELECT status, result, attempts FROM eo_claim('fr:lease-retry');

-- Lease mode: the last attempt's failure makes the key dead.
SET eo.max_attempts = 1;
SELECT lease_token AS x1_token FROM eo_claim('fr:lease-dead', lease => '1 hour') \gset
SELECT eo_fail('fr:lease-dead', 'fatal', lease_token => :x1_token);
SELECT state, attempts, last_error FROM eo_status('fr:lease-dead');
SELECT status, attempts FROM eo_claim('fr:lease-dead', lease => '1 hour');
RESET eo.max_attempts;

-- eo_fail of a done key is refused and changes nothing.
BEGIN;
SELECT status FROM eo_claim('fr:done');
SELECT eo_complete('fr:done', '{"v": 1}');
COMMIT;
SELECT eo_test_try($$SELECT eo_fail('fr:done', 'too late')$$);
SELECT eo_test_try($$SELECT eo_fail('fr:done', 'too late', retry_after => '1 hour')$$);
-- also one done without eo_complete
SELECT status FROM eo_claim('fr:done-plain');
SELECT eo_test_try($$SELECT eo_fail('fr:done-plain', 'too late')$$);
-- also inside the transaction that completed it
BEGIN;
SELECT status FROM eo_claim('fr:done-in-xact');
SELECT eo_complete('fr:done-in-xact', '"done"');
SELECT eo_test_try($$SELECT eo_fail('fr:done-in-xact', 'too late')$$);
COMMIT;
-- and a lease key completed with its token
SELECT lease_token AS d_token FROM eo_claim('fr:done-lease', lease => '1 hour') \gset
SELECT eo_complete('fr:done-lease', '"done"', lease_token => :d_token);
SELECT eo_test_try(format($$SELECT eo_fail('fr:done-lease', 'too late', lease_token => %s)$$, :d_token));
SELECT k, s.state, s.result, s.attempts, s.last_error
FROM unnest(ARRAY['fr:done', 'fr:done-plain', 'fr:done-in-xact', 'fr:done-lease']) AS k,
     LATERAL eo_status(k) AS s
ORDER BY k;

-- A long error text is cut to 4096 bytes, not refused.
SELECT eo_fail('fr:long-error', repeat('e', 5000));
SELECT state, octet_length(last_error) AS error_bytes,
       last_error = repeat('e', 4096) AS is_prefix
FROM eo_status('fr:long-error');

