-- 1. floor: the business change alone, no deduplication (every delivery,
-- duplicates included, applies the change).
BEGIN;
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
END;
