-- 2. hand-written pattern: PROCESSING row, the change, UPDATE to DONE with
-- the result; a duplicate reads the stored result.  One transaction.
BEGIN;
WITH i AS (INSERT INTO processed (key, status) VALUES (:k::text, 'PROCESSING')
           ON CONFLICT DO NOTHING RETURNING 1)
SELECT count(*) AS fresh FROM i \gset
\if :fresh
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
UPDATE processed SET status = 'DONE', result = jsonb_build_object('charge', :k::text, 'amount', 100)
 WHERE key = :k::text;
\else
SELECT result FROM processed WHERE key = :k::text;
\endif
END;
