-- Outboxes: create, emit (eo_emit and plain INSERT), and one or more
-- consumer groups reading through the relay API: batches, pages, leases,
-- fencing tokens, redelivery.
SET client_min_messages = warning;

-- Runs a statement; shows its result or its SQLSTATE and message (lease
-- tokens depend on what ran before, so they are masked).
SELECT eo_outbox_create('orders', slots => 4);

-- Debezium's outbox-router columns, then what the relay needs.
SELECT column_name, data_type, is_nullable, column_default, is_identity
FROM information_schema.columns
WHERE table_name = 'orders' ORDER BY ordinal_position;
-- one index: the slot (hash of aggregateid modulo the slot count) and seq
SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'orders'::regclass;

-- Partitions were made ahead: today's and the next four days'.
SELECT count(*) AS partitions,
       bool_and(pg_get_expr(c.relpartbound, c.oid) LIKE 'FOR VALUES FROM%') AS ranges
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'orders'::regclass;
SELECT count(*) FROM orders WHERE false;  -- now() falls in a partition

SELECT name, relid, owner, mode, slots, channel, seq FROM eo_internal.eo_outboxes;

-- eo_emit returns the event's id.
SELECT eo_emit('orders', 'order', 'o1', 'Created', '{"n": 1}') AS id \gset
SELECT aggregatetype, aggregateid, type, payload, headers
FROM orders WHERE id = :'id';
SELECT eo_emit('orders', 'order', 'o1', 'Paid', '{"n": 2}', '{"trace": "t-1"}') IS NOT NULL AS emitted;

-- A plain INSERT (an ORM) works and gets the same treatment.
INSERT INTO orders (aggregatetype, aggregateid, type, payload)
VALUES ('order', 'o2', 'Created', '{"n": 3}');

-- Events of a transaction that rolls back are never delivered; a rolled
-- back savepoint takes its events with it.
BEGIN;
SELECT eo_emit('orders', 'order', 'o3', 'Lost', '{}') IS NOT NULL AS emitted;
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT eo_emit('orders', 'order', 'o4', 'Lost', '{}') IS NOT NULL AS emitted;
ROLLBACK TO SAVEPOINT s;
SELECT eo_emit('orders', 'order', 'o4', 'Kept', '{}') IS NOT NULL AS emitted;
COMMIT;

-- seq follows insertion.
SELECT aggregateid, type, seq, (hashtext(aggregateid) & 2147483647) % 4 AS slot
FROM orders ORDER BY seq;

SELECT eo_group_create('orders', 'billing');
SELECT eo_group_create('orders', 'audit');
SELECT outbox, grp, count(*) AS slots FROM eo_internal.eo_outbox_slots GROUP BY 1, 2 ORDER BY 2;

-- Fetch pages until the group is caught up, acknowledging each.  The
-- delivery log shows the order in which a relay saw the events.
CREATE TABLE delivered (n serial, grp text, token bigint, slot int,
                        aggregateid text, type text);
CREATE FUNCTION drain(g text, page int DEFAULT 100) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    t bigint;
    got int;
    total int := 0;
BEGIN
    LOOP
        INSERT INTO delivered (grp, token, slot, aggregateid, type)
        SELECT g, f.lease_token, f.slot, f.aggregateid, f.type
        FROM eo_relay_fetch('orders', g, page, '1 minute') f ORDER BY f.seq;
        GET DIAGNOSTICS got = ROW_COUNT;
        EXIT WHEN got = 0;
        SELECT max(token) INTO t FROM delivered WHERE grp = g;
        IF eo_relay_ack('orders', g, t) <> got THEN
            RAISE EXCEPTION 'ack did not cover the page';
        END IF;
        total := total + got;
    END LOOP;
    RETURN total;
END $$;

SELECT drain('billing');
SELECT slot, aggregateid, type FROM delivered WHERE grp = 'billing' ORDER BY n;
-- one page per slot that had events, each under its own token
SELECT count(DISTINCT token) AS pages, count(DISTINCT slot) AS slots
FROM delivered WHERE grp = 'billing';
-- caught up: nothing more, and no lease is held
SELECT count(*) FROM eo_relay_fetch('orders', 'billing');
SELECT outbox, consumer_group, slots, leased_slots, backlog, lag IS NULL AS no_lag,
       holds_retention
FROM eo_outbox_status ORDER BY consumer_group;

