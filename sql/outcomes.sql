--
-- outcomes: what a failure means, by its SQLSTATE.
-- eo_fail(..., sqlstate, final) records a final failure (the key is
-- rejected: every later claim raises the same error) or a retryable one
-- (as before); eo.final_sqlstates says which by default.
--
CREATE TABLE oc_orders (id int PRIMARY KEY, amount int NOT NULL CHECK (amount > 0));
CREATE TABLE oc_lines (order_id int NOT NULL REFERENCES oc_orders);

-- The error a claim raises, with its DETAIL (the time masked).
CREATE FUNCTION oc_claim_error(k text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    st text;
    msg text;
    det text;
BEGIN
    PERFORM eo_claim(k);
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
    RETURN st || ': ' || msg || ' / ' ||
        regexp_replace(det, ' at [^;]+;', ' at <time>;');
END
$$;

SHOW eo.final_sqlstates;

-- A transaction-mode attempt fails on a CHECK constraint (23514), rolls
-- back, and the caller records the failure: final by default.
BEGIN;
SELECT status FROM eo_claim('oc:check');
SELECT eo_test_try($$INSERT INTO oc_orders VALUES (1, -5)$$);
ROLLBACK;
SELECT eo_fail('oc:check', 'new row for relation "oc_orders" violates check constraint "oc_orders_amount_check"',
               sqlstate => '23514');
-- Every redelivery gets the same error, not a new attempt.
SELECT oc_claim_error('oc:check');
SELECT oc_claim_error('oc:check');
SELECT state, result, attempts, last_error FROM eo_status('oc:check');
SELECT count(*) FROM oc_orders;

-- The same from PL/pgSQL, in the claiming transaction: the work fails in
-- a subtransaction and eo_fail records it with the error's SQLSTATE.
DO $$
BEGIN
    PERFORM eo_claim('oc:plpgsql');
    BEGIN
        INSERT INTO oc_orders VALUES (2, 10), (2, 20);
    EXCEPTION WHEN OTHERS THEN
        PERFORM eo_fail('oc:plpgsql', SQLERRM, sqlstate => SQLSTATE);
    END;
END
$$;
SELECT oc_claim_error('oc:plpgsql');
SELECT state, result->>'sqlstate' AS sqlstate, attempts FROM eo_status('oc:plpgsql');

-- Not final by default: a timeout, a serialization failure, a foreign key
-- whose row may arrive later.  The key may be claimed again.
SELECT eo_fail('oc:timeout', 'canceling statement due to statement timeout', sqlstate => '57014');
SELECT eo_fail('oc:serialization', 'could not serialize access', sqlstate => '40001');
BEGIN;
SELECT status FROM eo_claim('oc:fk');
SELECT eo_test_try($$INSERT INTO oc_lines VALUES (99)$$);
ROLLBACK;
SELECT eo_fail('oc:fk', 'insert or update on table "oc_lines" violates foreign key constraint', sqlstate => '23503');
SELECT k, (SELECT status FROM eo_claim(k)) AS status, (SELECT attempts FROM eo_status(k)) AS attempts
FROM unnest(ARRAY['oc:timeout', 'oc:serialization', 'oc:fk']) AS k;

-- Without a SQLSTATE, as before: a failed attempt.
SELECT eo_fail('oc:plain', 'upstream down');
SELECT state FROM eo_status('oc:plain');

-- The caller's word wins over the setting.
SELECT eo_fail('oc:unique-retry', 'duplicate key value', sqlstate => '23505', final => false);
SELECT eo_fail('oc:fk-final', 'no such order', sqlstate => '23503', final => true);
SELECT eo_fail('oc:no-state', 'x', final => false);
SELECT k, s.state FROM unnest(ARRAY['oc:unique-retry', 'oc:fk-final', 'oc:no-state']) AS k,
     LATERAL eo_status(k) s ORDER BY k;
SELECT eo_test_try($$SELECT eo_fail('oc:final-no-state', 'x', final => true)$$);

-- Some SQLSTATEs are never final: no error (00, 01, 02), or one about the
-- transaction, the connection or the server (08, 40, 53, 57, 58, F0, XX,
-- P0004).  Recorded as failed attempts, never replayed; final => true with
-- one of them is refused, and nothing is recorded then.
SELECT k, eo_fail(k, 'x', sqlstate => c) AS result
FROM (VALUES ('oc:never-40001', '40001'), ('oc:never-57014', '57014'), ('oc:never-08006', '08006'),
             ('oc:never-XX000', 'XX000'), ('oc:never-P0004', 'P0004'), ('oc:never-02000', '02000'),
             ('oc:never-53100', '53100')) AS v(k, c);
SELECT eo_test_try($$SELECT eo_fail('oc:never-final', 'x', sqlstate => '40001', final => true)$$);
SELECT eo_test_try($$SELECT eo_fail('oc:never-final', 'x', sqlstate => 'XX000', final => true)$$);
SELECT eo_test_try($$SELECT eo_fail('oc:never-final', 'x', sqlstate => '00000', final => true)$$);
SELECT count(*) FROM eo_status('oc:never-final');

-- The setting, per session (or role): RAISE EXCEPTION's P0001 made final.
SET eo.final_sqlstates = 'P0001';
SELECT eo_fail('oc:raise', 'insufficient funds', sqlstate => 'P0001');
SELECT eo_fail('oc:bad-number', 'invalid input syntax for type integer', sqlstate => '22P02');
SELECT oc_claim_error('oc:raise');
SELECT state FROM eo_status('oc:bad-number');
SET eo.final_sqlstates = '';
SELECT eo_fail('oc:nothing-final', 'x', sqlstate => '23505');
RESET eo.final_sqlstates;
SELECT eo_test_try($$SET eo.final_sqlstates = '23, 235'$$);
SELECT eo_test_try($$SET eo.final_sqlstates = 'ab'$$);
SELECT eo_test_try($$SET eo.final_sqlstates = '22;23'$$);
SELECT eo_test_try($$SET eo.final_sqlstates = '22, 40'$$);
SELECT eo_test_try($$SET eo.final_sqlstates = 'XX000'$$);
SET eo.final_sqlstates = 'P0';   -- class P0 may be final; P0004 within it never is
SELECT eo_fail('oc:p0004', 'assertion failed', sqlstate => 'P0004');
RESET eo.final_sqlstates;
SHOW eo.final_sqlstates;
-- Superuser-only, as eo.max_attempts: whether a failure is replayed for
-- good does not depend on which session recorded it.
CREATE ROLE regress_eo_outcomes NOLOGIN;
SET ROLE regress_eo_outcomes;
SELECT eo_test_try($$SET eo.final_sqlstates = '22'$$);
RESET ROLE;
DROP ROLE regress_eo_outcomes;
RESET eo.final_sqlstates;

-- Malformed SQLSTATEs are refused, and change nothing.
SELECT eo_test_try($$SELECT eo_fail('oc:bad', 'x', sqlstate => '2350')$$);
SELECT eo_test_try($$SELECT eo_fail('oc:bad', 'x', sqlstate => '23s05')$$);
SELECT eo_test_try($$SELECT eo_fail('oc:bad', 'x', sqlstate => '235050')$$);
SELECT count(*) FROM eo_status('oc:bad');

-- Lease mode: the holder records a final failure with its token; the
-- token cannot complete the key afterwards.
SELECT lease_token AS token FROM eo_claim('oc:lease', lease => '1 hour') \gset
SELECT eo_fail('oc:lease', 'card declined', lease_token => :token, sqlstate => '22023', final => true);
SELECT eo_test_try(format($$SELECT eo_complete('oc:lease', '{}', lease_token => %s)$$, :token));
SELECT eo_test_try($$SELECT eo_complete('oc:lease', '{}')$$);
SELECT oc_claim_error('oc:lease');

-- A rejected key stays as it is: eo_fail again changes nothing; a claim
-- with another fingerprint is still a fingerprint conflict first.
SELECT eo_fail('oc:check', 'again', sqlstate => '57014');
SELECT state, attempts, last_error FROM eo_status('oc:check');
BEGIN;
SELECT status FROM eo_claim('oc:fp', 'fp-1');
SELECT eo_fail('oc:fp', 'bad amount', sqlstate => '22003');
COMMIT;
SELECT eo_test_try($$SELECT status FROM eo_claim('oc:fp', 'fp-2')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('oc:fp', 'fp-1')$$);

-- A long message is kept cut, as last_error is.
SELECT eo_fail('oc:long', repeat('é', 3000), sqlstate => '22000');
SELECT octet_length(result->>'message') <= 4096 AS cut, result->>'message' = last_error AS same
FROM eo_status('oc:long');

-- A result edited by hand into something eo never writes is replayed as
-- P0001 'failed', never as junk.
DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN SELECT relid FROM eo_internal.eo_generations WHERE state IN ('c', 'o') LOOP
        EXECUTE format($q$UPDATE %s SET result = '["\u0020\u0001xyz", "Zmessage"]' WHERE key = 'oc:raise'$q$, t);
        EXECUTE format($q$UPDATE %s SET result = '{"sqlstate": "ab~~z", "message": "m"}' WHERE key = 'oc:lease'$q$, t);
        EXECUTE format($q$UPDATE %s SET result = '{"sqlstate": "XX000", "message": "m"}' WHERE key = 'oc:check'$q$, t);
    END LOOP;
END
$$;
SELECT k, regexp_replace(oc_claim_error(k), ' / .*', '') AS error
FROM unnest(ARRAY['oc:raise', 'oc:lease', 'oc:check']) AS k;

DROP FUNCTION oc_claim_error(text);
DROP TABLE oc_lines, oc_orders;
