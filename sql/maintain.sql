--
-- maintain: eo_maintain() runs one maintenance pass by hand (the pass the
-- background worker runs every eo.naptime): it reclaims processing keys
-- whose lease expired (failed, retry allowed at once; dead once attempts
-- reach eo.max_attempts) and leaves live leases alone.  Also the
-- eo_keys_overview view, who may run eo_maintain(), and the validation of
-- eo's settings.
--
-- The pass reclaims every expired lease in the database, so this test
-- works in a database of its own, where no other test left keys behind.
-- The background worker serves that database too; the test relies on the
-- test server's long eo.naptime (3600 s) so that its next pass does not
-- come between a lease's expiry and the eo_maintain() call that checks
-- the reclaim (its first pass ran when the server started).
--
-- Tokens and timestamps are kept in psql variables (\gset) and only
-- compared, never printed.
--
SELECT current_database() AS regress_db \gset
CREATE DATABASE regression_eo_maintain;
\c regression_eo_maintain
CREATE EXTENSION eo;

-- The expected-error helper, made in this file's own database too.
\i test/eo_test_try.sql

-- The overview without its timestamps.
CREATE VIEW overview AS
SELECT done, processing, failed, dead, expired_leases, leases_reclaimed,
       oldest_processing_since IS NOT NULL AS has_oldest,
       next_lease_expiry IS NOT NULL AS has_next_expiry
FROM eo_keys_overview;

-- An empty store: nothing to do.
SELECT reclaimed, dead FROM eo_maintain();
SELECT * FROM overview;

-- Four keys:
--   m:short   a 1 s lease, abandoned by its holder
--   m:twice   a 1 s lease, taken over after expiry (attempts 2) and
--             abandoned again
--   m:live    a one-hour lease
--   m:txn     claimed and committed in transaction mode (done)
SELECT * FROM eo_claim('m:short', lease => '1 s') \gset short_
SELECT * FROM eo_claim('m:twice', lease => '1 s') \gset twice1_
SELECT * FROM eo_claim('m:live', lease => '1 hour') \gset live_
BEGIN;
SELECT status, attempts FROM eo_claim('m:txn');
COMMIT;
SELECT :'short_status' AS short, :short_attempts AS short_attempts,
       :'twice1_status' AS twice, :'live_status' AS live;

-- Nothing has expired yet: eo_maintain changes nothing.
SELECT reclaimed, dead FROM eo_maintain();
SELECT * FROM overview;

SELECT pg_sleep(1.1);
SELECT * FROM eo_claim('m:twice', lease => '1 s') \gset twice2_
SELECT :'twice2_status' AS status, :twice2_attempts AS attempts,
       :twice2_lease_token > :twice1_lease_token AS newer_token;
SELECT pg_sleep(1.1);

-- Two leases expired, one live; the overview tells.
SELECT * FROM overview;
SELECT oldest_processing_since = (SELECT updated_at FROM eo_status('m:short'))
           AS oldest_is_first_claim,
       next_lease_expiry = :'short_lease_expires_at'::timestamptz AS next_expiry_is_short,
       next_lease_expiry < now() AS next_expiry_passed
FROM eo_keys_overview;

-- eo_maintain works in the caller's transaction: a rolled-back pass
-- leaves the leases as they were.
BEGIN;
SELECT reclaimed, dead FROM eo_maintain();
SELECT state FROM eo_status('m:short');
ROLLBACK;
SELECT state, attempts, lease_token = :short_lease_token AS same_token,
       lease_expires_at = :'short_lease_expires_at' AS same_expiry, last_error
FROM eo_status('m:short');

-- The pass: with eo.max_attempts = 2, m:twice (attempts 2) becomes dead
-- and m:short (attempts 1) failed, retry allowed at once; m:live and the
-- done key are untouched.
SET eo.max_attempts = 2;
SELECT reclaimed, dead FROM eo_maintain();
SELECT 'm:short' AS key, state, attempts, last_error,
       lease_expires_at <= clock_timestamp() AS retry_due,
       lease_expires_at > :'short_lease_expires_at' AS due_from_the_pass,
       lease_token = :short_lease_token AS token_kept
FROM eo_status('m:short');
SELECT 'm:twice' AS key, state, attempts, last_error, lease_expires_at
FROM eo_status('m:twice');
SELECT 'm:live' AS key, state, attempts, last_error,
       lease_token = :live_lease_token AS same_token,
       lease_expires_at = :'live_lease_expires_at' AS same_expiry
FROM eo_status('m:live');
SELECT 'm:txn' AS key, state, attempts, last_error FROM eo_status('m:txn');
SELECT * FROM overview;
SELECT next_lease_expiry = :'live_lease_expires_at'::timestamptz AS next_expiry_is_live
FROM eo_keys_overview;

