--
-- eo_test_try(stmt): the helper the regression files use for expected
-- errors.  It runs one statement in a subtransaction and shows either 'ok'
-- (with the first output column) or the SQLSTATE and message of the error,
-- with lease tokens and outbox partition names (which depend on the clock)
-- masked, and a setting's range shown without the units PostgreSQL 17 and
-- 18 add to it ("1 s .. 30 s").  One copy, included (\i, from the top of the tree) by every file
-- that makes a database of its own, and by test_setup for the others.
--
CREATE FUNCTION eo_test_try(stmt text) RETURNS text
LANGUAGE plpgsql AS $fn$
DECLARE
    r text;
BEGIN
    EXECUTE stmt INTO r;
    RETURN 'ok' || coalesce(': ' || nullif(r, ''), '');
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' ||
        regexp_replace(regexp_replace(regexp_replace(SQLERRM, 'lease token [0-9]+', 'lease token N'),
                                      '_p[0-9]{8}_[0-9]{6}', '_pYYYYMMDD_HHMMSS'),
                       '\((-?[0-9]+)( [a-zA-Z]+)? \.\. (-?[0-9]+)( [a-zA-Z]+)?\)', '(\1 .. \3)');
END
$fn$;