-- The other group has its own position: it still gets everything, here
-- one event per page.
SELECT drain('audit', 1);
SELECT count(*) AS pages, count(DISTINCT token) AS tokens
FROM delivered WHERE grp = 'audit';
-- per aggregate, the same order as billing saw
SELECT a.aggregateid, string_agg(a.type, ',' ORDER BY a.n) AS audit,
       (SELECT string_agg(b.type, ',' ORDER BY b.n) FROM delivered b
        WHERE b.grp = 'billing' AND b.aggregateid = a.aggregateid) AS billing
FROM delivered a WHERE a.grp = 'audit' GROUP BY 1 ORDER BY 1;

-- New events after the groups caught up.
SELECT eo_emit('orders', 'order', 'o1', 'Shipped', '{"n": 4}') IS NOT NULL AS emitted,
       eo_emit('orders', 'order', 'o1', 'Delivered', '{"n": 5}') IS NOT NULL AS emitted2;
SELECT backlog FROM eo_outbox_status WHERE consumer_group = 'billing';

-- Leases.  A page whose lease expires comes back, same events first,
-- under a newer token; the old token is then stale (55006).
SELECT lease_token AS t1, aggregateid, type
FROM eo_relay_fetch('orders', 'billing', 1, '100 ms') \gset
SELECT :'aggregateid' AS aggregateid, :'type' AS type;
SELECT leased_slots FROM eo_outbox_status WHERE consumer_group = 'billing';
-- while the lease is live, no other relay gets that slot
SELECT count(*) FROM eo_relay_fetch('orders', 'billing', 10, '1 minute');
SELECT pg_sleep(0.3);
SELECT lease_token AS t2, string_agg(aggregateid || ':' || type, ',' ORDER BY seq) AS page2
FROM eo_relay_fetch('orders', 'billing', 10, '1 minute') GROUP BY 1 \gset
SELECT :t2 > :t1 AS newer_token, :'page2' AS page;
SELECT eo_test_try(format('SELECT eo_relay_ack(''orders'', ''billing'', %s)', :t1));
SELECT eo_test_try(format('SELECT eo_relay_extend(''orders'', ''billing'', %s, ''1 minute'')', :t1));
SELECT eo_test_try(format('SELECT eo_relay_release(''orders'', ''billing'', %s)', :t1));
-- The new holder acknowledges both events (the redelivered page grew to
-- max_events); acknowledging again is harmless and counts nothing.
SELECT eo_relay_ack('orders', 'billing', :t2);
SELECT eo_relay_ack('orders', 'billing', :t2);
SELECT backlog FROM eo_outbox_status WHERE consumer_group = 'billing';

-- An expired lease that nobody took over yet can still be acknowledged.
SELECT eo_emit('orders', 'order', 'o2', 'Paid', '{}') IS NOT NULL AS emitted;
SELECT lease_token AS t3 FROM eo_relay_fetch('orders', 'billing', 10, '100 ms') \gset
SELECT pg_sleep(0.2);
SELECT eo_relay_ack('orders', 'billing', :t3);

-- Extend and release.
SELECT eo_emit('orders', 'order', 'o2', 'Shipped', '{}') IS NOT NULL AS emitted;
SELECT lease_token AS t4 FROM eo_relay_fetch('orders', 'billing', 10, '100 ms') \gset
SELECT eo_relay_extend('orders', 'billing', :t4, '1 minute') > now() + interval '50 seconds' AS extended;
SELECT pg_sleep(0.2);
SELECT count(*) FROM eo_relay_fetch('orders', 'billing', 10);  -- still held
SELECT eo_relay_release('orders', 'billing', :t4);
SELECT eo_test_try(format('SELECT eo_relay_ack(''orders'', ''billing'', %s)', :t4));
SELECT lease_token > :t4 AS newer_token, aggregateid, type
FROM eo_relay_fetch('orders', 'billing', 10) \gset
SELECT :'newer_token' AS newer_token, :'aggregateid' AS aggregateid, :'type' AS type;
SELECT lease_token AS t5 FROM eo_internal.eo_outbox_slots WHERE grp = 'billing' AND page_state = 'o' \gset
SELECT eo_relay_ack('orders', 'billing', :t5);

-- A page acknowledged in part (upto_seq): its events up to that seq are
-- done; the rest comes back first at the next fetch, under a new token.
SELECT count(eo_emit('orders', 'order', 'o3', 'P' || g, '{}')) AS emitted
FROM generate_series(1, 5) g;
CREATE TEMP TABLE part AS SELECT * FROM eo_relay_fetch('orders', 'billing', 10);
SELECT string_agg(type, ',' ORDER BY seq) AS page FROM part;
SELECT eo_relay_ack('orders', 'billing', (SELECT max(lease_token) FROM part),
                    (SELECT seq FROM part ORDER BY seq OFFSET 1 LIMIT 1)) AS acked_two;
