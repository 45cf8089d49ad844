--
-- session_pin: eo_session_pin(names, settings) sets each named setting
-- that reads otherwise, for the session, with the caller's rights, and
-- says how many it set.  eo_session_pin_at_commit(names, settings) does
-- the same, and drops every LISTEN, when the transaction commits, after
-- all code in it has run (eo_nats apply begins each transaction with it).
--
SET DateStyle = 'SQL, DMY';
SET statement_timeout = '5s';
SET extra_float_digits = 1;
-- two differ, one reads the same, one NULL is passed over, an unknown one too
SELECT eo_session_pin('{DateStyle,statement_timeout,extra_float_digits,lock_timeout,eo_no.such_setting}',
                      ARRAY['ISO, MDY', '5s', '3', NULL, 'x']) AS set;
SELECT current_setting('DateStyle') AS datestyle, current_setting('statement_timeout') AS statement_timeout,
       current_setting('extra_float_digits') AS extra_float_digits, current_setting('lock_timeout') AS lock_timeout;
-- nothing differs any more: nothing set
SELECT eo_session_pin('{DateStyle,statement_timeout,extra_float_digits}', '{"ISO, MDY",5s,3}') AS set;
-- for the session, not the transaction (set_config(..., false))
BEGIN;
SELECT eo_session_pin('{TimeZone}', '{Asia/Seoul}') AS set;
COMMIT;
SELECT current_setting('TimeZone') AS timezone;
-- a rolled-back transaction takes it back, as it does set_config's
BEGIN;
SELECT eo_session_pin('{TimeZone}', '{UTC}') AS set;
ROLLBACK;
SELECT current_setting('TimeZone') AS timezone;
-- the caller's rights: a role that may not set a setting is refused, as by SET
CREATE ROLE regress_eo_pinner;
GRANT EXECUTE ON FUNCTION eo_test_try(text) TO regress_eo_pinner;
SET ROLE regress_eo_pinner;
SELECT eo_test_try($$SELECT eo_session_pin('{log_statement}', '{all}')$$);
SELECT eo_test_try($$SELECT eo_session_pin('{work_mem}', '{8MB}')$$);
SELECT current_user, current_setting('work_mem') AS work_mem;
RESET ROLE;
-- like set_config, every role may execute it
SELECT has_function_privilege('regress_eo_pinner', 'eo_session_pin(text[], text[])', 'EXECUTE') AS may;
-- bad input: a clear error with its errcode
SELECT eo_test_try($$SELECT eo_session_pin('{DateStyle,TimeZone}', '{ISO}')$$);
SELECT eo_test_try($$SELECT eo_session_pin('{{DateStyle}}', '{{ISO}}')$$);
SELECT eo_test_try($$SELECT eo_session_pin(ARRAY[NULL::text], '{ISO}')$$);
SELECT eo_test_try($$SELECT eo_session_pin('{DateStyle}', '{nonsense}')$$);
SELECT eo_session_pin(NULL, '{}') IS NULL AS strict, eo_session_pin('{}', '{}') AS none;

-- eo_session_pin_at_commit: nothing is set at the call; at COMMIT, after
-- the deferred triggers, what they set (LOCAL too) is pinned, and their
-- LISTEN never takes effect
CREATE TABLE at_commit_t (n int);
CREATE FUNCTION at_commit_unsettle() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE 'deferred trigger fired for %', NEW.n;
  PERFORM set_config('synchronous_commit', 'off', true), set_config('DateStyle', 'German', false);
  EXECUTE 'LISTEN at_commit_channel';
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER at_commit_unsettle AFTER INSERT ON at_commit_t DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION at_commit_unsettle();
BEGIN;
SELECT eo_session_pin_at_commit('{synchronous_commit,DateStyle}', '{on,"ISO, MDY"}');
SET LOCAL DateStyle = 'Postgres';
INSERT INTO at_commit_t VALUES (1);
SELECT current_setting('DateStyle') AS datestyle_before_commit;
COMMIT;
SELECT current_setting('synchronous_commit') AS sync, current_setting('DateStyle') AS datestyle,
       (SELECT count(*) FROM pg_listening_channels()) AS listening;
