--
-- bad_input: every argument check raises its documented SQLSTATE, and no
-- bad argument reaches storage or raises an internal error (XX000).
--
-- NULL key: 22004, in every function.
SELECT eo_test_try($$SELECT status FROM eo_claim(NULL)$$);
SELECT eo_test_try($$SELECT status FROM eo_claim(NULL, 'fp', '1 hour')$$);
SELECT eo_test_try($$SELECT eo_complete(NULL)$$);
SELECT eo_test_try($$SELECT eo_complete(NULL, '{}', 1)$$);
SELECT eo_test_try($$SELECT eo_fail(NULL)$$);
SELECT eo_test_try($$SELECT eo_fail(NULL, 'e', 1, '1 hour')$$);
SELECT eo_test_try($$SELECT eo_extend(NULL, 1, '1 hour')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_status(NULL)$$);

-- Empty key: 22023, in every function.
SELECT eo_test_try($$SELECT status FROM eo_claim('')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('', NULL, '1 hour')$$);
SELECT eo_test_try($$SELECT eo_complete('')$$);
SELECT eo_test_try($$SELECT eo_fail('')$$);
SELECT eo_test_try($$SELECT eo_extend('', 1, '1 hour')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_status('')$$);

-- Key of 513 bytes: 54000, in every function; nothing is stored.
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:' || repeat('k', 509))$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:' || repeat('k', 509), NULL, '1 hour')$$);
SELECT eo_test_try($$SELECT eo_complete('bad:' || repeat('k', 509))$$);
SELECT eo_test_try($$SELECT eo_fail('bad:' || repeat('k', 509))$$);
SELECT eo_test_try($$SELECT eo_extend('bad:' || repeat('k', 509), 1, '1 hour')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_status('bad:' || repeat('k', 509))$$);
SELECT eo_test_try($$SELECT status FROM eo_claim(repeat('k', 100000))$$);
SELECT count(*) AS rows_for_long_key FROM eo_status('bad:' || repeat('k', 508));

-- Key of exactly 512 bytes: works everywhere.
BEGIN;
SELECT status FROM eo_claim('bad:' || repeat('k', 508));
SELECT eo_complete('bad:' || repeat('k', 508), '"max key"');
COMMIT;
SELECT status, result FROM eo_claim('bad:' || repeat('k', 508));
SELECT state, result, octet_length('bad:' || repeat('k', 508)) AS key_bytes
FROM eo_status('bad:' || repeat('k', 508));
SELECT eo_fail('bad:' || repeat('f', 508), 'max key');
SELECT state, attempts FROM eo_status('bad:' || repeat('f', 508));
SELECT lease_token AS long_token FROM eo_claim('bad:' || repeat('l', 508), lease => '1 hour') \gset
SELECT eo_extend('bad:' || repeat('l', 508), :long_token, '1 hour') > now() AS extended;
SELECT eo_complete('bad:' || repeat('l', 508), NULL, :long_token);
SELECT state FROM eo_status('bad:' || repeat('l', 508));

-- Fingerprint: 513 bytes is refused with 54000 (nothing stored), 512 works.
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:fp', repeat('f', 513))$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:fp', repeat('f', 513), '1 hour')$$);
SELECT count(*) AS rows_after_long_fingerprint FROM eo_status('bad:fp');
SELECT status FROM eo_claim('bad:fp', repeat('f', 512));
SELECT status FROM eo_claim('bad:fp', repeat('f', 512));

-- Result over 1 MB: 54000; the key stays claimed and can take a smaller
-- result.
BEGIN;
SELECT status FROM eo_claim('bad:big-result');
SELECT eo_test_try($$SELECT eo_complete('bad:big-result', to_jsonb(repeat('x', 1024 * 1024)))$$);
SELECT eo_test_try($$SELECT eo_complete('bad:big-result', (SELECT jsonb_agg(i) FROM generate_series(1, 200000) AS i))$$);
SELECT state, result FROM eo_status('bad:big-result');
SELECT eo_complete('bad:big-result', to_jsonb(repeat('x', 1024 * 1024 - 1000)));
COMMIT;
SELECT status, length(result #>> '{}') AS result_chars FROM eo_claim('bad:big-result');
-- the same in lease mode
SELECT lease_token AS big_token FROM eo_claim('bad:big-lease', lease => '1 hour') \gset
SELECT eo_test_try(format($$SELECT eo_complete('bad:big-lease', to_jsonb(repeat('x', 1024 * 1024)), %s)$$, :big_token));
SELECT state, result FROM eo_status('bad:big-lease');
SELECT eo_complete('bad:big-lease', '"small"', :big_token);
SELECT state, result FROM eo_status('bad:big-lease');

-- Lease: zero, negative and absurd leases are 22023, nothing is stored.
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:lease', NULL, '0')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:lease', NULL, '-1 second')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:lease', NULL, '1 day -24 hours')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:lease', NULL, '-1 month')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:lease', NULL, '1000 years')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:lease', NULL, '178000000 years')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:lease', NULL, '-178000000 years')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:lease', NULL, '1 month')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:lease', NULL, '1 day 1 microsecond')$$);
SELECT count(*) AS rows_after_bad_leases FROM eo_status('bad:lease');
-- the longest lease allowed is eo.max_lease (default 1 day)
SHOW eo.max_lease;
SELECT status, lease_expires_at - now() BETWEEN interval '23 hours 59 minutes' AND interval '1 day 1 minute' AS one_day
FROM eo_claim('bad:lease', NULL, '1 day');
SET eo.max_lease = '10min';
SELECT eo_test_try($$SELECT status FROM eo_claim('bad:lease-short', NULL, '11 minutes')$$);
SELECT status FROM eo_claim('bad:lease-short', NULL, '10 minutes');
RESET eo.max_lease;

