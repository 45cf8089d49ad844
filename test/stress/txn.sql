-- Transaction mode, the common case: claim, side effect and eo_complete
-- commit together.  One delivery in ten "fails" and rolls back, so its key
-- must be claimable again by a later delivery.
\set k random(1, :pool)
\set fail random(1, 10)
BEGIN;
SELECT status = 'claimed' AS claimed FROM eo_claim('stress:' || :k::int) \gset
\if :claimed
INSERT INTO stress_ledger AS l VALUES ('stress:' || :k::int, 1)
    ON CONFLICT (key) DO UPDATE SET n = l.n + 1;
SELECT eo_complete('stress:' || :k::int, jsonb_build_object('mode', 'txn', 'k', :k::int));
\endif
\if :fail = 1
ROLLBACK;
\else
COMMIT;
\endif
