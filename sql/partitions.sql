--
-- partitions: the key store's time generations.  eo_maintain() keeps one
-- generation made ahead, makes it current once the current one is
-- eo.partition_interval old, and retires and drops an old generation once
-- it stopped taking keys and every key left in it was last changed more
-- than eo.retention ago, after moving its processing and failed keys to
-- the current generation.  Keys stay unique across generations, a key in
-- an old generation works as before, and finished keys go away only with
-- their table (no DELETE).
--
-- The pass works on the whole store, so this test has a database of its
-- own and starts from the state CREATE EXTENSION leaves.  It relies on the
-- test server's long eo.naptime (3600 s): the background worker does not
-- run a pass in between.  Generations are shown relative to the first one,
-- tables only through psql variables (their names and OIDs are never
-- printed), and no timestamp or token is printed.
--
-- The switch needs eo.partition_interval = 1 s and a pg_sleep(1.1); the
-- retirement eo.retention = 2 s and two pg_sleep(2.1): about 5 s in all.
--
SELECT current_database() AS regress_db \gset
CREATE DATABASE regression_eo_partitions;
\c regression_eo_partitions
CREATE EXTENSION eo;

-- The expected-error helper, made in this file's own database too.
\i test/eo_test_try.sql

-- A new installation has no generation: the first claim makes one, and
-- one ahead (a restore from pg_dump brings its own).
SELECT count(*) AS generations FROM eo_partitions;
SELECT status FROM eo_claim('p:first');
SELECT min(gen) AS g0 FROM eo_partitions \gset

-- The generations, numbered from the first one, without timestamps, table
-- names or sizes.
CREATE VIEW parts AS
SELECT gen - :g0 AS gen, state,
       "table"::text = 'eo_internal.eo_keys_' || gen AS named_by_gen,
       started_at IS NOT NULL AS started,
       ended_at IS NOT NULL AS ended,
       ended_at >= started_at AS ended_after_start,
       bytes > 0 AS has_storage
FROM eo_partitions ORDER BY gen;

-- The overview without its timestamps.
CREATE VIEW overview AS
SELECT done, processing, failed, dead, expired_leases FROM eo_keys_overview;

-- CREATE EXTENSION makes one current generation.
SELECT * FROM parts;

-- The first pass makes the next generation ahead; nothing else to do.
SELECT * FROM eo_maintain();
SELECT * FROM parts;
-- and a second pass changes nothing
SELECT * FROM eo_maintain();
SELECT * FROM parts;

--
-- Keys in the first generation:
--   p:done     claimed and completed with a result in one transaction
--   p:plain    claimed and committed, no result
--   p:lease    a one-hour lease, completed by its holder at the very end
--   p:extend   a one-hour lease, extended after the switch
--   p:late     a one-hour lease, completed after the switch
--   p:slow     a one-hour lease, completed just before retention passes
--   p:failold  a one-hour lease, failed (retry in an hour) after the switch
--   p:fail     a one-hour lease, failed (retry in an hour) before the switch
--
BEGIN;
SELECT status, result, attempts FROM eo_claim('p:done');
SELECT eo_complete('p:done', '{"n": 1}');
COMMIT;
SELECT status, result, attempts FROM eo_claim('p:plain');
SELECT * FROM eo_claim('p:lease', lease => '1 hour') \gset lease_
SELECT * FROM eo_claim('p:extend', lease => '1 hour') \gset extend_
SELECT * FROM eo_claim('p:late', lease => '1 hour') \gset late_
SELECT * FROM eo_claim('p:slow', lease => '1 hour') \gset slow_
SELECT * FROM eo_claim('p:failold', lease => '1 hour') \gset failold_
SELECT * FROM eo_claim('p:fail', lease => '1 hour') \gset fail_
SELECT eo_fail('p:fail', 'first failure', :fail_lease_token, '1 hour');
SELECT :'lease_status' AS lease, :'extend_status' AS extend, :'late_status' AS late,
       :'slow_status' AS slow, :'failold_status' AS failold, :'fail_status' AS fail;
SELECT * FROM overview;

--
-- The switch: once the current generation is eo.partition_interval old,
-- the ahead one becomes current, the old one stays live, and a new one is
-- made ahead.
--
SET eo.partition_interval = 1;
SELECT pg_sleep(1.1);
SELECT * FROM eo_maintain();
SELECT * FROM parts;
-- the new current generation is not yet a second old: no second switch
SELECT switched FROM eo_maintain();
-- no more switches from here on
RESET eo.partition_interval;

SELECT "table" AS old_table, relid::oid AS old_relid
FROM eo_partitions p JOIN eo_internal.eo_generations g USING (gen)
WHERE p.state = 'old' \gset
SELECT "table" AS cur_table FROM eo_partitions WHERE state = 'current' \gset

