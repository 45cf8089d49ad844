-- 8. eo claim + the change; COMMIT alone marks the key done (no result).
BEGIN;
SELECT (status = 'claimed')::int AS fresh FROM eo_claim(:k::text) \gset
\if :fresh
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
\endif
END;
