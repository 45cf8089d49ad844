--
-- redrive: a dead key may be claimed again once the cause is fixed, by
-- its owner or a member of the owning role; it keeps its history, and
-- eo.max_attempts counts from the redrive.
--
SET eo.max_attempts = 2;
SELECT keys_redriven AS redriven_before FROM eo_metrics.claims \gset
-- A lease-mode key (its fingerprint is kept from the first claim) that
-- fails twice.
SELECT status, lease_token AS k1 FROM eo_claim('rd:1', 'fp-1', '1 minute') \gset
SELECT eo_fail('rd:1', 'upstream 503', :k1);
SELECT status, lease_token AS k2 FROM eo_claim('rd:1', 'fp-1', '1 minute') \gset
SELECT eo_fail('rd:1', 'upstream 503 again', :k2);
SELECT state, attempts, last_error FROM eo_status('rd:1');
SELECT status, attempts FROM eo_claim('rd:1', 'fp-1', '1 minute');
-- the redrive: failed and due at once, attempts and last error kept
SELECT eo_redrive('rd:1');
SELECT state, attempts, last_error, lease_expires_at <= clock_timestamp() AS due
FROM eo_status('rd:1');
-- once is enough: a key that is not dead is not redriven again
SELECT eo_redrive('rd:1');
-- the fingerprint still holds: a different request is refused
SELECT eo_test_try($$SELECT status FROM eo_claim('rd:1', 'fp-2', '1 minute')$$);
-- the next delivery claims it, as attempt 3 of a fresh budget of 2
SELECT status, attempts, lease_token AS k3 FROM eo_claim('rd:1', 'fp-1', '1 minute') \gset
\echo :status :attempts
SELECT eo_fail('rd:1', 'still down', :k3);
SELECT status, attempts, lease_token AS k4 FROM eo_claim('rd:1', 'fp-1', '1 minute') \gset
\echo :status :attempts
SELECT eo_fail('rd:1', 'down for good', :k4);
SELECT state, attempts, last_error FROM eo_status('rd:1');
-- a token of before the redrive is stale
SELECT eo_test_try(format($$SELECT eo_complete('rd:1', NULL, %s)$$, :k2));
-- redriven again, it completes, in transaction mode this time
SELECT eo_redrive('rd:1');
BEGIN;
SELECT status, attempts FROM eo_claim('rd:1', 'fp-1');
SELECT eo_complete('rd:1', '{"ok": true}');
COMMIT;
SELECT status, result FROM eo_claim('rd:1', 'fp-1');
SELECT eo_redrive('rd:1');

-- A second key, failed twice under leases; the redriven key is claimed
-- with a new token ...
SELECT status, lease_token AS l1 FROM eo_claim('rd:lease', lease => '1 minute') \gset
SELECT eo_fail('rd:lease', 'timeout', :l1);
SELECT status, lease_token AS l2 FROM eo_claim('rd:lease', lease => '1 minute') \gset
SELECT eo_fail('rd:lease', 'timeout', :l2);
SELECT state FROM eo_status('rd:lease');
SELECT eo_redrive('rd:lease');
SELECT status, attempts, lease_token > :l2 AS new_token FROM eo_claim('rd:lease', lease => '100 ms');
-- ... whose lease runs out.  Maintenance reclaims it as a failed attempt,
-- the first since the redrive: failed, not dead.
SELECT pg_sleep(0.3);
SELECT eo_maintain() IS NOT NULL AS maintained;
SELECT state, attempts, last_error FROM eo_status('rd:lease');
-- the next expiry is the second: dead
SELECT status, attempts FROM eo_claim('rd:lease', lease => '100 ms');
SELECT pg_sleep(0.3);
SELECT eo_maintain() IS NOT NULL AS maintained;
SELECT state, attempts, last_error FROM eo_status('rd:lease');