-- (the page counts as released: its token acknowledges nothing more)
SELECT eo_test_try(format('SELECT eo_relay_ack(''orders'', ''billing'', %s)',
                          (SELECT max(lease_token) FROM part)));
SELECT string_agg(type, ',' ORDER BY seq) AS rest,
       count(DISTINCT lease_token) = 1 AND min(lease_token) > (SELECT max(lease_token) FROM part)
           AS new_token
FROM eo_relay_fetch('orders', 'billing', 10) \gset
SELECT :'rest' AS rest, :'new_token' AS new_token;
SELECT lease_token AS t6 FROM eo_internal.eo_outbox_slots WHERE grp = 'billing' AND page_state = 'o' \gset
-- below the page's first event: nothing is acknowledged, all comes back
SELECT eo_relay_ack('orders', 'billing', :t6, 0) AS acked_none;
SELECT lease_token AS t7, string_agg(type, ',' ORDER BY seq) AS again
FROM eo_relay_fetch('orders', 'billing', 10) GROUP BY 1 \gset
SELECT :'again' AS again;
SELECT eo_test_try(format('SELECT eo_relay_ack(''orders'', ''billing'', %s, NULL)', :t7));
-- past the page's end: the whole page
SELECT eo_relay_ack('orders', 'billing', :t7, 9223372036854775807) AS acked_all;
SELECT backlog FROM eo_outbox_status WHERE consumer_group = 'billing';
DROP TABLE part;

-- Several slots per fetch (eo_relay_fetch's fifth argument): one call
-- hands out the next events of up to that many free slots, max_events in
-- all, each slot's events under a token of their own, which acknowledges
-- that slot's part.
SELECT eo_group_create('orders', 'wide');
CREATE TABLE wide AS SELECT * FROM eo_relay_fetch('orders', 'wide', 1000, '1 minute', 4, false);
SELECT count(*) AS events, count(DISTINCT slot) AS slots, count(DISTINCT lease_token) AS tokens,
       (SELECT count(*) FROM (SELECT slot FROM wide GROUP BY slot
                              HAVING count(DISTINCT lease_token) = 1) x) AS slots_with_one_token,
       (SELECT count(*) FROM orders) AS in_outbox
FROM wide;
-- per slot in seq order, as one slot's page would be
SELECT bool_and(ordered) AS each_slot_in_seq_order
FROM (SELECT seq > coalesce(lag(seq) OVER (PARTITION BY slot ORDER BY ctid), 0) AS ordered
      FROM wide) x;
SELECT sum(eo_relay_ack('orders', 'wide', t)) AS acked
FROM (SELECT DISTINCT lease_token AS t FROM wide) x;
-- max_events bounds the whole call, `slots` the slots it takes
SELECT count(eo_emit('orders', 'order', 'o' || i, 'Again', '{}')) AS emitted
FROM generate_series(1, 6) i;
SELECT count(*) AS events, count(DISTINCT slot) AS slots
FROM eo_relay_fetch('orders', 'wide', 1, '1 minute', 4, true);
SELECT count(*) AS events, count(DISTINCT slot) AS slots
FROM eo_relay_fetch('orders', 'wide', 3, '1 minute', 2, true);
SELECT count(*) AS events, count(DISTINCT slot) AS slots
FROM eo_relay_fetch('orders', 'wide', 10, '1 minute', 1, true);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('orders', 'wide', 10, '1 minute', 0, false)$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('orders', 'wide', 10, '1 minute', NULL, false)$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_relay_fetch('orders', 'wide', 10, '1 minute', 1, NULL)$$);

-- eo_relay_status: per slot, the exact backlog and whether it is caught
-- up, ready, or leased (to this backend, here: the three fetches above
-- asked for release_on_disconnect, so the holder is recorded).  An empty
-- fetch cannot tell those apart.
SELECT slot, state, backlog, holder_pid = pg_backend_pid() AS mine,
       lease_expires_at > now() AS lease_live
FROM eo_relay_status('orders', 'wide') ORDER BY slot;
SELECT sum(backlog) AS backlog_wide,
       (SELECT backlog FROM eo_outbox_status WHERE consumer_group = 'wide') AS status_view
FROM eo_relay_status('orders', 'wide');

