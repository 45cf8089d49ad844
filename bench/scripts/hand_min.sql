-- 3. minimal hand-written: the key alone (no status, no result), the change.
BEGIN;
WITH i AS (INSERT INTO processed_min (key) VALUES (:k::text)
           ON CONFLICT DO NOTHING RETURNING 1)
SELECT count(*) AS fresh FROM i \gset
\if :fresh
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
\endif
END;
