--
-- scopes: one namespace of keys per consumer or endpoint.
-- A key is unique per (key, scope); a scope belongs to a role, and so do
-- the keys claimed in it; keys without a scope are as before.
--
CREATE ROLE regress_eo_billing NOLOGIN;
CREATE ROLE regress_eo_billing_worker NOLOGIN IN ROLE regress_eo_billing;
CREATE ROLE regress_eo_shipping NOLOGIN;
CREATE ROLE regress_eo_scope_admin NOLOGIN;
GRANT EXECUTE ON FUNCTION
    eo_claim(text, text, interval, text),
    eo_complete(text, jsonb, bigint, text),
    eo_fail(text, text, bigint, interval, text, text, boolean),
    eo_extend(text, bigint, interval, text),
    eo_status(text, text)
TO regress_eo_billing, regress_eo_shipping;
GRANT EXECUTE ON FUNCTION eo_scope_create(text, text), eo_scope_drop(text)
TO regress_eo_billing, regress_eo_shipping, regress_eo_scope_admin;

-- Nothing is granted to PUBLIC.
SELECT has_function_privilege('public', 'eo_scope_create(text, text)', 'EXECUTE') AS create_public,
       has_function_privilege('public', 'eo_scope_drop(text)', 'EXECUTE') AS drop_public,
       has_table_privilege('public', 'eo_scopes', 'SELECT') AS view_public;

-- A role makes scopes for itself, or for a role it is a member of.
SET ROLE regress_eo_billing;
SELECT eo_scope_create('billing');
SELECT eo_test_try($$SELECT eo_scope_create('billing')$$);
SELECT eo_test_try($$SELECT eo_scope_create('stolen', 'regress_eo_shipping')$$);
RESET ROLE;
SET ROLE regress_eo_shipping;
SELECT eo_scope_create('shipping');
RESET ROLE;
SET ROLE regress_eo_billing_worker;
SELECT eo_scope_create('billing-retries', 'regress_eo_billing');
RESET ROLE;
SELECT name, owner FROM eo_scopes ORDER BY name;

-- Bad names.
SELECT eo_test_try($$SELECT eo_scope_create(NULL)$$);
SELECT eo_test_try($$SELECT eo_scope_create('')$$);
SELECT eo_test_try($$SELECT eo_scope_create(repeat('s', 64))$$);
SELECT eo_test_try($$SELECT eo_scope_create(repeat('s', 63))$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('k', scope => '')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('k', scope => 'no-such-scope')$$);

-- The same event id, claimed by two consumers, each in its own scope, and
-- without a scope: three keys, each claimed once.
SET ROLE regress_eo_billing;
BEGIN;
SELECT status FROM eo_claim('evt-1', scope => 'billing');
SELECT eo_complete('evt-1', '{"charged": 100}', scope => 'billing');
COMMIT;
SELECT status, result FROM eo_claim('evt-1', scope => 'billing');
RESET ROLE;
SET ROLE regress_eo_shipping;
BEGIN;
SELECT status FROM eo_claim('evt-1', scope => 'shipping');
SELECT eo_complete('evt-1', '{"shipped": true}', scope => 'shipping');
COMMIT;
SELECT status, result FROM eo_claim('evt-1', scope => 'shipping');
SELECT status, result FROM eo_claim('evt-1');
SELECT status, result FROM eo_claim('evt-1');
RESET ROLE;
SELECT state, result FROM eo_status('evt-1', scope => 'billing');
SELECT state, result FROM eo_status('evt-1', scope => 'shipping');
SELECT state, result FROM eo_status('evt-1');

-- Privileges are the scope's: shipping cannot claim, complete or read in
-- billing's scope, nor drop it.
SET ROLE regress_eo_shipping;
SELECT eo_test_try($$SELECT status FROM eo_claim('evt-2', scope => 'billing')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_status('evt-1', scope => 'billing')$$);
SELECT eo_test_try($$SELECT eo_complete('evt-1', '{}', scope => 'billing')$$);
SELECT eo_test_try($$SELECT eo_fail('evt-1', 'x', scope => 'billing')$$);
SELECT eo_test_try($$SELECT eo_extend('evt-1', 1, '1 min', scope => 'billing')$$);
SELECT eo_test_try($$SELECT eo_scope_drop('billing')$$);
RESET ROLE;

