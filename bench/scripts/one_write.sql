-- 6. one-write limit: the hand-written pattern cut to one write.  The DONE
-- row with its result is inserted at once, then the change, then a no-op
-- where eo_complete would be; a duplicate reads the stored result, as in
-- the hand-written pattern.
BEGIN;
WITH i AS (INSERT INTO processed (key, status, result)
           VALUES (:k::text, 'DONE', jsonb_build_object('charge', :k::text, 'amount', 100))
           ON CONFLICT DO NOTHING RETURNING 1)
SELECT count(*) AS fresh FROM i \gset
\if :fresh
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
SELECT 1;
\else
SELECT result FROM processed WHERE key = :k::text;
\endif
END;
