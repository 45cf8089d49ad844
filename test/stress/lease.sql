-- Lease mode: the claim commits on its own (autocommit) before the side
-- effect, and the completion must carry the fencing token.  The same key pool
-- as txn.sql: a transaction-mode claimer that meets a live lease gets 'busy'.
\set k random(1, :pool)
SELECT status = 'claimed' AS claimed, lease_token AS tok
    FROM eo_claim('stress:' || :k::int, lease => '30 seconds') \gset
\if :claimed
INSERT INTO stress_ledger AS l VALUES ('stress:' || :k::int, 1)
    ON CONFLICT (key) DO UPDATE SET n = l.n + 1;
SELECT eo_complete('stress:' || :k::int, jsonb_build_object('mode', 'lease', 'k', :k::int),
                   lease_token => :tok::bigint);
\endif
