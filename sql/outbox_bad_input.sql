--
-- outbox_bad_input: every argument check of the outbox and relay functions
-- raises its own SQLSTATE, and none reaches storage or raises XX000.
--
SET client_min_messages = warning;
SELECT eo_outbox_create('bad', slots => 2);
SELECT eo_group_create('bad', 'g');

-- eo_outbox_create
SELECT eo_test_try($$SELECT eo_outbox_create(NULL)$$);
SELECT eo_test_try($$SELECT eo_outbox_create('')$$);
SELECT eo_test_try($$SELECT eo_outbox_create(repeat('x', 41))$$);
SELECT eo_test_try($$SELECT eo_outbox_create('Bad-Name')$$);
SELECT eo_test_try($$SELECT eo_outbox_create('1abc')$$);
SELECT eo_test_try($$SELECT eo_outbox_create('bad')$$);
SELECT eo_test_try($$SELECT eo_outbox_create('x', schema => 'no_such_schema')$$);
SELECT eo_test_try($$SELECT eo_outbox_create('x', mode => 'kafka')$$);
SELECT eo_test_try($$SELECT eo_outbox_create('x', slots => 0)$$);
SELECT eo_test_try($$SELECT eo_outbox_create('x', slots => 1025)$$);
SELECT eo_test_try($$SELECT eo_outbox_create('x', partition_interval => '1 month')$$);
SELECT eo_test_try($$SELECT eo_outbox_create('x', partition_interval => '30 seconds')$$);
SELECT eo_test_try($$SELECT eo_outbox_create('x', partition_interval => NULL)$$);
SELECT eo_test_try($$SELECT eo_outbox_create('x', premake => 0)$$);
SELECT eo_test_try($$SELECT eo_outbox_create('x', retention => '-1 day')$$);
SELECT eo_test_try($$SELECT eo_outbox_create('x', retention => NULL)$$);
-- an existing table of that name is not taken over
CREATE TABLE taken (id int);
SELECT eo_test_try($$SELECT eo_outbox_create('taken')$$);
DROP TABLE taken;
-- nothing of the failed attempts is left
SELECT name FROM eo_internal.eo_outboxes ORDER BY 1;

-- eo_emit
SELECT eo_test_try($$SELECT eo_emit(NULL, 'order', '1', 'Created', '{}')$$);
SELECT eo_test_try($$SELECT eo_emit('nope', 'order', '1', 'Created', '{}')$$);
SELECT eo_test_try($$SELECT eo_emit(repeat('x', 100), 'order', '1', 'Created', '{}')$$);
SELECT eo_test_try($$SELECT eo_emit('bad', NULL, '1', 'Created', '{}')$$);
SELECT eo_test_try($$SELECT eo_emit('bad', 'order', NULL, 'Created', '{}')$$);
SELECT eo_test_try($$SELECT eo_emit('bad', 'order', '1', NULL, '{}')$$);
SELECT eo_test_try($$SELECT eo_emit('bad', '', '1', 'Created', '{}')$$);
SELECT eo_test_try($$SELECT eo_emit('bad', 'order', '', 'Created', '{}')$$);
SELECT eo_test_try($$SELECT eo_emit('bad', 'order', '1', '', '{}')$$);
-- NULL payload and headers are fine (a tombstone, for instance)
SELECT eo_test_try($$SELECT eo_emit('bad', 'order', '1', 'Deleted', NULL, NULL) IS NOT NULL$$);
-- a plain INSERT missing a required column, or setting relay columns
SELECT eo_test_try($$INSERT INTO bad (aggregatetype, type) VALUES ('order', 'Created')$$);
SELECT eo_test_try($$INSERT INTO bad (aggregatetype, aggregateid, type, seq) VALUES ('order', '1', 'Created', 1)$$);
SELECT count(*) AS events FROM bad;

