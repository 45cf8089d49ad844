-- 5. hand-written pattern + an event through PgQ's pgq.insert_event.
BEGIN;
WITH i AS (INSERT INTO processed (key, status) VALUES (:k::text, 'PROCESSING')
           ON CONFLICT DO NOTHING RETURNING 1)
SELECT count(*) AS fresh FROM i \gset
\if :fresh
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
SELECT pgq.insert_event('bench', 'BalanceChanged', jsonb_build_object('key', :k::text, 'amount', 100)::text);
UPDATE processed SET status = 'DONE', result = jsonb_build_object('charge', :k::text, 'amount', 100)
 WHERE key = :k::text;
\else
SELECT result FROM processed WHERE key = :k::text;
\endif
END;
