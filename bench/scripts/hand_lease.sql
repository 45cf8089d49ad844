-- 10. hand-written two-transaction pattern: a PROCESSING row with a lease
-- expiry and a fencing token committed first (autocommit), then the change
-- + UPDATE to DONE (guarded by the token) in a second transaction; a
-- duplicate reads the stored status and result.
WITH i AS (INSERT INTO processed_lease (key, status, lease_expires_at)
           VALUES (:k::text, 'PROCESSING', now() + interval '30 seconds')
           ON CONFLICT DO NOTHING RETURNING lease_token)
SELECT count(*) AS fresh, coalesce(max(lease_token), 0) AS tok FROM i \gset
\if :fresh
BEGIN;
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
UPDATE processed_lease SET status = 'DONE', lease_expires_at = NULL,
       result = jsonb_build_object('charge', :k::text, 'amount', 100)
 WHERE key = :k::text AND lease_token = :tok::bigint;
END;
\else
SELECT status, result FROM processed_lease WHERE key = :k::text;
\endif