-- A second pass finds nothing more (a failed key whose retry is due is
-- not a lease).
SELECT reclaimed, dead FROM eo_maintain();
RESET eo.max_attempts;

-- The old holders were reclaimed: their tokens are stale (55006) for
-- eo_complete, eo_fail and eo_extend, and nothing changes.
SELECT eo_test_try(format($$SELECT eo_complete('m:short', '{"late": true}', lease_token => %s)$$,
                          :short_lease_token)) AS late_complete;
SELECT eo_test_try(format($$SELECT eo_fail('m:short', 'late', lease_token => %s)$$,
                          :short_lease_token)) AS late_fail;
SELECT eo_test_try(format($$SELECT eo_extend('m:short', %s, '1 hour')$$,
                          :short_lease_token)) AS late_extend;
SELECT eo_test_try(format($$SELECT eo_complete('m:twice', '{"late": true}', lease_token => %s)$$,
                          :twice2_lease_token)) AS late_complete_dead;
SELECT state, result, attempts, last_error FROM eo_status('m:short');
SELECT state, result, attempts, last_error FROM eo_status('m:twice');

-- The next delivery claims the reclaimed key at once, as attempt 2 with a
-- newer token, and completes it.  The dead key stays dead.
SELECT * FROM eo_claim('m:short', lease => '1 minute') \gset short2_
SELECT :'short2_status' AS status, :short2_attempts AS attempts,
       :short2_lease_token > :twice2_lease_token AS newer_token,
       :'short2_lease_expires_at'::timestamptz > now() AS expires_later;
SELECT state, attempts, last_error FROM eo_status('m:short');
SELECT eo_complete('m:short', '{"ok": true}', lease_token => :short2_lease_token);
SELECT status, result, attempts FROM eo_claim('m:short', lease => '1 minute');
SELECT status, result, attempts, lease_token FROM eo_claim('m:twice', lease => '1 minute');

-- A transaction-mode claim after a reclaim works too (attempt 2).
SELECT * FROM eo_claim('m:tm', lease => '200 ms') \gset tm_
SELECT pg_sleep(0.3);
SELECT reclaimed, dead FROM eo_maintain();
BEGIN;
SELECT status, attempts, lease_token FROM eo_claim('m:tm');
COMMIT;
SELECT state, attempts FROM eo_status('m:tm');

-- A transaction-mode claim in progress is no lease: the pass leaves it.
SELECT * FROM eo_claim('m:open', lease => '200 ms') \gset open_
SELECT pg_sleep(0.3);
BEGIN;
SELECT status, attempts FROM eo_claim('m:txn2');
SELECT reclaimed, dead FROM eo_maintain();
SELECT state, attempts FROM eo_status('m:txn2');
SELECT state, last_error FROM eo_status('m:open');
COMMIT;
SELECT state, attempts FROM eo_status('m:txn2');

-- The holder of m:live is untouched by all of this and completes.
SELECT eo_complete('m:live', '"live"', lease_token => :live_lease_token);
SELECT state, result, attempts FROM eo_status('m:live');
SELECT * FROM overview;

--
-- Privileges: eo_maintain() and the overview are not granted to PUBLIC.
--
CREATE ROLE regress_eo_maintainer;
GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text) TO regress_eo_maintainer;
SELECT has_function_privilege('public', 'eo_maintain()', 'EXECUTE') AS public_execute,
       has_table_privilege('public', 'eo_keys_overview', 'SELECT') AS public_select;
