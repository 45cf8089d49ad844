--
-- status: eo_status reads a key's state without claiming it.
--

-- An unknown key: no row, and looking does not claim it.
SELECT * FROM eo_status('st:unknown');
SELECT count(*) AS rows_unknown FROM eo_status('st:unknown');
SELECT status FROM eo_claim('st:unknown');
SELECT state FROM eo_status('st:unknown');

-- Transaction mode, seen from inside the claiming transaction:
-- processing until eo_complete, then done.
BEGIN;
SELECT status FROM eo_claim('st:txn');
SELECT state, result, attempts, lease_token, lease_expires_at, last_error,
       created_at <= clock_timestamp() AS created_in_past,
       updated_at = created_at AS not_updated
FROM eo_status('st:txn');
SELECT eo_complete('st:txn', '{"id": 7}');
SELECT state, result, attempts, lease_token, lease_expires_at, last_error,
       updated_at >= created_at AS updated_after_created
FROM eo_status('st:txn');
COMMIT;
SELECT state, result, attempts, lease_token, lease_expires_at, last_error
FROM eo_status('st:txn');

-- Committed without eo_complete: done, no result.
BEGIN;
SELECT status FROM eo_claim('st:txn-plain');
SELECT state FROM eo_status('st:txn-plain');
COMMIT;
SELECT state, result, attempts, lease_token, lease_expires_at, last_error
FROM eo_status('st:txn-plain');

-- Rolled back: no row, also when looked at after a savepoint rollback.
BEGIN;
SELECT status FROM eo_claim('st:txn-rb');
SELECT state FROM eo_status('st:txn-rb');
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM eo_status('st:txn-rb');
BEGIN;
SAVEPOINT sp;
SELECT status FROM eo_claim('st:txn-sp');
SELECT state FROM eo_status('st:txn-sp');
ROLLBACK TO SAVEPOINT sp;
SELECT count(*) AS rows_after_savepoint_rollback FROM eo_status('st:txn-sp');
COMMIT;

-- Lease mode: processing with the holder's token and expiry.
SELECT lease_token AS l_token, lease_expires_at AS l_expiry
FROM eo_claim('st:lease', lease => '1 hour') \gset
SELECT state, result, attempts,
       lease_token = :l_token AS holders_token,
       lease_expires_at = :'l_expiry' AS holders_expiry,
       last_error
FROM eo_status('st:lease');
-- done through the lease: the result, no expiry
SELECT eo_complete('st:lease', '[1, 2, 3]', lease_token => :l_token);
SELECT state, result, attempts, lease_expires_at, last_error,
       updated_at >= created_at AS updated_after_created
FROM eo_status('st:lease');

-- An expired lease nobody took over is still processing, expiry in the
-- past; the takeover keeps created_at and counts the attempt.
SELECT lease_token AS e_token FROM eo_claim('st:expired', lease => '100 ms') \gset
SELECT created_at AS e_created FROM eo_status('st:expired') \gset
SELECT pg_sleep(0.3);
SELECT state, attempts, lease_token = :e_token AS same_token,
       lease_expires_at < clock_timestamp() AS expired
FROM eo_status('st:expired');
SELECT status, attempts FROM eo_claim('st:expired', lease => '1 hour');
SELECT state, attempts, lease_token > :e_token AS new_token,
       lease_expires_at > now() AS live,
       created_at = :'e_created' AS same_created_at,
       updated_at > created_at AS updated_after_created
FROM eo_status('st:expired');

-- Failed: last_error, and lease_expires_at says when a retry is due.
BEGIN;
SELECT status FROM eo_claim('st:failed');
ROLLBACK;
SELECT eo_fail('st:failed', 'HTTP 503 from upstream', retry_after => '1 hour');
SELECT state, result, attempts, lease_token,
       lease_expires_at > now() AS retry_later,
       last_error
FROM eo_status('st:failed');
-- a later failure replaces last_error
SELECT eo_fail('st:failed', 'HTTP 504 from upstream', retry_after => '1 hour');
SELECT state, attempts, last_error FROM eo_status('st:failed');
-- failed, then done: the last error is kept as history, the result shown
SELECT eo_fail('st:failed-then-done', 'first try failed');
BEGIN;
SELECT status, attempts FROM eo_claim('st:failed-then-done');
SELECT state FROM eo_status('st:failed-then-done');
SELECT eo_complete('st:failed-then-done', '"ok"');
COMMIT;
SELECT state, result, attempts, lease_expires_at, last_error FROM eo_status('st:failed-then-done');

-- Dead.
SET eo.max_attempts = 2;
SELECT eo_fail('st:dead', 'bad message 1');
SELECT eo_fail('st:dead', 'bad message 2');
RESET eo.max_attempts;
SELECT state, result, attempts, lease_token, lease_expires_at, last_error
FROM eo_status('st:dead');

-- eo_status returns one row per key, also when called for many keys.
SELECT k, s.state, s.attempts
FROM unnest(ARRAY['st:txn', 'st:txn-plain', 'st:lease', 'st:failed', 'st:dead', 'st:nope']) AS k
     LEFT JOIN LATERAL eo_status(k) AS s ON true
ORDER BY k;

-- Reading a key changes nothing.
SELECT updated_at AS before_update FROM eo_status('st:failed') \gset
SELECT count(*) FROM eo_status('st:failed');
SELECT updated_at = :'before_update' AS unchanged, attempts FROM eo_status('st:failed');
