--
-- outbox_retention: eo_outbox_maintain makes partitions ahead and drops a
-- partition once it is past the outbox's retention and every consumer
-- group has acknowledged every event in it; eo_outbox_status says which
-- group holds one back.
--
SET client_min_messages = warning;
SELECT eo_outbox_create('ret', slots => 2, premake => 2);
-- Two old partitions, as if the outbox had been running since 2020 (an
-- operator can add partitions in eo_internal for any range, eo_outbox_maintain handles
-- them like its own).
CREATE TABLE eo_internal.ret_2020a PARTITION OF ret FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-02 00:00+00');
CREATE TABLE eo_internal.ret_2020b PARTITION OF ret FOR VALUES FROM ('2020-01-02 00:00+00') TO ('2020-01-03 00:00+00');
INSERT INTO ret (aggregatetype, aggregateid, type, created_at)
SELECT 'order', 'o' || i, 'Old', '2020-01-01 12:00+00'::timestamptz + i * interval '1 hour'
FROM generate_series(1, 20) i;
SELECT count(eo_emit('ret', 'order', 'o' || i, 'New', NULL)) FROM generate_series(1, 5) i;
SELECT tableoid::regclass::text LIKE 'eo_internal.ret_2020%' AS old, count(*)
FROM ret GROUP BY 1 ORDER BY 1;

SELECT eo_group_create('ret', 'fast');
SELECT eo_group_create('ret', 'slow');

-- Nobody has consumed yet: both old partitions are held.
SELECT action, partition FROM eo_outbox_maintain() ORDER BY partition;
SELECT consumer_group, backlog, holds_retention FROM eo_outbox_status ORDER BY 1;

-- Drain "fast" (fetch and acknowledge every page).
CREATE FUNCTION drain(g text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    t bigint;
    total int := 0;
BEGIN
    LOOP
        SELECT max(lease_token) INTO t FROM eo_relay_fetch('ret', g, 7);
        EXIT WHEN t IS NULL;
        total := total + eo_relay_ack('ret', g, t);
    END LOOP;
    RETURN total;
END $$;
SELECT drain('fast');
-- "slow" still holds them back.
SELECT action, partition FROM eo_outbox_maintain() ORDER BY partition;
SELECT consumer_group, backlog, holds_retention FROM eo_outbox_status ORDER BY 1;

-- "slow" takes a page but does not acknowledge it: still held.
SELECT count(*) > 0 AS got FROM eo_relay_fetch('ret', 'slow', 100);
SELECT action, partition FROM eo_outbox_maintain() ORDER BY partition;
-- After a full drain both old partitions go; the current ones stay.
SELECT eo_relay_ack('ret', 'slow', (SELECT lease_token FROM eo_internal.eo_outbox_slots
                                    WHERE grp = 'slow' AND page_state = 'o'));
SELECT drain('slow');
SELECT action, partition FROM eo_outbox_maintain() ORDER BY partition;
SELECT count(*) FILTER (WHERE c.relname LIKE 'ret_2020%') AS old_partitions,
       count(*) AS partitions
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'ret'::regclass;
SELECT count(*) AS events FROM ret;
SELECT consumer_group, backlog, lag, holds_retention FROM eo_outbox_status ORDER BY 1;
-- Nothing left to do.
SELECT count(*) FROM eo_outbox_maintain();

-- An old event arriving after its partition was dropped is refused, not
-- lost: its writer gets an error and can retry.
SELECT count(*) FROM (SELECT eo_emit('ret', 'order', 'late', 'x', NULL)) e;
INSERT INTO ret (aggregatetype, aggregateid, type, created_at)
VALUES ('order', 'late', 'Old', '2020-01-01 12:00+00');

-- Partitions are made ahead again when some are missing.
SELECT count(*) AS before FROM pg_inherits WHERE inhparent = 'ret'::regclass;
SELECT relname AS newest FROM pg_class c JOIN pg_inherits i ON c.oid = i.inhrelid
WHERE i.inhparent = 'ret'::regclass ORDER BY relname DESC LIMIT 1 \gset
DROP TABLE eo_internal.:newest;
SELECT action, count(*) FROM eo_outbox_maintain() GROUP BY 1;
SELECT count(*) AS after FROM pg_inherits WHERE inhparent = 'ret'::regclass;

-- Without consumer groups, a partition goes once it is past retention.
SELECT eo_outbox_create('ret_nogroup', slots => 1, premake => 1, retention => '1 day');
CREATE TABLE eo_internal.ret_nogroup_old PARTITION OF ret_nogroup
    FOR VALUES FROM ('2021-01-01 00:00+00') TO ('2021-01-02 00:00+00');
INSERT INTO ret_nogroup (aggregatetype, aggregateid, type, created_at)
VALUES ('order', '1', 'Old', '2021-01-01 00:00+00');
SELECT outbox, action, partition FROM eo_outbox_maintain() ORDER BY 1, 3;

SELECT eo_outbox_drop('ret');
SELECT eo_outbox_drop('ret_nogroup');
DROP FUNCTION drain(text);
