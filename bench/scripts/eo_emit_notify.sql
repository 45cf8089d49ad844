-- eo with an emitted event into an outbox made with notify => true: one
-- NOTIFY per transaction at commit, for relays that LISTEN.  Otherwise
-- the same as eo_emit.sql (whose outbox has the default, notify => false:
-- idle relays are woken by eo's doorbell, eo_relay_wait).
BEGIN;
SELECT (status = 'claimed')::int AS fresh, result AS res FROM eo_claim(:k::text) \gset
\if :fresh
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
SELECT eo_emit('bench_outbox_notify', 'account', :acct::text, 'BalanceChanged',
               jsonb_build_object('key', :k::text, 'amount', 100));
SELECT eo_complete(:k::text, jsonb_build_object('charge', :k::text, 'amount', 100));
\endif
END;
