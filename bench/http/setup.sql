-- bench/http/setup.sql -- the database of bench/http.sh. The applications
-- connect as bench_app, an ordinary role, as an application would.
SET client_min_messages = warning;
CREATE EXTENSION eo;
CREATE ROLE bench_app LOGIN;

-- The handler's business write: one order per request.
CREATE TABLE orders (
    id bigserial PRIMARY KEY,
    item text NOT NULL,
    qty int NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The hand-written contender's processed-keys table, as the Idempotency-Key
-- packages keep it outside the handler's transaction: one row per (caller,
-- key), inserted 'started' before the handler, updated with the response
-- after it; the request's hash to answer 422 for another request with the
-- same key.
CREATE TABLE idempotency_keys (
    id bigserial PRIMARY KEY,
    caller text NOT NULL,
    key text NOT NULL,
    request_hash text NOT NULL,
    state text NOT NULL DEFAULT 'started',
    response_status int,
    response_headers jsonb,
    response_body text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX idempotency_keys_caller_key ON idempotency_keys (caller, key);

GRANT SELECT, INSERT, UPDATE ON orders, idempotency_keys TO bench_app;
GRANT USAGE ON SEQUENCE orders_id_seq, idempotency_keys_id_seq TO bench_app;
GRANT EXECUTE ON FUNCTION eo_claim, eo_complete, eo_fail, eo_extend, eo_status, eo_recovery_point TO bench_app;
