-- eo as in eo.sql, run with eo.track_counts = off (run.sh sets it for the
-- role): the same work without the eo_metrics counters, to show their cost.
-- eo: claim, the change, complete with the result, in one transaction;
-- a duplicate gets the stored result from eo_claim and changes nothing.
BEGIN;
SELECT (status = 'claimed')::int AS fresh, result AS res FROM eo_claim(:k::text) \gset
\if :fresh
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
SELECT eo_complete(:k::text, jsonb_build_object('charge', :k::text, 'amount', 100));
\endif
END;
