--
-- lease: lease-mode claims with fencing tokens.
--
-- Tokens and timestamps are kept in psql variables (\gset, prefix per
-- step) and only compared, never printed.
--
-- A lease claim returns a token and an expiry, and is durable at once.
SELECT * FROM eo_claim('lease:a', lease => '1 hour') \gset a1_
SELECT :'a1_status' AS status,
       :a1_attempts AS attempts,
       :a1_lease_token > 0 AS has_token,
       :'a1_lease_expires_at'::timestamptz > now() AS expires_later,
       :'a1_lease_expires_at'::timestamptz - now()
           BETWEEN interval '59 minutes' AND interval '61 minutes' AS about_one_hour;
SELECT state, result, attempts,
       lease_token = :a1_lease_token AS same_token,
       lease_expires_at = :'a1_lease_expires_at' AS same_expiry,
       last_error
FROM eo_status('lease:a');

-- Others get 'busy' with the expiry but without the token, in either mode.
SELECT status, result, attempts, lease_token,
       lease_expires_at = :'a1_lease_expires_at' AS expiry_shown
FROM eo_claim('lease:a', lease => '1 hour');
SELECT status, result, attempts, lease_token,
       lease_expires_at = :'a1_lease_expires_at' AS expiry_shown
FROM eo_claim('lease:a');
BEGIN;
SELECT status, lease_token FROM eo_claim('lease:a');
COMMIT;
-- 'busy' claims take no attempt and change nothing
SELECT state, attempts, lease_token = :a1_lease_token AS same_token,
       lease_expires_at = :'a1_lease_expires_at' AS same_expiry
FROM eo_status('lease:a');

-- eo_extend renews the lease from now and returns the new expiry.
SELECT eo_extend('lease:a', :a1_lease_token, '2 hours') AS a2_expiry \gset
SELECT :'a2_expiry'::timestamptz > :'a1_lease_expires_at'::timestamptz AS moved_later,
       :'a2_expiry'::timestamptz - now()
           BETWEEN interval '119 minutes' AND interval '121 minutes' AS about_two_hours;
SELECT state, attempts, lease_token = :a1_lease_token AS same_token,
       lease_expires_at = :'a2_expiry' AS new_expiry
FROM eo_status('lease:a');
SELECT status, lease_token, lease_expires_at = :'a2_expiry' AS new_expiry_shown
FROM eo_claim('lease:a', lease => '1 hour');
-- it can also shorten the lease
SELECT eo_extend('lease:a', :a1_lease_token, '10 minutes') AS a3_expiry \gset
SELECT :'a3_expiry'::timestamptz < :'a2_expiry'::timestamptz AS moved_earlier,
       :'a3_expiry'::timestamptz > now() AS still_live;

-- Completing a lease key needs its token.
SELECT eo_test_try($$SELECT eo_complete('lease:a', '{"sent": false}')$$);
BEGIN;
SELECT eo_test_try($$SELECT eo_complete('lease:a', '{"sent": false}')$$);
COMMIT;
SELECT state, result FROM eo_status('lease:a');
-- the holder completes with its token
SELECT eo_complete('lease:a', '{"sent": true}', lease_token => :a1_lease_token);
SELECT state, result, attempts, lease_expires_at FROM eo_status('lease:a');
SELECT * FROM eo_claim('lease:a');
SELECT * FROM eo_claim('lease:a', lease => '1 hour');
-- a done key cannot be completed, extended or failed again with the token
SELECT eo_test_try(format($$SELECT eo_complete('lease:a', '{"sent": 2}', lease_token => %s)$$, :a1_lease_token));
SELECT eo_test_try(format($$SELECT eo_extend('lease:a', %s, '1 hour')$$, :a1_lease_token));
SELECT eo_test_try(format($$SELECT eo_fail('lease:a', 'late', lease_token => %s)$$, :a1_lease_token));
SELECT state, result FROM eo_status('lease:a');

