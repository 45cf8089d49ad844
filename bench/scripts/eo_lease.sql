-- 9. eo lease mode: the claim is its own (autocommit) transaction; then the
-- change + eo_complete with the fencing token in a second transaction.
SELECT (status = 'claimed')::int AS fresh, coalesce(lease_token, 0) AS tok, result AS res
  FROM eo_claim(:k::text, NULL, interval '30 seconds') \gset
\if :fresh
BEGIN;
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
SELECT eo_complete(:k::text, jsonb_build_object('charge', :k::text, 'amount', 100), :tok::bigint);
END;
\endif
