--
-- statement_names: in a session that has loaded eo, PREPARE, EXECUTE and
-- DEALLOCATE refuse prepared statement names beginning "eo_nats_", so that
-- code run in eo_nats's session (a trigger) cannot replace a statement
-- eo_nats prepared, nor have it analysed again under its own settings;
-- eo_statement_names_reserved() says so (and loads eo).
--
SELECT eo_statement_names_reserved() AS reserved;
SELECT eo_test_try('PREPARE eo_nats_1 AS SELECT 1');
SELECT eo_test_try('DEALLOCATE eo_nats_1');
SELECT eo_test_try('DEALLOCATE PREPARE eo_nats_claim');
-- from PL/pgSQL too, as a trigger would
SELECT eo_test_try($try$DO $d$ BEGIN EXECUTE 'PREPARE eo_nats_2 (text) AS SELECT $1'; END $d$$try$);
-- EXECUTE, also where EXPLAIN and CREATE TABLE AS carry it (refused
-- before the name is looked up: none exists here, which would be 26000)
SELECT eo_test_try('EXECUTE eo_nats_1');
SELECT eo_test_try('EXECUTE eo_nats_claim(''k'', NULL)');
SELECT eo_test_try('EXPLAIN EXECUTE eo_nats_1');
SELECT eo_test_try('EXPLAIN (ANALYZE, COSTS OFF) EXECUTE eo_nats_1');
SELECT eo_test_try('CREATE TEMP TABLE t_exec AS EXECUTE eo_nats_1');
SELECT eo_test_try('EXPLAIN CREATE TEMP TABLE t_exec AS EXECUTE eo_nats_1');
SELECT eo_test_try($try$DO $d$ BEGIN EXECUTE 'EXPLAIN EXECUTE eo_nats_3'; END $d$$try$);
-- other names, and DEALLOCATE ALL, as ever (DEALLOCATE ALL only makes
-- eo_nats's next use of its names fail, and eo_nats connects again)
PREPARE other_1 AS SELECT 1;
PREPARE "EO_NATS_1" AS SELECT 2;
EXECUTE "EO_NATS_1";
EXPLAIN (COSTS OFF) EXECUTE other_1;
CREATE TEMP TABLE t_other AS EXECUTE other_1;
SELECT * FROM t_other;
SELECT name FROM pg_prepared_statements ORDER BY name;
DEALLOCATE ALL;
SELECT count(*) AS left FROM pg_prepared_statements;
-- it reads nothing: every role may execute it
SELECT has_function_privilege('public', 'eo_statement_names_reserved()', 'EXECUTE') AS may;