-- An expired lease that nobody took over is still the holder's: it can
-- complete (late) ...
SELECT lease_token AS late_token FROM eo_claim('lease:late', lease => '100 ms') \gset
SELECT pg_sleep(0.3);
SELECT state, lease_expires_at < clock_timestamp() AS expired
FROM eo_status('lease:late');
SELECT eo_complete('lease:late', '"late but first"', lease_token => :late_token);
SELECT status, result, attempts FROM eo_claim('lease:late', lease => '1 hour');

-- ... or renew it, which makes it live again.
SELECT lease_token AS revive_token FROM eo_claim('lease:revive', lease => '100 ms') \gset
SELECT pg_sleep(0.3);
SELECT eo_extend('lease:revive', :revive_token, '1 hour') > now() AS renewed;
SELECT status, attempts, lease_token FROM eo_claim('lease:revive', lease => '1 hour');
SELECT eo_complete('lease:revive', NULL, :revive_token);

-- Takeover: after the lease expired the next claim takes the key over,
-- with one more attempt and a larger token.
SELECT * FROM eo_claim('lease:takeover', lease => '200 ms') \gset t1_
SELECT :'t1_status' AS status, :t1_attempts AS attempts;
SELECT pg_sleep(0.4);
SELECT * FROM eo_claim('lease:takeover', lease => '1 hour') \gset t2_
SELECT :'t2_status' AS status,
       :t2_attempts AS attempts,
       :t2_lease_token > :t1_lease_token AS larger_token,
       :'t2_lease_expires_at'::timestamptz > now() AS expires_later;
SELECT state, attempts, lease_token = :t2_lease_token AS new_holders_token
FROM eo_status('lease:takeover');
-- others are busy again
SELECT status, attempts, lease_token FROM eo_claim('lease:takeover', lease => '1 hour');
-- the old holder is fenced off: complete, extend and fail are refused
SELECT eo_test_try(format($$SELECT eo_complete('lease:takeover', '"old"', lease_token => %s)$$, :t1_lease_token));
SELECT eo_test_try(format($$SELECT eo_extend('lease:takeover', %s, '1 hour')$$, :t1_lease_token));
SELECT eo_test_try(format($$SELECT eo_fail('lease:takeover', 'old holder', lease_token => %s)$$, :t1_lease_token));
-- and the refusals changed nothing
SELECT state, attempts, result, last_error,
       lease_token = :t2_lease_token AS new_holders_token,
       lease_expires_at = :'t2_lease_expires_at' AS same_expiry
FROM eo_status('lease:takeover');
-- the new holder renews and completes
SELECT eo_extend('lease:takeover', :t2_lease_token, '30 minutes') > now() AS renewed;
SELECT eo_complete('lease:takeover', '"new"', lease_token => :t2_lease_token);
SELECT status, result, attempts FROM eo_claim('lease:takeover');
-- the old token is still refused after the key is done
SELECT eo_test_try(format($$SELECT eo_complete('lease:takeover', '"old"', lease_token => %s)$$, :t1_lease_token));
SELECT state, result FROM eo_status('lease:takeover');

-- Complete or fail without the token of a lease key is refused.
SELECT lease_token AS b_token FROM eo_claim('lease:b', lease => '1 hour') \gset
SELECT eo_test_try($$SELECT eo_complete('lease:b')$$);
SELECT eo_test_try($$SELECT eo_fail('lease:b', 'no token')$$);
SELECT state, attempts FROM eo_status('lease:b');
SELECT eo_complete('lease:b', lease_token => :b_token);
SELECT state, result FROM eo_status('lease:b');

-- Tokens are strictly increasing, also across keys.
SELECT lease_token AS c1_token FROM eo_claim('lease:c1', lease => '1 hour') \gset
SELECT lease_token AS c2_token FROM eo_claim('lease:c2', lease => '1 hour') \gset
SELECT :c2_token > :c1_token AS increasing;

