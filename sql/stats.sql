--
-- stats: eo_keys_overview counts what the claim functions replayed or
-- refused in this database since the server started (shared memory; the
-- test server preloads eo): duplicates served, fingerprint conflicts,
-- stale lease tokens refused (of keys and of relay batches).  Counts are
-- not transactional.
--
CREATE TEMP TABLE before AS
SELECT duplicates_served, fingerprint_conflicts, stale_tokens_refused FROM eo_keys_overview;

-- three duplicates: two of a committed key, one of a key claimed earlier
-- in the same transaction
SELECT status FROM eo_claim('cstat:a', 'fp');
SELECT status FROM eo_claim('cstat:a', 'fp');
SELECT status FROM eo_claim('cstat:a');
BEGIN;
SELECT status FROM eo_claim('cstat:b');
SELECT status FROM eo_claim('cstat:b');
COMMIT;

-- one fingerprint conflict
SELECT eo_test_try($$SELECT status FROM eo_claim('cstat:a', 'other')$$);

-- one stale token: a lease taken over after it expired
SELECT lease_token AS t1 FROM eo_claim('cstat:lease', lease => '100 ms') \gset
SELECT pg_sleep(0.2);
SELECT status FROM eo_claim('cstat:lease', lease => '1 hour');
SELECT eo_test_try(format($$SELECT eo_complete('cstat:lease', '"late"', lease_token => %s)$$, :t1));

-- and one stale relay token: a batch whose lease expired went to another
-- fetch, and the first holder acknowledges it late
SELECT eo_outbox_create('cstat_box');
SELECT eo_group_create('cstat_box', 'g');
SELECT eo_emit('cstat_box', 'order', '1', 'Created', '{}') IS NOT NULL AS emitted;
SELECT max(lease_token) AS r1 FROM eo_relay_fetch('cstat_box', 'g', 10, '100 ms') \gset
SELECT pg_sleep(0.2);
SELECT count(*) AS refetched FROM eo_relay_fetch('cstat_box', 'g', 10, '1 hour');
SELECT eo_test_try(format($$SELECT eo_relay_ack('cstat_box', 'g', %s)$$, :r1));
SELECT eo_outbox_drop('cstat_box');

-- a duplicate served in a transaction that rolls back still counts
BEGIN;
SELECT status FROM eo_claim('cstat:a');
ROLLBACK;

SELECT o.duplicates_served - b.duplicates_served AS duplicates_served,
       o.fingerprint_conflicts - b.fingerprint_conflicts AS fingerprint_conflicts,
       o.stale_tokens_refused - b.stale_tokens_refused AS stale_tokens_refused
FROM eo_keys_overview o, before b;