SET ROLE regress_eo_maintainer;
SELECT eo_test_try('SELECT eo_maintain()') AS maintain_without_grant;
SELECT eo_test_try('SELECT count(*) FROM eo_keys_overview') AS overview_without_grant;
-- the role's own lease, abandoned
SELECT status, attempts FROM eo_claim('m:role', lease => '200 ms');
SELECT pg_sleep(0.3);
SELECT eo_test_try('SELECT eo_maintain()') AS maintain_without_grant;
RESET ROLE;
SELECT state FROM eo_status('m:role');
-- Granted, a plain role runs the pass (it reclaims every expired lease,
-- here the role's own one).
GRANT EXECUTE ON FUNCTION eo_maintain() TO regress_eo_maintainer;
GRANT SELECT ON eo_keys_overview TO regress_eo_maintainer;
-- the view reads every generation through eo_key_stats(), which a
-- monitoring role must be granted too (function calls in a view are
-- checked against the caller)
SET ROLE regress_eo_maintainer;
SELECT eo_test_try('SELECT count(*) FROM eo_keys_overview') AS overview_without_function;
RESET ROLE;
GRANT EXECUTE ON FUNCTION eo_key_stats(), eo_claim_stats() TO regress_eo_maintainer;
SET ROLE regress_eo_maintainer;
SELECT reclaimed, dead FROM eo_maintain();
SELECT processing, failed FROM eo_keys_overview;
-- eo.max_attempts is superuser-only: a plain role cannot change it.
SELECT eo_test_try('SET eo.max_attempts = 1') AS set_max_attempts;
RESET ROLE;
SELECT state, attempts, last_error FROM eo_status('m:role');

--
-- Settings.
--
SELECT name, context, vartype, unit, min_val, max_val, boot_val
FROM pg_settings
WHERE name IN ('eo.databases', 'eo.max_attempts', 'eo.max_lease', 'eo.naptime')
ORDER BY name;

-- eo.naptime and eo.databases are read from the server's configuration
-- (reload): a session cannot set them.
SELECT eo_test_try('SET eo.naptime = 1') AS set_naptime;
SELECT eo_test_try('SET eo.naptime = 3600') AS set_naptime;
SELECT eo_test_try('SET LOCAL eo.naptime = 1') AS set_local_naptime;
SELECT eo_test_try($$SELECT set_config('eo.naptime', '5', false)$$) AS set_config_naptime;
SELECT eo_test_try($$SET eo.databases = 'postgres'$$) AS set_databases;
-- Nor can ALTER DATABASE or ALTER ROLE set them.
ALTER DATABASE regression_eo_maintain SET eo.naptime = 1;
ALTER ROLE regress_eo_maintainer SET eo.naptime = 1;
ALTER DATABASE regression_eo_maintain SET eo.databases = 'postgres';

-- eo.max_attempts: 1 .. 1000.
SELECT eo_test_try('SET eo.max_attempts = 0') AS max_attempts_0;
SELECT eo_test_try('SET eo.max_attempts = -1') AS max_attempts_neg;
SELECT eo_test_try('SET eo.max_attempts = 1001') AS max_attempts_1001;
SELECT eo_test_try($$SET eo.max_attempts = 'many'$$) AS max_attempts_text;
SET eo.max_attempts = 1;
SHOW eo.max_attempts;
SET eo.max_attempts = 1000;
SHOW eo.max_attempts;
RESET eo.max_attempts;
SHOW eo.max_attempts;
-- per database (superuser): checked when set, and used by eo_maintain in
-- that database's sessions
ALTER DATABASE regression_eo_maintain SET eo.max_attempts = 0;
ALTER DATABASE regression_eo_maintain SET eo.max_attempts = 1;
\c regression_eo_maintain
SHOW eo.max_attempts;
SELECT status, attempts FROM eo_claim('m:perdb', lease => '200 ms');
SELECT pg_sleep(0.3);
SELECT reclaimed, dead FROM eo_maintain();
SELECT state, attempts, last_error FROM eo_status('m:perdb');
ALTER DATABASE regression_eo_maintain RESET eo.max_attempts;

-- eo.max_lease: 1 s .. 30 days, in seconds by default.
SELECT eo_test_try('SET eo.max_lease = 0') AS max_lease_0;
SELECT eo_test_try($$SET eo.max_lease = '500ms'$$) AS max_lease_500ms;
SELECT eo_test_try($$SET eo.max_lease = '31d'$$) AS max_lease_31d;
SELECT eo_test_try('SET eo.max_lease = 2592001') AS max_lease_2592001;
SELECT eo_test_try($$SET eo.max_lease = '1 fortnight'$$) AS max_lease_bad_unit;
SET eo.max_lease = '30d';
SHOW eo.max_lease;
SET eo.max_lease = 1;
SHOW eo.max_lease;
-- eo_claim and eo_extend obey it.
SET eo.max_lease = '10s';
SELECT eo_test_try($$SELECT status FROM eo_claim('m:maxlease', lease => '11 s')$$) AS claim_11s;
SELECT * FROM eo_claim('m:maxlease', lease => '10 s') \gset ml_
SELECT :'ml_status' AS claim_10s;
SELECT eo_test_try(format($$SELECT eo_extend('m:maxlease', %s, '11 s')$$, :ml_lease_token)) AS extend_11s;
SELECT eo_test_try(format($$SELECT eo_extend('m:maxlease', %s, '10 s') > now()$$, :ml_lease_token)) AS extend_10s;
RESET eo.max_lease;
SHOW eo.max_lease;
SET ROLE regress_eo_maintainer;
SELECT eo_test_try($$SET eo.max_lease = '1h'$$) AS set_max_lease_as_plain_role;
RESET ROLE;

-- The eo. prefix is reserved: a misspelt setting is an error, not a
-- silently ignored placeholder.
SELECT eo_test_try('SET eo.naptme = 1') AS misspelt;

-- Clean up.
\c :regress_db
DROP DATABASE regression_eo_maintain;
DROP ROLE regress_eo_maintainer;