-- Dead after eo.max_attempts attempts: here a first claim and one
-- takeover, then the next expired lease is not taken over.
SET eo.max_attempts = 2;
SELECT * FROM eo_claim('lease:dead', lease => '100 ms') \gset d1_
SELECT :'d1_status' AS status, :d1_attempts AS attempts;
SELECT pg_sleep(0.3);
SELECT * FROM eo_claim('lease:dead', lease => '100 ms') \gset d2_
SELECT :'d2_status' AS status, :d2_attempts AS attempts,
       :d2_lease_token > :d1_lease_token AS larger_token;
SELECT pg_sleep(0.3);
SELECT * FROM eo_claim('lease:dead', lease => '1 hour');
SELECT * FROM eo_claim('lease:dead');
SELECT state, result, attempts, lease_expires_at, last_error
FROM eo_status('lease:dead');
-- neither holder can act on a dead key
SELECT eo_test_try(format($$SELECT eo_complete('lease:dead', '"x"', lease_token => %s)$$, :d2_lease_token));
SELECT eo_test_try(format($$SELECT eo_extend('lease:dead', %s, '1 hour')$$, :d2_lease_token));
SELECT eo_test_try(format($$SELECT eo_complete('lease:dead', '"x"', lease_token => %s)$$, :d1_lease_token));
SELECT state, attempts FROM eo_status('lease:dead');
RESET eo.max_attempts;

-- A key whose attempts were used up under a lower eo.max_attempts stays
-- dead when it is raised again.
SELECT status, attempts FROM eo_claim('lease:dead', lease => '1 hour');

-- A lease claim inside a larger transaction belongs to that transaction:
-- rolled back, it leaves no trace.
BEGIN;
SELECT status, attempts, lease_token > 0 AS has_token
FROM eo_claim('lease:in-xact', lease => '1 hour');
SELECT state FROM eo_status('lease:in-xact');
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM eo_status('lease:in-xact');
SELECT status, attempts FROM eo_claim('lease:in-xact', lease => '1 hour');

-- An expired lease taken over by a transaction-mode claim: the old holder's
-- token is stale (55006), whether the new claim completed or failed.
SELECT lease_token AS tm_old FROM eo_claim('lease:to-txn', lease => '100 ms') \gset
SELECT pg_sleep(0.3);
SELECT status, attempts, lease_token IS NULL AS no_token FROM eo_claim('lease:to-txn');
SELECT eo_test_try(format($$SELECT eo_complete('lease:to-txn', '"old"', lease_token => %s)$$, :tm_old));
SELECT lease_token AS tf_old FROM eo_claim('lease:to-txn-fail', lease => '100 ms') \gset
SELECT pg_sleep(0.3);
BEGIN;
SELECT status FROM eo_claim('lease:to-txn-fail');
SELECT eo_fail('lease:to-txn-fail', 'boom', retry_after => '1 hour');
COMMIT;
SELECT eo_test_try(format($$SELECT eo_complete('lease:to-txn-fail', '"old"', lease_token => %s)$$, :tf_old));
-- ... or completed it: stale too, not "already done"
SELECT lease_token AS td_old FROM eo_claim('lease:to-txn-done', lease => '100 ms') \gset
SELECT pg_sleep(0.3);
BEGIN;
SELECT status FROM eo_claim('lease:to-txn-done');
SELECT eo_complete('lease:to-txn-done', '"new"');
COMMIT;
SELECT eo_test_try(format($$SELECT eo_complete('lease:to-txn-done', '"old"', lease_token => %s)$$, :td_old));
SELECT eo_test_try(format($$SELECT eo_extend('lease:to-txn-done', %s, '1 hour')$$, :td_old));
SELECT eo_test_try(format($$SELECT eo_fail('lease:to-txn-done', 'old holder', lease_token => %s)$$, :td_old));
SELECT state, result FROM eo_status('lease:to-txn-done');
-- A token never issued for the key does not hold it (55000).
SELECT lease_token AS big FROM eo_claim('lease:never-issued', lease => '1 hour') \gset
SELECT eo_test_try(format($$SELECT eo_complete('lease:never-issued', NULL, lease_token => %s)$$, :big + 1000000));

