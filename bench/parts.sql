-- bench/parts.sql -- tables and procedures for the parts of run.sh that are
-- not pgbench contenders: relay consumption, retention, lease reclaim.
-- Run once, as postgres, into the benchmark database (after setup.sql).
-- Everything here runs inside the server as plpgsql procedures that COMMIT
-- after every step, so each step is its own transaction, as it would be
-- for a client, without a client round trip per step.
SET client_min_messages = warning;

-- ---------------------------------------------------------------------------
-- Relay consumption.  The same events are loaded three ways, in
-- transactions of `chunk` events, then drained by one consumer.

-- The hand-written relay's table: Debezium columns, a bigint id for
-- ordering, a processed flag, and a partial index on the pending rows (the
-- index a careful hand-written relay has; without it every batch would
-- step over all processed rows again).
CREATE TABLE relay_outbox (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregatetype text NOT NULL,
    aggregateid   text NOT NULL,
    type          text NOT NULL,
    payload       jsonb,
    headers       jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    processed     boolean NOT NULL DEFAULT false);
CREATE INDEX relay_outbox_pending ON relay_outbox (id) WHERE NOT processed;

-- Load n events: kind 'eo' into the eo outbox table `target` (a plain
-- INSERT of the Debezium columns, as an ORM would), 'hand' into
-- relay_outbox, 'pgq' through pgq.insert_event into queue `target`, with
-- pgq.ticker() after each committed chunk (a pgqd-style ticker: one tick,
-- hence one batch, per chunk).  The same events each time: 1000
-- aggregates, a small jsonb payload.
CREATE PROCEDURE bench_relay_load(kind text, target text, n int, chunk int)
LANGUAGE plpgsql AS $$
DECLARE
    i int := 0;
