--
-- relay_bounds: where a fetch's scans start and stop.  A batch taken
-- while no other transaction runs ends its slot's scan range where it
-- ended, so the next fetch does not read the delivered events again; a
-- fetch whose own transaction wrote events does not take that shortcut.
-- A fetch of several slots fills its pages slot after slot, leaving the
-- slots it does not reach to other relays.  Every event is delivered
-- once, in seq order per slot, whatever the bounds.
--
SELECT eo_outbox_create('bounds', slots => 4)::text;
SELECT eo_group_create('bounds', 'g');
CREATE TABLE got (call int, slot int, seq bigint, id uuid, token bigint);

-- Fetch (up to 4 slots, at most `page` events), record, acknowledge;
-- until a fetch returns nothing.  Returns the number of fetches.
CREATE FUNCTION drain_wide(page int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    n int := 0;
    got_now int;
BEGIN
    LOOP
        n := n + 1;
        INSERT INTO got SELECT n, f.slot, f.seq, f.id, f.lease_token
        FROM eo_relay_fetch('bounds', 'g', page, '1 minute', 4, false) f;
        GET DIAGNOSTICS got_now = ROW_COUNT;
        EXIT WHEN got_now = 0;
        PERFORM eo_relay_ack_pages('bounds', 'g',
                                   (SELECT array_agg(DISTINCT token) FROM got WHERE call = n));
    END LOOP;
    RETURN n;
END $$;

-- 200 events of 40 aggregates, spread over the 4 slots.
SELECT count(eo_emit('bounds', 'account', 'a' || (i % 40), 'Moved', '{}')) AS emitted
FROM generate_series(1, 200) i;
SELECT count(DISTINCT slot) AS slots_with_events
FROM (SELECT ((hashtext(aggregateid) & 2147483647) % 4) AS slot FROM bounds) x;

SELECT drain_wide(25) AS fetches;
-- every event once, at most 25 per fetch, each slot in seq order
SELECT count(*) AS delivered, count(DISTINCT id) AS distinct_events,
       (SELECT count(*) FROM bounds) AS in_outbox,
       (SELECT max(c) FROM (SELECT count(*) AS c FROM got GROUP BY call) x) AS largest_fetch
FROM got;
SELECT bool_and(ordered) AS each_slot_in_seq_order
FROM (SELECT seq > lag(seq, 1, 0::bigint) OVER (PARTITION BY slot ORDER BY call, seq) AS ordered
      FROM got) x;
-- Nothing ran beside these batches: each slot's next scan starts past
-- the last event, not at the first.
SELECT bool_and(pos_lo = (SELECT max(seq) + 1 FROM bounds)) AS scans_start_past_the_end
FROM eo_internal.eo_outbox_slots WHERE outbox = 'bounds' AND grp = 'g';

-- One slot ahead of the others: a fetch of one slot, acknowledged, then
-- fetches of all four with little room.
TRUNCATE got;
SELECT count(eo_emit('bounds', 'account', 'a' || (i % 40), 'Moved', '{}')) AS emitted
FROM generate_series(1, 200) i;
SELECT eo_relay_ack('bounds', 'g', max(lease_token)) AS acked_ahead
FROM eo_relay_fetch('bounds', 'g', 30, '1 minute');
SELECT drain_wide(20) AS fetches;
SELECT count(*) + 30 AS delivered, count(DISTINCT id) + 30 AS distinct_events
FROM got;
SELECT bool_and(ordered) AS each_slot_in_seq_order
FROM (SELECT seq > lag(seq, 1, 0::bigint) OVER (PARTITION BY slot ORDER BY call, seq) AS ordered
      FROM got) x;

-- A fetch of several slots fills its pages slot after slot: the slots
-- it does not reach stay free for the other relays of the group.
-- (Events in two slots only, so that the fetch serves them together.)
TRUNCATE got;
SELECT count(eo_emit('bounds', 'account', 'a' || (i % 40), 'Moved', '{}')) AS emitted
FROM generate_series(1, 400) i
WHERE ((hashtext('a' || (i % 40)) & 2147483647) % 4) IN (0, 1);
INSERT INTO got SELECT 0, f.slot, f.seq, f.id, f.lease_token
FROM eo_relay_fetch('bounds', 'g', 25, '1 minute', 4, false) f;
SELECT count(*) AS events, count(DISTINCT slot) AS slots FROM got;
SELECT count(*) AS slots_leased FROM eo_internal.eo_outbox_slots
WHERE outbox = 'bounds' AND grp = 'g' AND page_state = 'o';
SELECT eo_relay_ack_pages('bounds', 'g', array_agg(DISTINCT token)) AS acked FROM got;
SELECT drain_wide(100) > 0 AS drained;
SELECT count(*) AS delivered, count(DISTINCT id) AS distinct_events FROM got;

-- A fetch in the transaction that wrote an event, serving that event's
-- slot (an earlier event of the same aggregate waits there): unless the
-- event shows in the fetch's snapshot (and is handed out there), the
-- batch's range keeps it, and the next fetch after the commit delivers
-- it: once either way.
TRUNCATE got;
SELECT eo_emit('bounds', 'account', 'own', 'Earlier', '{}') IS NOT NULL AS emitted;
BEGIN;
SELECT eo_emit('bounds', 'account', 'own', 'Written', '{}') AS own_id \gset
INSERT INTO got SELECT 0, f.slot, f.seq, f.id, f.lease_token
FROM eo_relay_fetch('bounds', 'g', 100, '1 minute', 4, false) f;
SELECT count(*) >= 1 AS served_in_the_writer FROM got;
SELECT eo_relay_ack_pages('bounds', 'g', array_agg(DISTINCT token)) >= 1 AS acked FROM got;
COMMIT;
SELECT drain_wide(100) > 0 AS drained;
SELECT count(*) AS own_event_delivered FROM got WHERE id = :'own_id';

SELECT eo_outbox_drop('bounds');
DROP FUNCTION drain_wide(int);
DROP TABLE got;