-- consumer groups
SELECT eo_test_try($$SELECT eo_group_create('nope', 'g')$$);
SELECT eo_test_try($$SELECT eo_group_create('bad', NULL)$$);
SELECT eo_test_try($$SELECT eo_group_create('bad', '')$$);
SELECT eo_test_try($$SELECT eo_group_create('bad', repeat('g', 64))$$);
SELECT eo_test_try($$SELECT eo_group_create('bad', 'g')$$);
SELECT eo_test_try($$SELECT eo_group_create('bad', 'h', start_at => 'yesterday')$$);
SELECT eo_test_try($$SELECT eo_group_drop('bad', 'nope')$$);
SELECT eo_test_try($$SELECT eo_group_drop('nope', 'g')$$);

-- eo_relay_fetch
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch(NULL, 'g')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('nope', 'g')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('bad', NULL)$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('bad', 'nope')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('bad', 'g', 0)$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('bad', 'g', 100001)$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('bad', 'g', NULL)$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('bad', 'g', 10, '0 s')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('bad', 'g', 10, '-1 s')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('bad', 'g', 10, NULL)$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('bad', 'g', 10, '1000 years')$$);

-- A sequence cache on seq would let events be skipped: refused.
ALTER SEQUENCE bad_seq_seq CACHE 10;
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('bad', 'g')$$);
ALTER SEQUENCE bad_seq_seq CACHE 1;
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('bad', 'g')$$);

-- eo_relay_ack, _extend, _release
SELECT eo_test_try($$SELECT eo_relay_ack('bad', 'g', NULL)$$);
SELECT eo_test_try($$SELECT eo_relay_ack('bad', 'nope', 1)$$);
SELECT eo_test_try($$SELECT eo_relay_ack('nope', 'g', 1)$$);
SELECT eo_test_try($$SELECT eo_relay_ack('bad', 'g', -1)$$);
SELECT eo_test_try($$SELECT eo_relay_extend('bad', 'g', 1, NULL)$$);
SELECT eo_test_try($$SELECT eo_relay_extend('bad', 'g', 1, '0 s')$$);
SELECT eo_test_try($$SELECT eo_relay_release('bad', 'g', NULL)$$);

-- A WAL-mode outbox has no events table to relay from, and refuses
-- plain INSERTs (eo_emit writes its events to the WAL).
SELECT eo_outbox_create('badwal', mode => 'wal');
SELECT eo_test_try($$INSERT INTO badwal (aggregatetype, aggregateid, type) VALUES ('order', '1', 'Created')$$);
SELECT eo_test_try($$SELECT eo_group_create('badwal', 'g')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('badwal', 'g')$$);
SELECT eo_test_try($$SELECT eo_relay_ack('badwal', 'g', 1)$$);
SELECT eo_outbox_drop('badwal');

-- eo_outbox_drop
SELECT eo_test_try($$SELECT eo_outbox_drop(NULL)$$);
SELECT eo_test_try($$SELECT eo_outbox_drop('nope')$$);

-- eo_relay_wait: outbox and timeout checked; before any fetch it returns
-- at once (fetch first); after an empty fetch it sleeps its timeout.
SELECT eo_test_try($$SELECT eo_relay_wait(NULL)$$);
SELECT eo_test_try($$SELECT eo_relay_wait('nope')$$);
SELECT eo_test_try($$SELECT eo_relay_wait('bad', NULL)$$);
SELECT eo_test_try($$SELECT eo_relay_wait('bad', '-1 s')$$);
SELECT eo_test_try($$SELECT eo_relay_wait('bad', '2 hours')$$);
SELECT eo_outbox_create('waitbox');
SELECT eo_group_create('waitbox', 'g');
SELECT eo_relay_wait('waitbox', '0') AS before_any_fetch;
SELECT count(*) AS fetched FROM eo_relay_fetch('waitbox', 'g');
SELECT eo_relay_wait('waitbox', '50 ms') AS woken_in_50ms;
SELECT eo_outbox_drop('waitbox');

SELECT eo_outbox_drop('bad');

-- An event is a write: refused in a read-only transaction, as writes are.
SELECT eo_outbox_create('ro', slots => 1)::text;
BEGIN READ ONLY;
SELECT eo_test_try($$SELECT eo_emit('ro', 'order', '1', 'Created', NULL)$$);
COMMIT;
SELECT eo_outbox_drop('ro');
