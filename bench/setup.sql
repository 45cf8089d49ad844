-- bench/setup.sql -- the benchmark database (run once, as postgres, by run.sh).
-- The contenders run as bench_app, an ordinary role, as an application would.
SET client_min_messages = warning;
CREATE EXTENSION eo;
CREATE ROLE bench_app LOGIN;

-- The business data: one UPDATE of an account row per processed message.
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);

-- Hand-written idempotency table (contenders hand, hand_outbox, hand_pgq,
-- one_write).  created_at: any real table needs it to expire old keys.
CREATE TABLE processed (
    key        text PRIMARY KEY,
    status     text NOT NULL,
    result     jsonb,
    created_at timestamptz NOT NULL DEFAULT now());

-- The minimal form: the key alone.
CREATE TABLE processed_min (
    key        text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now());

-- The hand-written two-transaction (lease) pattern, with a fencing token.
CREATE SEQUENCE processed_lease_token_seq;
CREATE TABLE processed_lease (
    key              text PRIMARY KEY,
    status           text NOT NULL,
    result           jsonb,
    lease_token      bigint NOT NULL DEFAULT nextval('processed_lease_token_seq'),
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now());

-- A hand-written outbox with the columns of Debezium's outbox event router.
CREATE TABLE outbox (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregatetype text NOT NULL,
    aggregateid   text NOT NULL,
    type          text NOT NULL,
    payload       jsonb,
    created_at    timestamptz NOT NULL DEFAULT now());

GRANT SELECT, INSERT, UPDATE ON accounts, processed, processed_min, processed_lease, outbox
    TO bench_app;
GRANT USAGE ON SEQUENCE processed_lease_token_seq TO bench_app;
GRANT EXECUTE ON FUNCTION eo_claim, eo_complete, eo_fail, eo_extend, eo_status TO bench_app;

-- Rows in the tables whose names match a LIKE pattern (plain tables only,
-- so a partitioned parent and its partitions are not counted twice): how
-- run.sh counts the keys a contender stored, whatever eo's storage layout.
CREATE FUNCTION bench_count_rows(pattern text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    t regclass;
    n bigint := 0;
    c bigint;
BEGIN
    FOR t IN SELECT k.oid::regclass FROM pg_class k
              WHERE k.relkind = 'r' AND k.relname LIKE pattern
                AND k.relnamespace::regnamespace::text IN ('public', 'eo_internal')
    LOOP
        EXECUTE format('SELECT count(*) FROM %s', t) INTO c;
        n := n + c;
    END LOOP;
    RETURN n;
END $$;