-- a LISTEN committed before is dropped too
LISTEN at_commit_channel;
BEGIN;
SELECT eo_session_pin_at_commit('{}', '{}');
COMMIT;
SELECT count(*) AS listening FROM pg_listening_channels();
-- a rollback does nothing (and takes the transaction's own changes back)
BEGIN;
SELECT eo_session_pin_at_commit('{DateStyle}', '{German}');
SET DateStyle = 'SQL, DMY';
ROLLBACK;
SELECT current_setting('DateStyle') AS datestyle;
-- a second call in the transaction (code run after the first, a trigger)
-- is refused: what the first asked for cannot be replaced
BEGIN;
SELECT eo_session_pin_at_commit('{TimeZone}', '{Asia/Seoul}');
SELECT eo_test_try($$SELECT eo_session_pin_at_commit('{synchronous_commit}', '{off}')$$);
COMMIT;
SELECT current_setting('synchronous_commit') AS sync, current_setting('TimeZone') AS timezone;
-- a setting set for the session, then LOCAL to the value given, reads the
-- same at COMMIT but would go back to the session's value after it: set too
BEGIN;
SELECT eo_session_pin_at_commit('{TimeZone}', '{UTC}');
SET TimeZone = 'Asia/Tokyo';
SET LOCAL TimeZone = 'UTC';
COMMIT;
SELECT current_setting('TimeZone') AS timezone;
-- so does eo_session_pin, and it says so
BEGIN;
SET TimeZone = 'Asia/Tokyo';
SET LOCAL TimeZone = 'UTC';
SELECT eo_session_pin('{TimeZone}', '{UTC}') AS set;
COMMIT;
SELECT current_setting('TimeZone') AS timezone;
SET TimeZone = 'Asia/Seoul';
-- a deferred trigger's error comes at COMMIT, as without it: nothing is pinned
CREATE FUNCTION at_commit_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'refused %', NEW.n USING ERRCODE = 'check_violation';
END $$;
CREATE CONSTRAINT TRIGGER at_commit_refuse AFTER INSERT ON at_commit_t DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION at_commit_refuse();
BEGIN;
SELECT eo_session_pin_at_commit('{TimeZone}', '{UTC}');
INSERT INTO at_commit_t VALUES (2);
COMMIT;
SELECT count(*) AS rows_kept, current_setting('TimeZone') AS timezone FROM at_commit_t;
DROP TABLE at_commit_t;
DROP FUNCTION at_commit_unsettle(), at_commit_refuse();
-- a cancel the transaction's own code sent its backend (which would end a
-- wait for synchronous standbys at once, the commit not replicated) fails
-- the COMMIT
CREATE TABLE at_commit_c (n int);
CREATE FUNCTION at_commit_selfcancel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- in its last expression: no statement of its own after it takes the cancel
  RETURN CASE WHEN pg_cancel_backend(pg_backend_pid()) THEN NULL END;
END $$;
CREATE CONSTRAINT TRIGGER at_commit_selfcancel AFTER INSERT ON at_commit_c DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION at_commit_selfcancel();
BEGIN;
SELECT eo_session_pin_at_commit('{}', '{}');
INSERT INTO at_commit_c VALUES (1);
\set VERBOSITY terse
COMMIT;
\set VERBOSITY default
SELECT count(*) AS committed FROM at_commit_c;
DROP TABLE at_commit_c;
DROP FUNCTION at_commit_selfcancel();
-- an old name of a setting (sort_mem is work_mem) is set as the new one is
BEGIN;
SET work_mem = '64MB';
SET LOCAL work_mem = '4MB';
SELECT eo_session_pin('{sort_mem}', '{4MB}') AS set;
COMMIT;
SELECT current_setting('work_mem') AS work_mem;
RESET work_mem;
-- the caller's rights at COMMIT, as eo_session_pin's now; every role may execute it
SET ROLE regress_eo_pinner;
BEGIN;
SELECT eo_session_pin_at_commit('{log_statement}', '{all}');
COMMIT;
RESET ROLE;
-- ... the rights it had at the call, whoever the user is at COMMIT
BEGIN;
SET LOCAL ROLE regress_eo_pinner;
SELECT eo_session_pin_at_commit('{session_replication_role}', '{replica}');
RESET ROLE;
COMMIT;
SELECT current_setting('session_replication_role') AS session_replication_role;
-- refused within a SECURITY DEFINER function: what it sets would outlive
-- the function, for its caller
CREATE FUNCTION at_commit_definer() RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
  PERFORM eo_session_pin_at_commit('{session_replication_role}', '{replica}');
END $$;
ALTER FUNCTION at_commit_definer() OWNER TO regress_eo_pinner;
SELECT eo_test_try('SELECT at_commit_definer()');
DROP FUNCTION at_commit_definer();
SELECT has_function_privilege('regress_eo_pinner', 'eo_session_pin_at_commit(text[], text[])', 'EXECUTE') AS may;
-- bad input is refused at the call, not at COMMIT
SELECT eo_test_try($$SELECT eo_session_pin_at_commit('{DateStyle,TimeZone}', '{ISO}')$$);
SELECT eo_test_try($$SELECT eo_session_pin_at_commit(ARRAY[NULL::text], '{ISO}')$$);
SELECT eo_session_pin_at_commit(NULL, '{}') IS NULL AS strict;
REVOKE EXECUTE ON FUNCTION eo_test_try(text) FROM regress_eo_pinner;
DROP ROLE regress_eo_pinner;
RESET DateStyle;
RESET statement_timeout;
RESET extra_float_digits;
RESET TimeZone;