BEGIN
    WHILE i < n LOOP
        IF kind = 'eo' THEN
            EXECUTE format('INSERT INTO %I (aggregatetype, aggregateid, type, payload)
                            SELECT ''account'', (g %% 1000)::text, ''BalanceChanged'',
                                   jsonb_build_object(''key'', g, ''amount'', 100)
                              FROM generate_series($1, $2) g', target)
                USING i + 1, least(i + chunk, n);
        ELSIF kind = 'hand' THEN
            INSERT INTO relay_outbox (aggregatetype, aggregateid, type, payload)
            SELECT 'account', (g % 1000)::text, 'BalanceChanged',
                   jsonb_build_object('key', g, 'amount', 100)
              FROM generate_series(i + 1, least(i + chunk, n)) g;
        ELSIF kind = 'pgq' THEN
            PERFORM pgq.insert_event(target, 'BalanceChanged',
                                     jsonb_build_object('key', g, 'amount', 100)::text,
                                     'account', (g % 1000)::text, NULL, NULL)
               FROM generate_series(i + 1, least(i + chunk, n)) g;
        ELSE
            RAISE EXCEPTION 'unknown kind %', kind;
        END IF;
        COMMIT;
        IF kind = 'pgq' THEN
            PERFORM pgq.ticker();
            COMMIT;
        END IF;
        i := i + chunk;
    END LOOP;
END $$;

-- eo's relay: eo_relay_fetch a page, read it, eo_relay_ack it, commit;
-- until a fetch returns nothing.
-- (t_start, t_end: epoch seconds, for relays running side by side.)
CREATE PROCEDURE bench_relay_drain_eo(outbox text, grp text, page int,
                                      slots int DEFAULT 1,
                                      INOUT events bigint DEFAULT 0,
                                      INOUT batches int DEFAULT 0,
                                      INOUT secs float8 DEFAULT 0,
                                      INOUT t_start float8 DEFAULT 0,
                                      INOUT t_end float8 DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    n int;
    tok bigint;
    toks bigint[];
BEGIN
    LOOP
        IF slots = 1 THEN
            SELECT count(*), max(lease_token) INTO n, tok
              FROM eo_relay_fetch(outbox, grp, page, '1 min');
            EXIT WHEN n = 0;
            PERFORM eo_relay_ack(outbox, grp, tok);
        ELSE
            -- several slots per fetch: a token per slot, each acknowledged
            SELECT count(*), array_agg(DISTINCT lease_token) INTO n, toks
              FROM eo_relay_fetch(outbox, grp, page, '1 min', slots, false);
            EXIT WHEN n = 0;
            PERFORM eo_relay_ack(outbox, grp, t) FROM unnest(toks) t;
        END IF;
        events := events + n;
        batches := batches + 1;
        COMMIT;
    END LOOP;
    COMMIT;
    secs := extract(epoch FROM clock_timestamp() - t0);
    t_start := extract(epoch FROM t0);
    t_end := extract(epoch FROM clock_timestamp());
END $$;

-- PgQ batch consumption: next_batch, get_batch_events, finish_batch,
-- commit; until next_batch has no batch.
CREATE PROCEDURE bench_relay_drain_pgq(queue text, consumer text,
                                       INOUT events bigint DEFAULT 0,
                                       INOUT batches int DEFAULT 0,
                                       INOUT secs float8 DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    bid bigint;
    n int;
BEGIN
    LOOP
        bid := pgq.next_batch(queue, consumer);
        EXIT WHEN bid IS NULL;
        SELECT count(*) INTO n FROM pgq.get_batch_events(bid);
        PERFORM pgq.finish_batch(bid);
        events := events + n;
        batches := batches + 1;
        COMMIT;
    END LOOP;
    COMMIT;
    secs := extract(epoch FROM clock_timestamp() - t0);
END $$;

-- The hand-written relay: SELECT a batch FOR UPDATE SKIP LOCKED, UPDATE it
-- to processed, commit; until the SELECT finds nothing.
CREATE PROCEDURE bench_relay_drain_hand(batch int,
                                        INOUT events bigint DEFAULT 0,
                                        INOUT batches int DEFAULT 0,
                                        INOUT secs float8 DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    ids bigint[];
    n int;
BEGIN
    LOOP
        SELECT array_agg(b.id), count(*) INTO ids, n
          FROM (SELECT id, aggregatetype, aggregateid, type, payload, headers, created_at
                  FROM relay_outbox WHERE NOT processed
                 ORDER BY id LIMIT batch FOR UPDATE SKIP LOCKED) b;
        EXIT WHEN n = 0;
        UPDATE relay_outbox SET processed = true WHERE id = ANY (ids);
        events := events + n;
        batches := batches + 1;
        COMMIT;
    END LOOP;
    COMMIT;
    secs := extract(epoch FROM clock_timestamp() - t0);
END $$;

-- ---------------------------------------------------------------------------
-- Retention: the partman contender's table (the same columns as
-- `processed`; a primary key on a partitioned table must contain the
-- partition key, so it is (key, created_at) and keys are unique only per
-- partition).  run.sh hands it to pg_partman.
CREATE TABLE processed_pm (
    key        text NOT NULL,
    status     text NOT NULL,
    result     jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, created_at)) PARTITION BY RANGE (created_at);
GRANT SELECT, INSERT, UPDATE ON processed_pm TO bench_app;

-- ---------------------------------------------------------------------------
-- Lease reclaim: claim n keys with a lease of `lease`, one every
-- `spread_ms` (each claim committed at once, as lease mode requires), never
-- complete them, and every `poll_ms` read every key not yet seen failed
-- with eo_status.  Per key: claimed_at, the lease expiry eo_claim
-- returned, reclaimed_at (updated_at of the reclaimed row: the reclaiming
-- pass's clock) and seen_at (the poll that first saw 'failed').
CREATE UNLOGGED TABLE reclaim_obs (
    k            text PRIMARY KEY,
    claimed_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    reclaimed_at timestamptz,
    seen_at      timestamptz,
    state        text);

CREATE PROCEDURE bench_reclaim(n int, spread_ms int, lease interval, poll_ms int,
                               timeout_s int)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz;
    i int := 0;
    st text;
    exp timestamptz;
BEGIN
    TRUNCATE reclaim_obs;
    COMMIT;
    t0 := clock_timestamp();
    LOOP
        WHILE i < n AND clock_timestamp() >= t0 + make_interval(secs => i * spread_ms / 1000.0) LOOP
            i := i + 1;
            SELECT c.status, c.lease_expires_at INTO st, exp
              FROM eo_claim('reclaim:' || i || ':' || t0, NULL, lease) c;
            IF st <> 'claimed' THEN
                RAISE EXCEPTION 'eo_claim returned % for a fresh key', st;
            END IF;
            INSERT INTO reclaim_obs (k, claimed_at, expires_at)
            VALUES ('reclaim:' || i || ':' || t0, clock_timestamp(), exp);
            COMMIT;
        END LOOP;
        WITH s AS (SELECT o.k, x.state, x.updated_at
                     FROM reclaim_obs o, LATERAL eo_status(o.k) x
                    WHERE o.seen_at IS NULL)
        UPDATE reclaim_obs o SET seen_at = clock_timestamp(), reclaimed_at = s.updated_at,
                                 state = s.state
          FROM s WHERE s.k = o.k AND s.state <> 'processing';
        COMMIT;
        EXIT WHEN i = n AND NOT EXISTS (SELECT FROM reclaim_obs WHERE seen_at IS NULL);
        EXIT WHEN clock_timestamp() > t0 + make_interval(secs => n * spread_ms / 1000.0 + timeout_s);
        PERFORM pg_sleep(poll_ms / 1000.0);
    END LOOP;
    COMMIT;
END $$;
