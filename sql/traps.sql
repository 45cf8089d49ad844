--
-- traps: the mistakes a newcomer makes, each answered with a message that
-- names the mistake and the fix (issue 35, items 5, 6 and 8).
--
-- eo_test_hint(stmt): like eo_test_try, with the error's detail and hint.
CREATE FUNCTION eo_test_hint(stmt text) RETURNS TABLE (sqlstate text, message text, detail text, hint text)
LANGUAGE plpgsql AS $fn$
DECLARE
    m text; d text; h text; s text;
BEGIN
    EXECUTE stmt;
    RETURN QUERY SELECT 'ok', NULL::text, NULL::text, NULL::text;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    RETURN QUERY SELECT s, regexp_replace(m, 'lease token [0-9]+', 'lease token N'), d, h;
END
$fn$;
\pset expanded on
-- eo_complete twice in one transaction: the error says so, and that the
-- key is not done (the error rolls the claim back too)
BEGIN;
SELECT status FROM eo_claim('traps:twice');
SELECT eo_complete('traps:twice', '{"n": 1}');
SELECT * FROM eo_test_hint($$SELECT eo_complete('traps:twice', '{"n": 2}')$$);
SELECT eo_complete('traps:twice', '{"n": 2}');
ROLLBACK;
SELECT count(*) AS known FROM eo_status('traps:twice');
-- the same with the row already written (a second key claimed after it)
BEGIN;
SELECT status FROM eo_claim('traps:twice-2');
SELECT status FROM eo_claim('traps:twice-3');
SELECT eo_complete('traps:twice-2', '{"n": 1}');
SELECT eo_complete('traps:twice-3', '{"n": 1}');
SELECT * FROM eo_test_hint($$SELECT eo_complete('traps:twice-2', '{"n": 2}')$$);
ROLLBACK;
-- claim and complete as two autocommit statements: the claim's commit
-- made the key done; the hint says both belong in one transaction, or
-- that a lease is for work across transactions
SELECT status FROM eo_claim('traps:autocommit');
SELECT * FROM eo_test_hint($$SELECT eo_complete('traps:autocommit', '{"ok": true}')$$);
-- completed, then completed again in a later transaction
BEGIN;
SELECT status FROM eo_claim('traps:later');
SELECT eo_complete('traps:later', NULL);
COMMIT;
SELECT * FROM eo_test_hint($$SELECT eo_complete('traps:later', NULL)$$);
-- a lease holder that completes twice (a retry after a lost answer)
SELECT lease_token AS tok FROM eo_claim('traps:lease-twice', lease => '1 minute') \gset
SELECT eo_complete('traps:lease-twice', '{"ok": true}', :tok);
SELECT * FROM eo_test_hint(format($$SELECT eo_complete('traps:lease-twice', NULL, %s)$$, :tok));
-- a stale token: the hint says what the old holder must do
SET eo.max_attempts = 5;
SELECT lease_token AS old FROM eo_claim('traps:stale', lease => '1 minute') \gset
SELECT eo_fail('traps:stale', 'timeout', :old);
SELECT status FROM eo_claim('traps:stale', lease => '1 minute');
SELECT * FROM eo_test_hint(format($$SELECT eo_complete('traps:stale', NULL, %s)$$, :old));
RESET eo.max_attempts;
-- a lease passed as the second argument is the fingerprint: warned of,
-- the claim goes on in transaction mode
SELECT status, lease_token FROM eo_claim('traps:positional', '30 seconds');
SELECT status FROM eo_claim('traps:positional-iso', 'PT30S');
-- fingerprints that are no interval with a unit: no warning
SELECT status FROM eo_claim('traps:fp-1', 'd41d8cd98f00b204e9800998ecf8427e');
SELECT status FROM eo_claim('traps:fp-2', '42');
SELECT status FROM eo_claim('traps:fp-3', '12:30');
SELECT status FROM eo_claim('traps:fp-4', '3 apples');
SELECT status FROM eo_claim('traps:fp-5', 'infinity');
-- named, the lease is a lease
SELECT status, lease_token IS NOT NULL AS leased FROM eo_claim('traps:named', lease => '30 seconds');
-- an outbox named with a schema: the hint says outbox names are bare
SELECT * FROM eo_test_hint($$SELECT eo_emit('public.no_such_outbox', 'a', '1', 't', '{}')$$);
SELECT * FROM eo_test_hint($$SELECT eo_emit('no_such_outbox', 'a', '1', 't', '{}')$$);
\pset expanded off
-- eo_keys() granted to an operator's role works (it runs as the owner)
CREATE ROLE regress_eo_ops;
GRANT EXECUTE ON FUNCTION eo_keys() TO regress_eo_ops;
GRANT EXECUTE ON FUNCTION eo_test_try(text) TO regress_eo_ops;
SET ROLE regress_eo_ops;
SELECT count(*) > 0 AS sees_keys FROM eo_keys() WHERE key LIKE 'traps:%';
RESET ROLE;
REVOKE EXECUTE ON FUNCTION eo_keys() FROM regress_eo_ops;
SET ROLE regress_eo_ops;
SELECT eo_test_try('SELECT count(*) FROM eo_keys()');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION eo_test_try(text) FROM regress_eo_ops;
DROP ROLE regress_eo_ops;
DROP FUNCTION eo_test_hint(text);
