-- 7s. eo in a scope: eo's script with scope => 'bench' on the
-- claim and the completion; reset_state makes the scope, owned by bench_app.
BEGIN;
SELECT (status = 'claimed')::int AS fresh, result AS res FROM eo_claim(:k::text, scope => 'bench') \gset
\if :fresh
UPDATE accounts SET balance = balance + 1 WHERE id = :acct;
SELECT eo_complete(:k::text, jsonb_build_object('charge', :k::text, 'amount', 100), scope => 'bench');
\endif
END;
