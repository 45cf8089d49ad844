-- 8b. eo_noresult with the claim written as a field of the call in the
-- select list (no FunctionScan; docs/performance.md, "The cheapest way to
-- call eo_claim"): one column, so one call.
BEGIN;
SELECT ((eo_claim(:k::text)).status = 'claimed')::int AS fresh \gset
\if :fresh
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
\endif
END;
