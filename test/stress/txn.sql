-- Transaction mode, the common case: claim, side effect and eo_complete
-- commit together.  One delivery in ten "fails" and rolls back, so its key
-- must be claimable again by a later delivery.
-- Half the deliveries go to the fixed pool, half to "hot" keys: consecutive
-- values of a sequence map eight at a time to one new key, so each new key
-- is delivered to several clients at nearly the same moment (racing claims).
\set hot random(0, 1)
\if :hot
SELECT :pool + nextval('stress_hot') / 8 AS k \gset
\else
\set k random(1, :pool)
\endif
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