-- A fetch that finds nothing writes nothing: no transaction id is taken,
-- so there is no commit record to flush.
SELECT count(*) FROM eo_relay_fetch('orders', 'billing', 1000, '1 minute', 4, false) \gset drained_
BEGIN;
SELECT count(*) AS events FROM eo_relay_fetch('orders', 'billing', 1000, '1 minute', 4, false);
SELECT pg_current_xact_id_if_assigned() IS NULL AS nothing_written;
COMMIT;
SELECT eo_test_try($$SELECT eo_relay_status('orders', 'nope')$$);
SELECT eo_group_drop('orders', 'wide');
DROP TABLE wide;

-- eo_relay_ack_pages: the pages of several tokens (one fetch of several
-- slots) acknowledged whole in one call, all or nothing; a token given
-- again counts nothing, as a retried eo_relay_ack.
SELECT eo_group_create('orders', 'pages');
SELECT count(eo_emit('orders', 'order', 'p' || i, 'Paged', '{}')) AS emitted
FROM generate_series(1, 8) i;
CREATE TABLE pages AS SELECT * FROM eo_relay_fetch('orders', 'pages', 1000, '1 minute', 4, false);
SELECT count(*) = (SELECT count(*) FROM orders) AS every_event, count(DISTINCT lease_token) AS tokens
FROM pages;
SELECT eo_test_try(format('SELECT eo_relay_ack_pages(''orders'', ''pages'', %L)',
                          (SELECT array_agg(DISTINCT lease_token) || (max(lease_token) + 1000) FROM pages)));
SELECT count(*) AS pages_still_out FROM eo_internal.eo_outbox_slots
WHERE grp = 'pages' AND page_state = 'o';
-- one token per event: each page counted once
SELECT eo_relay_ack_pages('orders', 'pages', (SELECT array_agg(lease_token) FROM pages))
       = (SELECT count(*) FROM pages) AS all_acked;
SELECT eo_relay_ack_pages('orders', 'pages', (SELECT array_agg(DISTINCT lease_token) FROM pages)) AS again;
SELECT eo_relay_ack_pages('orders', 'pages', '{}') AS none;
SELECT eo_test_try($$SELECT eo_relay_ack_pages('orders', 'pages', NULL)$$);
SELECT eo_test_try($$SELECT eo_relay_ack_pages('orders', 'pages', '{1,NULL}')$$);
SELECT eo_test_try($$SELECT eo_relay_ack_pages('orders', 'nope', '{1}')$$);