-- Every key is in the old generation, none in the current one.
SELECT key, state FROM :old_table ORDER BY key;
SELECT count(*) AS keys_in_current FROM :cur_table;

-- A key of the old generation is still a duplicate: the lookup finds it
-- there, and a completed result is replayed.  Nothing is inserted into the
-- current generation.
SELECT status, result, attempts, lease_token FROM eo_claim('p:done');
SELECT status, result, attempts, lease_token FROM eo_claim('p:plain');
BEGIN;
SELECT status, result, attempts FROM eo_claim('p:done');
SELECT status, result, attempts FROM eo_claim('p:done', lease => '1 minute');
COMMIT;
-- leases and failed keys there are still busy
SELECT status, attempts, lease_token,
       lease_expires_at = :'lease_lease_expires_at' AS same_expiry
FROM eo_claim('p:lease', lease => '1 minute');
SELECT status, attempts, lease_token, lease_expires_at > now() + '50 min' AS retry_later
FROM eo_claim('p:fail', lease => '1 minute');
SELECT count(*) AS keys_in_current FROM :cur_table;

-- A lease in the old generation can still be completed, failed and
-- extended by its holder, and eo_status reads it.
SELECT eo_complete('p:late', '{"late": true}', :late_lease_token);
SELECT eo_fail('p:failold', 'boom', :failold_lease_token, '1 hour');
SELECT eo_extend('p:extend', :extend_lease_token, '2 hours')
       > :'extend_lease_expires_at'::timestamptz AS extended;
SELECT k AS key, s.state, s.result, s.attempts, s.last_error,
       s.lease_token IS NOT NULL AS has_token
FROM unnest('{p:done,p:plain,p:lease,p:extend,p:late,p:slow,p:failold,p:fail}'::text[]) k,
     LATERAL eo_status(k) s
ORDER BY k;
SELECT status, result, attempts FROM eo_claim('p:late');
-- the old holder's token no longer completes it
SELECT eo_test_try(format($$SELECT eo_complete('p:late', '{}', %s)$$,
                          :late_lease_token)) AS complete_again;

-- A new key goes into the current generation.
SELECT status, attempts FROM eo_claim('p:new');
SELECT key FROM :cur_table ORDER BY key;
SELECT key, state FROM :old_table ORDER BY key;

-- eo_keys() and the overview read every live generation, each key once.
SELECT key, state FROM eo_keys() ORDER BY key;
SELECT key, count(*) FROM eo_keys() GROUP BY key HAVING count(*) > 1;
SELECT * FROM overview;

--
-- Retention.  With eo.retention = 2 s, the old generation is a candidate
-- once it stopped taking keys 2 s ago, and retires once every key left in
-- it was last changed more than 2 s ago.
--
SET eo.retention = 2;
-- too early: nothing is touched
SELECT * FROM eo_maintain();
SELECT * FROM parts;
SELECT count(*) AS keys_in_old FROM :old_table;

SELECT pg_sleep(2.1);
-- A key of the old generation is completed now: the generation must stay
-- another eo.retention so that a redelivery is still a duplicate.
SELECT eo_complete('p:slow', '{"slow": true}', :slow_lease_token);
CREATE TEMP TABLE before_move AS
SELECT k AS key, s.* FROM unnest('{p:lease,p:extend,p:fail,p:failold}'::text[]) k,
                          LATERAL eo_status(k) s;
SELECT * FROM eo_maintain();
SELECT * FROM parts;
-- but its processing and failed keys were moved to the current generation,
-- unchanged (every column of eo_status, timestamps and tokens included)
SELECT key, state FROM :old_table ORDER BY key;
SELECT key, state FROM :cur_table ORDER BY key;
SELECT b.key, b.state, s IS NOT DISTINCT FROM
           row(b.state, b.result, b.attempts, b.lease_token, b.lease_expires_at,
               b.last_error, b.created_at, b.updated_at) AS unchanged
FROM before_move b, LATERAL eo_status(b.key) s
ORDER BY b.key;
SELECT key, count(*) FROM eo_keys() GROUP BY key HAVING count(*) > 1;
SELECT status, result FROM eo_claim('p:slow');
SELECT status, lease_token FROM eo_claim('p:lease', lease => '1 minute');

