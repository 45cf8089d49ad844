-- 4. hand-written pattern + an event row in an indexed outbox table
-- (Debezium outbox columns, uuid primary key).
BEGIN;
WITH i AS (INSERT INTO processed (key, status) VALUES (:k::text, 'PROCESSING')
           ON CONFLICT DO NOTHING RETURNING 1)
SELECT count(*) AS fresh FROM i \gset
\if :fresh
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
VALUES ('account', :acct::text, 'BalanceChanged', jsonb_build_object('key', :k::text, 'amount', 100));
UPDATE processed SET status = 'DONE', result = jsonb_build_object('charge', :k::text, 'amount', 100)
 WHERE key = :k::text;
\else
SELECT result FROM processed WHERE key = :k::text;
\endif
END;
