--
-- session_pin: eo_session_pin(names, settings) sets each named setting
-- that reads otherwise, for the session, with the caller's rights, and
-- says how many it set (eo_nats apply puts its session's settings back
-- with it at the start of every transaction).
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
REVOKE EXECUTE ON FUNCTION eo_test_try(text) FROM regress_eo_pinner;
DROP ROLE regress_eo_pinner;
RESET DateStyle;
RESET statement_timeout;
RESET extra_float_digits;
RESET TimeZone;