SELECT pg_sleep(2.1);
-- Now it retires and its table is dropped.
SELECT switched, retired, dropped FROM eo_maintain();
-- retired, not yet dropped: a table is dropped only by a later pass, once
-- its retirement has committed and nothing holds a lock on it
SELECT * FROM parts;
SELECT to_regclass(:'old_table') IS NOT NULL AS table_still_there;
-- a view of another role that names the retired table (by OID) does not
-- keep eo from dropping it: eo's tables are eo's alone
CREATE ROLE regress_eo_pinner;
CREATE SCHEMA regress_eo_pin AUTHORIZATION regress_eo_pinner;
SET ROLE regress_eo_pinner;
CREATE VIEW regress_eo_pin.pin AS SELECT :'old_relid'::regclass AS pinned;
RESET ROLE;
SELECT switched, retired, dropped FROM eo_maintain();
SELECT * FROM parts;
SELECT to_regclass('regress_eo_pin.pin') IS NULL AS pinning_view_gone;
DROP SCHEMA regress_eo_pin;
DROP ROLE regress_eo_pinner;
SELECT to_regclass(:'old_table') IS NULL AS table_gone,
       NOT EXISTS (SELECT FROM pg_class WHERE oid = :old_relid) AS relation_gone,
       NOT EXISTS (SELECT FROM eo_internal.eo_generations WHERE relid::oid = :old_relid) AS unregistered;
-- another pass has nothing to do
SELECT * FROM eo_maintain();

-- The finished keys went with the table; the moved ones are all that is
-- left of the first generation.
SELECT key, state FROM eo_keys() ORDER BY key;
SELECT * FROM overview;
SELECT count(*) AS status_rows FROM eo_status('p:done');

-- A finished key of the dropped generation is a new key again.
SELECT status, result, attempts FROM eo_claim('p:done');
SELECT status, result, attempts FROM eo_claim('p:plain', lease => '1 minute');
SELECT status, result, attempts FROM eo_claim('p:late');
SELECT state, result, attempts FROM eo_status('p:done');

-- The moved lease and failed keys survived: their holders still hold them.
SELECT status, lease_token FROM eo_claim('p:lease', lease => '1 minute');
SELECT status, lease_token FROM eo_claim('p:failold', lease => '1 minute');
SELECT eo_extend('p:extend', :extend_lease_token, '3 hours')
       > :'extend_lease_expires_at'::timestamptz + '1 hour' AS extended_again;
SELECT eo_complete('p:lease', '{"done": "late"}', :lease_lease_token);
SELECT status, result, attempts FROM eo_claim('p:lease');
SELECT status, attempts, lease_token FROM eo_claim('p:fail', lease => '1 minute');
SELECT k AS key, s.state, s.result, s.attempts, s.last_error
FROM unnest('{p:lease,p:extend,p:fail,p:failold}'::text[]) k, LATERAL eo_status(k) s
ORDER BY k;
SELECT key, state FROM eo_keys() ORDER BY key;
SELECT key, count(*) FROM eo_keys() GROUP BY key HAVING count(*) > 1;
SELECT * FROM overview;

--
-- Settings.
--
SELECT name, context, vartype, unit, min_val, max_val, boot_val
FROM pg_settings
WHERE name IN ('eo.retention', 'eo.partition_interval')
ORDER BY name;
SELECT eo_test_try($$SET eo.retention = 0$$) AS retention_0;
SELECT eo_test_try($$SET eo.retention = '3651d'$$) AS retention_3651d;
SELECT eo_test_try($$SET eo.retention = -1$$) AS retention_minus_1;
SELECT eo_test_try($$SET eo.retention = 'forever'$$) AS retention_forever;
SELECT eo_test_try($$SET eo.partition_interval = 0$$) AS partition_interval_0;
SELECT eo_test_try($$SET eo.partition_interval = '31d'$$) AS partition_interval_31d;
SELECT eo_test_try($$SET eo.partition_interval = '500ms'$$) AS partition_interval_500ms;
-- the bounds themselves are accepted; units are shown
SET eo.retention = '3650d';
SHOW eo.retention;
SET eo.retention = 1;
SHOW eo.retention;
SET eo.retention = '36h';
SHOW eo.retention;
SET eo.partition_interval = '30d';
SHOW eo.partition_interval;
SET eo.partition_interval = '1s';
SHOW eo.partition_interval;
SET eo.partition_interval = '90min';
SHOW eo.partition_interval;

-- Only a superuser may change them.
CREATE ROLE regress_eo_partitions_user;
SET ROLE regress_eo_partitions_user;
SET eo.retention = '1h';
SELECT :'LAST_ERROR_SQLSTATE' AS sqlstate;
SET eo.partition_interval = '1h';
SELECT :'LAST_ERROR_SQLSTATE' AS sqlstate;
SELECT eo_test_try($$SELECT set_config('eo.retention', '1', false)$$) AS set_config;
SHOW eo.retention;
SHOW eo.partition_interval;
RESET ROLE;
DROP ROLE regress_eo_partitions_user;

RESET eo.retention;
RESET eo.partition_interval;
SHOW eo.retention;
SHOW eo.partition_interval;

\c :regress_db
DROP DATABASE regression_eo_partitions;