-- eo_extend: NULL token or lease is 22004; a bad lease is 22023; the key
-- keeps its lease.
SELECT lease_token AS ext_token, lease_expires_at AS ext_expiry
FROM eo_claim('bad:extend', lease => '1 hour') \gset
SELECT eo_test_try($$SELECT eo_extend('bad:extend', NULL, '1 hour')$$);
SELECT eo_test_try(format($$SELECT eo_extend('bad:extend', %s, NULL)$$, :ext_token));
SELECT eo_test_try($$SELECT eo_extend('bad:extend', NULL, NULL)$$);
SELECT eo_test_try(format($$SELECT eo_extend('bad:extend', %s, '0')$$, :ext_token));
SELECT eo_test_try(format($$SELECT eo_extend('bad:extend', %s, '-1 hour')$$, :ext_token));
SELECT eo_test_try(format($$SELECT eo_extend('bad:extend', %s, '1000 years')$$, :ext_token));
SELECT state, lease_token = :ext_token AS same_token,
       lease_expires_at = :'ext_expiry' AS same_expiry
FROM eo_status('bad:extend');
-- eo_extend of a key that has no lease
SELECT eo_test_try(format($$SELECT eo_extend('bad:never-claimed', %s, '1 hour')$$, :ext_token));

-- eo_fail: retry_after below 0 or above 366 days is 22023, nothing stored.
SELECT eo_test_try($$SELECT eo_fail('bad:retry', 'e', NULL, '-1 second')$$);
SELECT eo_test_try($$SELECT eo_fail('bad:retry', 'e', retry_after => '-1 day')$$);
SELECT eo_test_try($$SELECT eo_fail('bad:retry', 'e', retry_after => '367 days')$$);
SELECT eo_test_try($$SELECT eo_fail('bad:retry', 'e', retry_after => '1000 years')$$);
SELECT eo_test_try($$SELECT eo_fail('bad:retry', 'e', retry_after => '-178000000 years')$$);
SELECT count(*) AS rows_after_bad_retry FROM eo_status('bad:retry');
SELECT eo_fail('bad:retry', 'e', retry_after => '366 days');
SELECT state, attempts, lease_expires_at > now() + interval '365 days' AS due_next_year
FROM eo_status('bad:retry');
-- a bad retry_after with a token leaves the lease as it was
SELECT lease_token AS fail_token FROM eo_claim('bad:retry-lease', lease => '1 hour') \gset
SELECT eo_test_try(format($$SELECT eo_fail('bad:retry-lease', 'e', %s, '-1 second')$$, :fail_token));
SELECT state, attempts, last_error FROM eo_status('bad:retry-lease');

-- Tokens that were never issued for the key are refused.  (Only the
-- SQLSTATE is shown here.)
SELECT lease_token AS tok FROM eo_claim('bad:token', lease => '1 hour') \gset
SELECT left(eo_test_try(format($$SELECT eo_complete('bad:token', '"x"', %s)$$, :tok + 1000000)), 5) AS sqlstate;
SELECT left(eo_test_try(format($$SELECT eo_extend('bad:token', %s, '1 hour')$$, :tok + 1000000)), 5) AS sqlstate;
SELECT left(eo_test_try(format($$SELECT eo_fail('bad:token', 'x', %s)$$, :tok + 1000000)), 5) AS sqlstate;
SELECT left(eo_test_try($$SELECT eo_complete('bad:token', '"x"', -1)$$), 5) AS sqlstate;
SELECT state, attempts, result, lease_token = :tok AS same_token FROM eo_status('bad:token');
-- ... a token for a key that does not exist
SELECT eo_test_try(format($$SELECT eo_complete('bad:no-such-key', '"x"', %s)$$, :tok));
SELECT eo_test_try(format($$SELECT eo_fail('bad:no-such-key', 'x', %s)$$, :tok));
SELECT count(*) AS rows_no_such_key FROM eo_status('bad:no-such-key');
-- ... a token for a transaction-mode key
SELECT status FROM eo_claim('bad:txn-key');
SELECT eo_test_try(format($$SELECT eo_complete('bad:txn-key', '"x"', %s)$$, :tok));
SELECT eo_test_try(format($$SELECT eo_extend('bad:txn-key', %s, '1 hour')$$, :tok));
SELECT state, result FROM eo_status('bad:txn-key');

-- A stale token (the lease was taken over) is 55006.
SELECT lease_token AS stale_token FROM eo_claim('bad:stale', lease => '100 ms') \gset
SELECT pg_sleep(0.3);
SELECT lease_token AS fresh_token FROM eo_claim('bad:stale', lease => '1 hour') \gset
SELECT :fresh_token > :stale_token AS taken_over;
SELECT eo_test_try(format($$SELECT eo_complete('bad:stale', '"x"', %s)$$, :stale_token));
SELECT eo_test_try(format($$SELECT eo_extend('bad:stale', %s, '1 hour')$$, :stale_token));
SELECT eo_test_try(format($$SELECT eo_fail('bad:stale', 'x', %s)$$, :stale_token));
SELECT state, attempts, result, lease_token = :fresh_token AS fresh_token_kept
FROM eo_status('bad:stale');

-- Settings: out-of-range values are refused by the server.
SELECT eo_test_try($$SELECT set_config('eo.max_attempts', '0', false)$$);
SELECT eo_test_try($$SELECT set_config('eo.max_attempts', '1001', false)$$);
SELECT eo_test_try($$SELECT set_config('eo.max_lease', '0', false)$$);
SELECT eo_test_try($$SELECT set_config('eo.max_lease', '31d', false)$$);
SELECT eo_test_try($$SELECT set_config('eo.no_such_setting', '1', false)$$);
SHOW eo.max_attempts;
SHOW eo.max_lease;

