--
-- list_keys: eo_list_keys shows a role the keys it may act on (its own and
-- those of roles it has the privileges of, as eo_redrive_dead acts on
-- them), in one state and scope, bounded; nothing of other roles' keys.
--
CREATE ROLE regress_eo_lk_alice;
CREATE ROLE regress_eo_lk_bob;
CREATE ROLE regress_eo_lk_lead IN ROLE regress_eo_lk_alice;
GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text), eo_fail(text, text, bigint, interval, text, text, boolean),
      eo_list_keys(text, text, text, int), eo_scope_create(text, text)
   TO regress_eo_lk_alice, regress_eo_lk_bob, regress_eo_lk_lead;
GRANT EXECUTE ON FUNCTION eo_test_try(text) TO regress_eo_lk_alice, regress_eo_lk_bob, regress_eo_lk_lead;
SET eo.max_attempts = 1;
SET ROLE regress_eo_lk_alice;
SELECT eo_fail('lk:a1', 'card declined');
SELECT eo_fail('lk:a2', 'timeout');
SELECT status FROM eo_claim('lk:a3', lease => '1 hour');
SELECT eo_scope_create('lk_scope');
SELECT eo_fail('lk:s1', 'in a scope', scope => 'lk_scope');
SET ROLE regress_eo_lk_bob;
SELECT eo_fail('lk:b1', 'bob''s');
-- bob sees his dead key only
SELECT key, state, attempts, last_error FROM eo_list_keys('dead') WHERE key LIKE 'lk:%';
-- and not alice's scope
SELECT eo_test_try($$SELECT count(*) FROM eo_list_keys('dead', 'lk_scope')$$);
SET ROLE regress_eo_lk_alice;
SELECT key, state, attempts, last_error FROM eo_list_keys('dead') WHERE key LIKE 'lk:%' ORDER BY key;
SELECT key, state, lease_expires_at > now() AS leased FROM eo_list_keys('processing') WHERE key LIKE 'lk:%';
SELECT key, last_error FROM eo_list_keys('dead', 'lk_scope');
-- a prefix, and a bound
SELECT key FROM eo_list_keys('dead', key_prefix => 'lk:a2');
SELECT count(*) FROM eo_list_keys('dead', key_prefix => 'lk:', max_rows => 1);
-- the lead role is a member of alice: it sees hers, not bob's
SET ROLE regress_eo_lk_lead;
SELECT key FROM eo_list_keys('dead') WHERE key LIKE 'lk:%' ORDER BY key;
RESET ROLE;
-- bad input
SELECT eo_test_try($$SELECT count(*) FROM eo_list_keys('gone')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_list_keys(NULL)$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_list_keys('dead', max_rows => 0)$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_list_keys('dead', max_rows => 10001)$$);
-- not granted to PUBLIC
CREATE ROLE regress_eo_lk_nobody;
GRANT EXECUTE ON FUNCTION eo_test_try(text) TO regress_eo_lk_nobody;
SET ROLE regress_eo_lk_nobody;
SELECT eo_test_try($$SELECT count(*) FROM eo_list_keys('dead')$$);
RESET ROLE;
RESET eo.max_attempts;
REVOKE EXECUTE ON FUNCTION eo_test_try(text) FROM regress_eo_lk_nobody;
DROP ROLE regress_eo_lk_nobody;