-- eo_relay_wait right after acknowledging a page: at once (true) if the
-- fetch may have left events behind (its page stopped at max_events),
-- else asleep until its timeout (false here: nothing committed since).
SELECT count(eo_emit('orders', 'order', 'w' || i, 'Waited', '{}')) AS emitted
FROM generate_series(1, 3) i;
SELECT lease_token AS w1 FROM eo_relay_fetch('orders', 'pages', 1, '1 minute', 4, false) \gset
SELECT eo_relay_ack('orders', 'pages', :w1);
SELECT eo_relay_wait('orders', '5 s', 'pages', '0') AS fetch_again;
SELECT drain('pages') AS the_other_two;
-- every slot caught up; new events in two slots, fetched and acknowledged
SELECT count(eo_emit('orders', 'order', a, 'Waited', '{}')) AS emitted
FROM (VALUES ('o1'), ('o2')) v(a);
SELECT eo_relay_ack_pages('orders', 'pages', array_agg(DISTINCT lease_token)) AS acked
FROM eo_relay_fetch('orders', 'pages', 1000, '1 minute', 4, false);
SELECT eo_relay_wait('orders', '200 ms', 'pages', '0') AS fetch_again;
-- What eo_relay_wait knows of the last fetch is of that fetch's group: a
-- fetch of another group in between, which got everything, does not make
-- it sleep while this group has events left (true at once, not false
-- after the timeout).
SELECT eo_group_create('orders', 'pages_too');
SELECT eo_relay_ack_pages('orders', 'pages_too', array_agg(DISTINCT lease_token)) > 0 AS acked
FROM eo_relay_fetch('orders', 'pages_too', 100000, '1 minute', 4, false);
SELECT count(eo_emit('orders', 'order', 'x' || i, 'Waited', '{}')) AS emitted
FROM generate_series(1, 2) i;
SELECT lease_token AS x1 FROM eo_relay_fetch('orders', 'pages', 1, '1 minute', 4, false) \gset
SELECT eo_relay_ack_pages('orders', 'pages_too', array_agg(DISTINCT lease_token)) AS acked_two
FROM eo_relay_fetch('orders', 'pages_too', 1000, '1 minute', 4, false);
SELECT eo_relay_wait('orders', '1 s', 'pages', '0') AS fetch_again;
-- ... and each group's own last fetch counts: with both groups caught up
-- (and fetched last by pages_too), a wait for either sleeps to its
-- timeout (false), not "fetch now" over and over.
SELECT eo_relay_ack('orders', 'pages', :x1) AS acked_x1;
SELECT eo_relay_ack_pages('orders', 'pages', array_agg(DISTINCT lease_token)) AS acked_x2
FROM eo_relay_fetch('orders', 'pages', 1000, '1 minute', 4, false);
SELECT count(*) AS none FROM eo_relay_fetch('orders', 'pages', 1000, '1 minute', 4, false);
SELECT count(*) AS none_too FROM eo_relay_fetch('orders', 'pages_too', 1000, '1 minute', 4, false);
SELECT eo_relay_wait('orders', '200 ms', 'pages', '0') AS fetch_again;
SELECT eo_relay_wait('orders', '200 ms', 'pages_too', '0') AS fetch_again;
-- A fetch rolled back leaves its pages free again: the wait after it
-- answers "fetch now" (true), not asleep past them; so after a savepoint
-- rolled back around one.
SELECT count(eo_emit('orders', 'order', 'y1', 'Waited', '{}')) AS emitted;
BEGIN;
SELECT count(*) AS got FROM eo_relay_fetch('orders', 'pages', 1000, '1 minute', 4, false);
ROLLBACK;
SELECT eo_relay_wait('orders', '200 ms', 'pages', '0') AS fetch_again;
BEGIN;
SAVEPOINT s;
SELECT count(*) AS got FROM eo_relay_fetch('orders', 'pages', 1000, '1 minute', 4, false);
ROLLBACK TO SAVEPOINT s;
SELECT eo_relay_wait('orders', '200 ms', 'pages', '0') AS fetch_again;
COMMIT;
SELECT eo_relay_ack_pages('orders', 'pages', array_agg(DISTINCT lease_token)) AS acked_y1
FROM eo_relay_fetch('orders', 'pages', 1000, '1 minute', 4, false);
SELECT eo_group_drop('orders', 'pages_too');
SELECT eo_group_drop('orders', 'pages');
DROP TABLE pages;

-- A token this group never issued.
SELECT eo_test_try(format('SELECT eo_relay_ack(''orders'', ''billing'', %s)', :t5 + 1000));
SELECT eo_test_try(format('SELECT eo_relay_ack(''orders'', ''audit'', %s)', :t5));

-- Dropping a group forgets its positions; dropping the outbox drops the
-- table, its partitions and its groups.
SELECT eo_group_drop('orders', 'audit');
SELECT grp, count(*) FROM eo_internal.eo_outbox_slots GROUP BY 1;
SELECT eo_outbox_drop('orders');
SELECT to_regclass('orders') IS NULL AS table_gone,
       (SELECT count(*) FROM eo_internal.eo_outboxes) AS outboxes,
       (SELECT count(*) FROM eo_internal.eo_outbox_groups) AS groups,
       (SELECT count(*) FROM eo_internal.eo_outbox_slots) AS slots;
DROP FUNCTION drain(text, int);
DROP TABLE delivered;

-- eo_emit writes an event without SQL when the outbox is as eo made it
-- (no call of the seq default), and through its INSERT statement when
-- someone added a trigger (which then fires); both give the same row:
-- created_at now(), the writer's txid, seq after every earlier one.
SELECT eo_outbox_create('paths', slots => 1)::text;
CREATE TABLE fired (n int);
CREATE FUNCTION fire() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN INSERT INTO public.fired VALUES (1); RETURN NULL; END $$;
CREATE FUNCTION seq_default_calls() RETURNS bigint LANGUAGE sql
    AS $$ SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_xact_user_functions
          WHERE funcname = 'eo_outbox_next_seq' $$;
CREATE FUNCTION emitted_by(how text) RETURNS TABLE (path text, seq_default_calls bigint, same_row bool)
LANGUAGE plpgsql AS $$
DECLARE
    before int8 := (SELECT coalesce(max(seq), 0) FROM paths);
    calls int8 := seq_default_calls();
