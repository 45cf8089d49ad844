--
-- recovery: the holder of a lease records how far its work got
-- (eo_recovery_point, fenced by its token, in its own transaction), and
-- the next holder gets the point and state back from eo_claim.
--
-- The first holder creates a ride and records it with the key, in the
-- same transaction.
-- (A short lease, which the holder may still use after it ended, as long
-- as nobody took the key over.)
SELECT status, attempts, lease_token IS NOT NULL AS has_token,
       recovery_point, recovery_state
FROM eo_claim('ride:1', lease => '100 ms');
SELECT lease_token AS t1 FROM eo_status('ride:1') \gset
BEGIN;
SELECT eo_recovery_point('ride:1', :t1, 'ride_created', '{"ride_id": 7}');
COMMIT;
-- a point in a transaction that rolls back was never recorded
BEGIN;
SELECT eo_recovery_point('ride:1', :t1, 'charged', '{"ride_id": 7, "charge": "ch_1"}');
ROLLBACK;
SELECT recovery_point, recovery_state FROM eo_keys() WHERE key = 'ride:1';
-- the holder's lease ends (a crash after the charge): the next claim
-- takes the key over and resumes from the last recorded point
SET eo.max_attempts = 5;
SELECT pg_sleep(0.3);
SELECT status, attempts, recovery_point, recovery_state,
       lease_token > :t1 AS newer_token
FROM eo_claim('ride:1', lease => '1 minute');
SELECT lease_token AS t2 FROM eo_status('ride:1') \gset
-- the first holder is fenced: its token is stale
SELECT eo_test_try(format($$SELECT eo_recovery_point('ride:1', %s, 'charged')$$, :t1));
-- the new holder records the next step; a point without state clears it
SELECT eo_recovery_point('ride:1', :t2, 'charged', '{"ride_id": 7, "charge": "ch_1"}');
SELECT eo_recovery_point('ride:1', :t2, 'receipt_sent');
SELECT recovery_point, recovery_state FROM eo_keys() WHERE key = 'ride:1';
-- a failed attempt keeps the point for the retry
SELECT eo_fail('ride:1', 'mail server down', :t2);
SELECT status, attempts, recovery_point FROM eo_claim('ride:1', lease => '1 minute');
SELECT lease_token AS t3 FROM eo_status('ride:1') \gset
-- completing the work drops the point: the result is what is replayed
SELECT eo_complete('ride:1', '{"ride_id": 7}', :t3);
SELECT status, result, recovery_point, recovery_state FROM eo_claim('ride:1', lease => '1 minute');
SELECT recovery_point, recovery_state FROM eo_keys() WHERE key = 'ride:1';

-- Only the holder of the current lease may record a point.
SELECT eo_test_try(format($$SELECT eo_recovery_point('ride:1', %s, 'again')$$, :t3));
SELECT eo_test_try($$SELECT eo_recovery_point('ride:unknown', 1, 'p')$$);
-- a transaction-mode claim has no lease: nothing to resume after a rollback
BEGIN;
SELECT status FROM eo_claim('ride:txn');
SELECT eo_test_try($$SELECT eo_recovery_point('ride:txn', 1, 'p')$$);
ROLLBACK;
-- busy and duplicate answers do not show another holder's progress
SELECT status FROM eo_claim('ride:2', lease => '1 minute');
SELECT lease_token AS t4 FROM eo_status('ride:2') \gset
SELECT eo_recovery_point('ride:2', :t4, 'ride_created', '{"ride_id": 8}');
SELECT status, recovery_point, recovery_state FROM eo_claim('ride:2', lease => '1 minute');

-- Bad input.
SELECT eo_test_try(format($$SELECT eo_recovery_point('ride:2', %s, NULL)$$, :t4));
SELECT eo_test_try(format($$SELECT eo_recovery_point('ride:2', %s, '')$$, :t4));
SELECT eo_test_try(format($$SELECT eo_recovery_point('ride:2', %s, repeat('p', 257))$$, :t4));
SELECT eo_test_try(format($$SELECT eo_recovery_point('ride:2', %s, 'p', jsonb_build_object('x', repeat('s', 1048576)))$$, :t4));
SELECT eo_test_try($$SELECT eo_recovery_point('ride:2', NULL, 'p')$$);
SELECT eo_test_try($$SELECT eo_recovery_point(NULL, 1, 'p')$$);
-- nothing was lost: the point recorded before stands
SELECT recovery_point, recovery_state FROM eo_keys() WHERE key = 'ride:2';

-- A key that went dead keeps its point, and a redrive hands it on.
SET eo.max_attempts = 1;
SELECT status FROM eo_claim('ride:3', lease => '1 minute');
SELECT lease_token AS t5 FROM eo_status('ride:3') \gset
SELECT eo_recovery_point('ride:3', :t5, 'charged', '{"charge": "ch_3"}');
SELECT eo_fail('ride:3', 'mail server down', :t5);
SELECT status, recovery_point FROM eo_claim('ride:3', lease => '1 minute');
SELECT eo_redrive('ride:3');
SELECT status, attempts, recovery_point, recovery_state FROM eo_claim('ride:3', lease => '1 minute');
SET eo.max_attempts = 5;

-- Another role may not record a point on the key, even with its token.
CREATE ROLE regress_eo_rp_other NOLOGIN;
GRANT EXECUTE ON FUNCTION eo_recovery_point(text, bigint, text, jsonb, text) TO regress_eo_rp_other;
SET ROLE regress_eo_rp_other;
SELECT eo_test_try(format($$SELECT eo_recovery_point('ride:2', %s, 'stolen')$$, :t4));
RESET ROLE;
SELECT recovery_point FROM eo_keys() WHERE key = 'ride:2';
REVOKE ALL ON FUNCTION eo_recovery_point(text, bigint, text, jsonb, text) FROM regress_eo_rp_other;
DROP ROLE regress_eo_rp_other;
RESET eo.max_attempts;
