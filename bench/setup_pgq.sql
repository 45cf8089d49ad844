-- bench/setup_pgq.sql -- PgQ for the hand_pgq contender (run.sh runs it
-- when the pgq extension is available).
SET client_min_messages = warning;
CREATE EXTENSION pgq;
SELECT pgq.create_queue('bench');
GRANT pgq_writer TO bench_app;
