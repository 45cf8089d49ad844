-- Batch consumer: one transaction claims 20 pool keys (some twice: a batch
-- that carries the same message twice must do its work once) and 4 hot keys
-- (new keys other clients race for, see txn.sql): 24 claims, more than
-- eo's 16 deferred claims per transaction, so the first claims hold key
-- locks without rows while the later ones write their rows at once, racing
-- the single-key consumers.  Keys in ascending order, as a batch consumer
-- should take them (two batches that claim shared keys in opposite orders
-- deadlock, as with any unique index).  One batch in ten rolls back.
\set fail random(1, 10)
BEGIN;
SELECT stress_batch(ARRAY(SELECT k FROM (
    SELECT 1 + floor(random() * :pool)::int AS k FROM generate_series(1, 20)
    UNION ALL
    SELECT (:pool + nextval('stress_hot') / 8)::int FROM generate_series(1, 4)) s
  ORDER BY k));
\if :fail = 1
ROLLBACK;
\else
COMMIT;
\endif
