-- eo with an emitted event, against hand_outbox and hand_pgq.  The outbox
-- has the default notify => false (the doorbell wakes relays, no NOTIFY).
-- run.sh enables it only if the installed eo has eo_emit and
-- eo_outbox_create.
BEGIN;
SELECT (status = 'claimed')::int AS fresh, result AS res FROM eo_claim(:k::text) \gset
\if :fresh
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
SELECT eo_emit('bench_outbox', 'account', :acct::text, 'BalanceChanged',
               jsonb_build_object('key', :k::text, 'amount', 100));
SELECT eo_complete(:k::text, jsonb_build_object('charge', :k::text, 'amount', 100));
\endif
END;