-- Keys in a scope belong to the scope's role: any member may finish what
-- another member started.  A lease taken by the worker role is completed
-- by billing itself.
SET ROLE regress_eo_billing_worker;
SELECT status, attempts, lease_token AS token FROM eo_claim('evt-3', lease => '1 hour', scope => 'billing') \gset
SELECT :'status' AS status, :attempts AS attempts;
RESET ROLE;
SET ROLE regress_eo_billing;
SELECT eo_complete('evt-3', '"done by billing"', lease_token => :token, scope => 'billing');
SELECT state, result FROM eo_status('evt-3', scope => 'billing');
RESET ROLE;
SELECT k.key, k.scope <> 0 AS scoped, k.owner FROM eo_keys() k
WHERE k.key IN ('evt-1', 'evt-3') ORDER BY k.key, k.owner::text;

-- Fingerprints, failures and retries work per scope.
SET ROLE regress_eo_billing;
BEGIN;
SELECT status FROM eo_claim('evt-4', 'fp-a', scope => 'billing');
COMMIT;
SELECT eo_test_try($$SELECT status FROM eo_claim('evt-4', 'fp-b', scope => 'billing')$$);
SELECT eo_fail('evt-5', 'declined', scope => 'billing');
SELECT state, attempts, last_error FROM eo_status('evt-5', scope => 'billing');
SELECT count(*) FROM eo_status('evt-5');
SELECT status, attempts FROM eo_claim('evt-5', scope => 'billing');
RESET ROLE;

-- Two scopes in one transaction, each with its own deferred claim of the
-- same key (pending.c tells them apart).
SET ROLE regress_eo_billing;
BEGIN;
SELECT status FROM eo_claim('evt-6', scope => 'billing');
SELECT status FROM eo_claim('evt-6', scope => 'billing-retries');
SELECT status FROM eo_claim('evt-6', scope => 'billing');
SELECT eo_complete('evt-6', '"b"', scope => 'billing');
SELECT eo_complete('evt-6', '"r"', scope => 'billing-retries');
COMMIT;
SELECT result FROM eo_status('evt-6', scope => 'billing');
SELECT result FROM eo_status('evt-6', scope => 'billing-retries');
RESET ROLE;

-- Dropping a scope: its keys can no longer be reached, and a scope made
-- again with the same name starts empty.
SET ROLE regress_eo_billing;
SELECT eo_scope_drop('billing-retries');
SELECT eo_test_try($$SELECT status FROM eo_claim('evt-6', scope => 'billing-retries')$$);
SELECT eo_test_try($$SELECT eo_scope_drop('billing-retries')$$);
SELECT eo_scope_create('billing-retries');
SELECT status FROM eo_claim('evt-6', scope => 'billing-retries');
RESET ROLE;

-- An administrator who may create scopes still gives them only to roles
-- it is a member of.
SET ROLE regress_eo_scope_admin;
SELECT eo_test_try($$SELECT eo_scope_create('admin-made', 'regress_eo_billing')$$);
RESET ROLE;

-- Owners are given by name; a role that does not exist is 42704.  A role
-- that is a NOINHERIT member of the owner cannot create (nor use) it.
SELECT eo_test_try($$SELECT eo_scope_create('ghost-owned', 'regress_eo_no_such_role')$$);
CREATE ROLE regress_eo_billing_noinherit NOLOGIN NOINHERIT IN ROLE regress_eo_billing;
GRANT EXECUTE ON FUNCTION eo_scope_create(text, text) TO regress_eo_billing_noinherit;
SET ROLE regress_eo_billing_noinherit;
SELECT eo_test_try($$SELECT eo_scope_create('noinherit', 'regress_eo_billing')$$);
RESET ROLE;

-- A name already taken uses no id up.
SELECT last_value AS before FROM eo_internal.eo_scope_id_seq \gset
SELECT eo_test_try($$SELECT eo_scope_create('billing')$$);
SELECT eo_test_try($$SELECT eo_scope_create('billing')$$);
SELECT last_value = :before AS no_id_used FROM eo_internal.eo_scope_id_seq;

-- A text overload in a schema searched later does not take the call: the
-- owner is text in eo's own signature too (an untyped literal would
-- prefer text over regrole, whatever the schema order).
CREATE SCHEMA regress_eo_later;
CREATE FUNCTION regress_eo_later.eo_scope_create(name text, owner text) RETURNS void
LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'hijacked'; END$$;
CREATE FUNCTION regress_eo_later.eo_group_create(outbox text, consumer_group text,
    start_at text DEFAULT 'beginning', owner text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'hijacked'; END$$;
SET search_path = public, regress_eo_later;
SELECT eo_scope_create('not-hijacked', 'regress_eo_billing');
SELECT eo_outbox_create('scope_ob') IS NOT NULL AS made;
SELECT eo_group_create('scope_ob', 'g', owner => 'regress_eo_billing');
RESET search_path;
SELECT eo_outbox_drop('scope_ob');
DROP SCHEMA regress_eo_later CASCADE;
