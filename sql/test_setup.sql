--
-- test_setup: runs first (Makefile REGRESS) and makes the helper every
-- later file uses for expected errors, eo_test_try (test/eo_test_try.sql).
-- To run one file alone: make installcheck REGRESS="test_setup claim".
--
\i test/eo_test_try.sql