BEGIN
    PERFORM eo_emit('paths', 'order', how, how, '{"k": 1}');
    RETURN QUERY SELECT how, seq_default_calls() - calls,
        (SELECT p.created_at = now() AND p.txid = pg_current_xact_id() AND p.seq > before
                AND p.payload = '{"k": 1}' AND p.headers IS NULL
           FROM paths p WHERE p.aggregateid = how);
END $$;
SET track_functions = 'all';
BEGIN;
SELECT * FROM emitted_by('direct');
COMMIT;
CREATE TRIGGER someone_elses BEFORE INSERT ON paths
    FOR EACH STATEMENT EXECUTE FUNCTION fire();
BEGIN;
SELECT * FROM emitted_by('statement');
COMMIT;
DROP TRIGGER someone_elses ON paths;
BEGIN;
SELECT * FROM emitted_by('direct again');
COMMIT;
RESET track_functions;
SELECT count(*) AS trigger_fired FROM fired;
SELECT count(*) AS events, count(DISTINCT seq) AS seqs FROM paths;
SELECT eo_outbox_drop('paths');
DROP FUNCTION emitted_by(text), seq_default_calls(), fire();
DROP TABLE fired;

-- Group ids (the high bits of a group's tokens) come from a sequence that
-- cycles, skipping ids in use: a refused creation uses none up, groups
-- created and dropped over and over cannot exhaust them (an outbox's owner
-- could otherwise stop every role's eo_group_create), and no lock is
-- held: creators of groups do not wait for each other.
SELECT eo_outbox_create('ids', slots => 1)::text;
SELECT eo_group_create('ids', 'a');
SELECT eo_test_try($$SELECT eo_group_create('ids', 'a')$$);
SELECT eo_group_create('ids', 'b');
SELECT name, id - (SELECT min(id) FROM eo_internal.eo_outbox_groups WHERE outbox = 'ids') AS rel_id
FROM eo_internal.eo_outbox_groups WHERE outbox = 'ids' ORDER BY name;
-- ids in use are skipped ...
SELECT setval('eo_internal.eo_outbox_group_id_seq',
              (SELECT id FROM eo_internal.eo_outbox_groups WHERE outbox = 'ids' AND name = 'a'),
              false) IS NOT NULL AS back_to_a;
SELECT eo_group_create('ids', 'c');
SELECT (SELECT id FROM eo_internal.eo_outbox_groups WHERE outbox = 'ids' AND name = 'c')
     - (SELECT id FROM eo_internal.eo_outbox_groups WHERE outbox = 'ids' AND name = 'b') AS c_after_b;
-- ... and at the end of the range they start again from 1
SELECT setval('eo_internal.eo_outbox_group_id_seq', 8190, true) IS NOT NULL AS near_the_end;
SELECT eo_group_create('ids', 'd');
SELECT eo_group_create('ids', 'e');
SELECT (SELECT id FROM eo_internal.eo_outbox_groups WHERE outbox = 'ids' AND name = 'd') AS d_id,
       (SELECT id FROM eo_internal.eo_outbox_groups WHERE outbox = 'ids' AND name = 'e') < 8191 AS e_wrapped,
       (SELECT count(*) = count(DISTINCT id) FROM eo_internal.eo_outbox_groups) AS ids_distinct;
-- The highest group's tokens stay below 2^53 (exact as a JavaScript number
-- or a double in a JSON parser); since 0.3.0 their high bits are the
-- epoch (fencing.c), not the group's id.
SELECT eo_emit('ids', 'order', '1', 'created', '{}') IS NOT NULL AS emitted;
SELECT lease_token < 2::numeric ^ 53 AS below_2_53, lease_token >> 40 AS epoch
FROM eo_relay_fetch('ids', 'd');
-- Ids are unique per outbox: a role that uses up all 8,191 of its own
-- outbox's ids cannot stop another outbox's groups.
DO $$
BEGIN
    FOR i IN 1 .. 8200 LOOP
        BEGIN
            PERFORM eo_group_create('ids', 'hog' || i);
        EXCEPTION WHEN program_limit_exceeded THEN
            EXIT;
        END;
    END LOOP;
END $$;
SELECT eo_test_try($$SELECT eo_group_create('ids', 'one too many')$$);
SELECT count(*) AS groups_of_ids FROM eo_internal.eo_outbox_groups WHERE outbox = 'ids';
SELECT eo_outbox_create('ids2', slots => 1)::text;
SELECT eo_group_create('ids2', 'mine');
SELECT eo_outbox_drop('ids2');
SELECT eo_outbox_drop('ids');