-- Unknown keys and bad input.
SELECT eo_test_try($$SELECT eo_redrive('rd:unknown')$$);
SELECT eo_test_try($$SELECT eo_redrive(NULL)$$);
SELECT eo_test_try($$SELECT eo_redrive('')$$);
SELECT eo_test_try($$SELECT eo_redrive('rd:1', scope => 'no such scope')$$);
SELECT eo_test_try($$SELECT eo_redrive_dead(key_prefix => '')$$);

-- In bulk: by key prefix, by the time the key went dead, by scope.
SELECT count(eo_fail('rd:bulk:' || i)) FROM generate_series(1, 6) i;
SELECT count(eo_fail('rd:bulk:' || i)) FROM generate_series(1, 6) i;
SELECT count(eo_fail('rd:other:' || i)) FROM generate_series(1, 2) i;
SELECT count(eo_fail('rd:other:' || i)) FROM generate_series(1, 2) i;
SELECT eo_scope_create('rd_scope');
SELECT eo_fail('rd:bulk:1', scope => 'rd_scope');
SELECT eo_fail('rd:bulk:1', scope => 'rd_scope');
SELECT eo_redrive_dead(key_prefix => 'rd:bulk:', dead_before => now() - interval '1 hour');
SELECT eo_redrive_dead(key_prefix => 'rd:bulk:', dead_since => now() + interval '1 hour');
SELECT eo_redrive_dead(key_prefix => 'rd:bulk:');
SELECT eo_redrive_dead(key_prefix => 'rd:bulk:');
SELECT key, state FROM eo_keys() WHERE key LIKE 'rd:%' AND scope = 0 AND key NOT IN ('rd:1', 'rd:lease') ORDER BY key;
SELECT state FROM eo_status('rd:bulk:1', scope => 'rd_scope');
SELECT eo_redrive_dead(scope => 'rd_scope');
SELECT state FROM eo_status('rd:bulk:1', scope => 'rd_scope');
-- no filter: every dead key without a scope
SELECT eo_redrive_dead();
SELECT count(*) FILTER (WHERE state = 'x') AS dead_left FROM eo_keys() WHERE key LIKE 'rd:%';
-- counted
SELECT keys_redriven - :redriven_before AS redriven FROM eo_metrics.claims;

-- Privileges: only the owner of a key or a member of the owning role.
CREATE ROLE regress_eo_rd_owner NOLOGIN;
CREATE ROLE regress_eo_rd_member NOLOGIN IN ROLE regress_eo_rd_owner;
CREATE ROLE regress_eo_rd_other NOLOGIN;
GRANT EXECUTE ON FUNCTION eo_fail(text, text, bigint, interval, text, text, boolean),
    eo_redrive(text, text), eo_redrive_dead(text, text, timestamptz, timestamptz),
    eo_status(text, text)
TO regress_eo_rd_owner, regress_eo_rd_other;
SET ROLE regress_eo_rd_owner;
SELECT eo_fail('rd:owned'), eo_fail('rd:owned');
SELECT eo_fail('rd:orphan'), eo_fail('rd:orphan');
SET ROLE regress_eo_rd_other;
SELECT eo_test_try($$SELECT eo_redrive('rd:owned')$$);
-- in bulk, other roles' keys are passed over, not counted
SELECT eo_redrive_dead(key_prefix => 'rd:owned');
SET ROLE regress_eo_rd_member;
SELECT state FROM eo_status('rd:owned');
SELECT eo_redrive_dead(key_prefix => 'rd:owned');
SELECT state, attempts FROM eo_status('rd:owned');
RESET ROLE;
REVOKE ALL ON FUNCTION eo_fail(text, text, bigint, interval, text, text, boolean),
    eo_redrive(text, text), eo_redrive_dead(text, text, timestamptz, timestamptz),
    eo_status(text, text)
FROM regress_eo_rd_owner, regress_eo_rd_other;
DROP ROLE regress_eo_rd_member, regress_eo_rd_other, regress_eo_rd_owner;
-- a superuser's bulk redrive also reaches keys whose owner was dropped
SELECT eo_redrive_dead(key_prefix => 'rd:orphan');
SELECT state FROM eo_status('rd:orphan');
RESET eo.max_attempts;
