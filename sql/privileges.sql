--
-- privileges: nothing is granted to PUBLIC; a key belongs to the role that
-- claimed it, and only that role and roles with its privileges may use it.
--
-- Every function of the extension: not executable by PUBLIC (but for
-- eo_http_answer and eo_http_error_status, which map their arguments and
-- read nothing), and how it
-- is protected from the caller's search_path (C functions that run only
-- schema-qualified statements; see the hostile search_path test below).
SELECT p.oid::regprocedure AS function,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute,
       (SELECT count(*)
        FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
        WHERE a.grantee <> p.proowner) AS grants_to_others,
       p.prosecdef AS security_definer,
       p.proconfig,
       l.lanname AS language
FROM pg_depend AS d
JOIN pg_proc AS p ON p.oid = d.objid
JOIN pg_language AS l ON l.oid = p.prolang
WHERE d.classid = 'pg_proc'::regclass
  AND d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'eo')
  AND d.deptype = 'e'
ORDER BY p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid) COLLATE "C";

-- Types: eo_claim's row type is not PUBLIC's to build on (a table made OF
-- it would stop ALTER TYPE in an update); calling eo_claim needs no USAGE.
SELECT t.oid::regtype AS type, has_type_privilege('public', t.oid, 'USAGE') AS public_usage
FROM pg_depend AS d
JOIN pg_type AS t ON t.oid = d.objid
WHERE d.classid = 'pg_type'::regclass
  AND d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'eo')
  AND d.deptype = 'e'
  AND t.typrelid IN (SELECT oid FROM pg_class WHERE relkind = 'c')  -- not a table's row type
ORDER BY 1::text;

-- Every table and sequence of the extension: no privilege for PUBLIC or
-- any role other than the owner, but for the metrics views (below).
SELECT c.oid::regclass AS relation,
       c.relkind,
       (SELECT count(*)
        FROM aclexplode(coalesce(c.relacl,
                                 acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char",
                                            c.relowner))) AS a
        WHERE a.grantee = 0) AS public_privileges,
       (SELECT count(*)
        FROM aclexplode(coalesce(c.relacl,
                                 acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char",
                                            c.relowner))) AS a
        WHERE a.grantee <> c.relowner) AS grants_to_others
FROM pg_depend AS d
JOIN pg_class AS c ON c.oid = d.objid
WHERE d.classid = 'pg_class'::regclass
  AND d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'eo')
  AND d.deptype = 'e'
ORDER BY c.relname;
-- The only grants eo makes: the views of schema eo_metrics, the functions
-- behind them and the schema, to pg_monitor (counts and ages only).
-- Schema eo_metrics: USAGE for pg_monitor, nothing for PUBLIC.
SELECT c.oid::regclass::text AS object, a.grantee::regrole, a.privilege_type
FROM pg_class AS c, aclexplode(c.relacl) AS a
WHERE c.relnamespace IN (SELECT extnamespace FROM pg_extension WHERE extname = 'eo'
                         UNION ALL SELECT 'eo_internal'::regnamespace
                         UNION ALL SELECT 'eo_metrics'::regnamespace)
  AND a.grantee <> c.relowner
UNION ALL
SELECT p.oid::regprocedure::text, a.grantee::regrole, a.privilege_type
FROM pg_proc AS p, aclexplode(p.proacl) AS a
WHERE p.pronamespace IN (SELECT extnamespace FROM pg_extension WHERE extname = 'eo'
                         UNION ALL SELECT 'eo_internal'::regnamespace
                         UNION ALL SELECT 'eo_metrics'::regnamespace)
  AND a.grantee <> p.proowner AND a.grantee <> 0
UNION ALL
SELECT n.nspname::text, a.grantee::regrole, a.privilege_type
FROM pg_namespace AS n, aclexplode(n.nspacl) AS a
WHERE n.nspname = 'eo_metrics' AND a.grantee <> n.nspowner
ORDER BY 1;
SELECT table_name, privilege_type
FROM information_schema.role_table_grants
WHERE grantee = 'PUBLIC' AND table_name LIKE 'eo\_%';
SELECT has_table_privilege('public', 'eo_internal.eo_keys_1', 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER') AS public_on_keys,
       has_sequence_privilege('public', 'eo_internal.eo_lease_token_seq', 'USAGE, SELECT, UPDATE') AS public_on_seq;

-- Roles: alice and bob process messages; carol is a member of alice;
-- dave is a NOINHERIT member of alice; nogrant got nothing.  (Roles are
-- cluster-wide: remove any left behind by an interrupted earlier run.)
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_eo_alice, regress_eo_bob, regress_eo_carol, regress_eo_dave, regress_eo_nogrant;
RESET client_min_messages;
CREATE ROLE regress_eo_alice NOLOGIN;
CREATE ROLE regress_eo_bob NOLOGIN;
CREATE ROLE regress_eo_carol NOLOGIN IN ROLE regress_eo_alice;
CREATE ROLE regress_eo_dave NOLOGIN NOINHERIT IN ROLE regress_eo_alice;
CREATE ROLE regress_eo_nogrant NOLOGIN;
GRANT EXECUTE ON FUNCTION
    eo_claim(text, text, interval, text),
    eo_complete(text, jsonb, bigint, text),
    eo_fail(text, text, bigint, interval, text, text, boolean),
    eo_extend(text, bigint, interval, text),
    eo_status(text, text)
TO regress_eo_alice, regress_eo_bob, regress_eo_dave;

-- A role without the grant cannot call the API.
SET ROLE regress_eo_nogrant;
SELECT eo_test_try($$SELECT status FROM eo_claim('priv:nogrant')$$);
SELECT eo_test_try($$SELECT eo_complete('priv:nogrant')$$);
SELECT eo_test_try($$SELECT eo_fail('priv:nogrant')$$);
SELECT eo_test_try($$SELECT eo_extend('priv:nogrant', 1, '1 hour')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_status('priv:nogrant')$$);
RESET ROLE;
SELECT count(*) AS nogrant_rows FROM eo_status('priv:nogrant');

-- alice claims and completes; the grant does not open the table itself.
SET ROLE regress_eo_alice;
BEGIN;
SELECT * FROM eo_claim('priv:alice', 'body-A');
SELECT eo_complete('priv:alice', '{"secret": "alice"}');
COMMIT;
SELECT * FROM eo_claim('priv:alice', 'body-A');
SELECT state, result, attempts FROM eo_status('priv:alice');
SELECT lease_token AS alice_token FROM eo_claim('priv:alice-lease', lease => '1 hour') \gset
SELECT eo_fail('priv:alice-failed', 'upstream down', retry_after => '1 hour');
SELECT eo_test_try($$SELECT count(*) FROM eo_internal.eo_keys_1$$);
SELECT eo_test_try($$SELECT nextval('eo_internal.eo_lease_token_seq')$$);
SELECT eo_test_try($$SELECT set_config('eo.max_attempts', '1000', false)$$);
RESET ROLE;

-- bob can do nothing with alice's keys, and sees none of their data.
SET ROLE regress_eo_bob;
SELECT eo_test_try($$SELECT status FROM eo_claim('priv:alice')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('priv:alice', 'body-A')$$);
-- (a different fingerprint is not even compared: no hint about the request)
SELECT eo_test_try($$SELECT status FROM eo_claim('priv:alice', 'body-B')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('priv:alice', lease => '1 hour')$$);
SELECT eo_test_try($$SELECT eo_complete('priv:alice', '{"secret": "bob"}')$$);
SELECT eo_test_try($$SELECT eo_fail('priv:alice', 'bob was here')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_status('priv:alice')$$);
-- nor with her lease, even with the right token
SELECT eo_test_try($$SELECT status FROM eo_claim('priv:alice-lease', lease => '1 hour')$$);
SELECT eo_test_try(format($$SELECT eo_complete('priv:alice-lease', '"bob"', lease_token => %s)$$, :alice_token));
SELECT eo_test_try(format($$SELECT eo_extend('priv:alice-lease', %s, '1 hour')$$, :alice_token));
SELECT eo_test_try(format($$SELECT eo_fail('priv:alice-lease', 'bob', lease_token => %s)$$, :alice_token));
SELECT eo_test_try($$SELECT count(*) FROM eo_status('priv:alice-lease')$$);
-- nor with her failed key
SELECT eo_test_try($$SELECT status FROM eo_claim('priv:alice-failed')$$);
SELECT eo_test_try($$SELECT eo_fail('priv:alice-failed', 'bob')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_status('priv:alice-failed')$$);
-- nor through the table
SELECT eo_test_try($$SELECT result FROM eo_internal.eo_keys_1 WHERE key = 'priv:alice'$$);
SELECT eo_test_try($$UPDATE eo_internal.eo_keys_1 SET result = '"bob"' WHERE key = 'priv:alice' RETURNING 1$$);
-- eo settings are not his to change
SELECT eo_test_try($$SELECT set_config('eo.max_attempts', '1000', false)$$);
SELECT eo_test_try($$SELECT set_config('eo.max_lease', '1000', false)$$);
-- bob's own keys work as usual
BEGIN;
SELECT status FROM eo_claim('priv:bob');
SELECT eo_complete('priv:bob', '{"secret": "bob"}');
COMMIT;
SELECT status, result FROM eo_claim('priv:bob');
RESET ROLE;

-- Nothing bob tried changed alice's keys.
SELECT k, s.state, s.result, s.attempts, s.last_error,
       (k <> 'priv:alice-lease' OR s.lease_token = :alice_token) AS token_unchanged
FROM unnest(ARRAY['priv:alice', 'priv:alice-lease', 'priv:alice-failed']) AS k,
     LATERAL eo_status(k) AS s
ORDER BY k;

-- alice cannot use bob's key either.
SET ROLE regress_eo_alice;
SELECT eo_test_try($$SELECT status FROM eo_claim('priv:bob')$$);
SELECT eo_test_try($$SELECT count(*) FROM eo_status('priv:bob')$$);
RESET ROLE;

-- carol, a member of alice, has alice's privileges on her keys.
SET ROLE regress_eo_carol;
SELECT * FROM eo_claim('priv:alice', 'body-A');
SELECT state, result FROM eo_status('priv:alice');
SELECT eo_test_try($$SELECT status FROM eo_claim('priv:alice', 'body-B')$$);
SELECT status, lease_token FROM eo_claim('priv:alice-lease', lease => '1 hour');
SELECT eo_complete('priv:alice-lease', '"carol finished it"', lease_token => :alice_token);
SELECT state, result FROM eo_status('priv:alice-lease');
-- a key carol claims is hers: alice is not a member of carol
SELECT status FROM eo_claim('priv:carol');
RESET ROLE;
SET ROLE regress_eo_alice;
SELECT eo_test_try($$SELECT count(*) FROM eo_status('priv:carol')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('priv:carol')$$);
RESET ROLE;

-- dave is a member of alice that does not inherit her privileges: as with
-- ownership of tables, that is not enough to use her keys.
SET ROLE regress_eo_dave;
SELECT eo_test_try($$SELECT count(*) FROM eo_status('priv:alice')$$);
SELECT eo_test_try($$SELECT status FROM eo_claim('priv:alice')$$);
RESET ROLE;

-- A superuser has the privileges of every role.
SELECT state, result FROM eo_status('priv:bob');

-- Another role's code running in the key owner's transaction cannot act
-- on her keys either: bob's SECURITY DEFINER functions, which alice calls
-- while she holds a claim (a retry, written at once; a new key, deferred).
CREATE FUNCTION bob_completes(k text) RETURNS void LANGUAGE sql SECURITY DEFINER
    AS $$ SELECT eo_complete(k, '{"forged_by": "bob"}') $$;
CREATE FUNCTION bob_peeks(k text) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    AS $$ SELECT count(*) FROM eo_status(k) $$;
ALTER FUNCTION bob_completes(text) OWNER TO regress_eo_bob;
ALTER FUNCTION bob_peeks(text) OWNER TO regress_eo_bob;
SET ROLE regress_eo_alice;
BEGIN;
SELECT status FROM eo_claim('priv:alice-retry');
SELECT eo_fail('priv:alice-retry', 'first try');
COMMIT;
BEGIN;
SELECT status FROM eo_claim('priv:alice-retry');
SELECT eo_test_try($$SELECT bob_completes('priv:alice-retry')$$);
SELECT eo_complete('priv:alice-retry', '"alice"');
SELECT status FROM eo_claim('priv:alice-new');
SELECT eo_test_try($$SELECT bob_completes('priv:alice-new')$$);
SELECT eo_test_try($$SELECT bob_peeks('priv:alice-new')$$);
SELECT eo_complete('priv:alice-new', '"alice"');
COMMIT;
SELECT 'retry' AS k, state, result FROM eo_status('priv:alice-retry')
UNION ALL SELECT 'new', state, result FROM eo_status('priv:alice-new');
RESET ROLE;
DROP FUNCTION bob_completes(text), bob_peeks(text);

-- A hostile search_path cannot change what the functions run, although
-- they act as the owner of eo's table.  bob shadows the table and the
-- text and tid equality operators with objects that fail loudly.
CREATE SCHEMA regress_eo_evil AUTHORIZATION regress_eo_bob;
SET ROLE regress_eo_bob;
CREATE FUNCTION regress_eo_evil.text_eq(text, text) RETURNS boolean
LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'hijacked as %', current_user; END$$;
CREATE FUNCTION regress_eo_evil.tid_eq(tid, tid) RETURNS boolean
LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'hijacked as %', current_user; END$$;
CREATE OPERATOR regress_eo_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_eo_evil.text_eq);
CREATE OPERATOR regress_eo_evil.= (LEFTARG = tid, RIGHTARG = tid, FUNCTION = regress_eo_evil.tid_eq);
CREATE TABLE regress_eo_evil.eo_keys_1 (key text);
CREATE TABLE regress_eo_evil.eo_lease_token_seq (key text);
CREATE TEMP TABLE eo_keys_1 (key text);
SET search_path = regress_eo_evil, pg_catalog, public;
-- the shadowing works for bob's own queries ...
SELECT eo_test_try($$SELECT 'a'::text = 'b'::text$$);
-- ... but not inside eo
BEGIN;
SELECT status FROM public.eo_claim('priv:evil');
SELECT public.eo_complete('priv:evil', '"fine"');
COMMIT;
SELECT status, result FROM public.eo_claim('priv:evil');
SELECT lease_token AS evil_token FROM public.eo_claim('priv:evil-lease', lease => '1 hour') \gset
SELECT public.eo_extend('priv:evil-lease', :evil_token, '1 hour') > pg_catalog.now() AS extended;
SELECT public.eo_fail('priv:evil-lease', 'x', lease_token => :evil_token);
SELECT state, attempts FROM public.eo_status('priv:evil-lease');
SELECT pg_catalog.count(*) AS shadow_rows FROM regress_eo_evil.eo_keys_1;
SELECT pg_catalog.count(*) AS temp_rows FROM pg_temp.eo_keys_1;
RESET search_path;
DROP TABLE pg_temp.eo_keys_1;
RESET ROLE;

-- Clean up.  The keys stay in eo_keys with their owners' OIDs.
SET client_min_messages = warning;
DROP SCHEMA regress_eo_evil CASCADE;
RESET client_min_messages;
DROP OWNED BY regress_eo_alice, regress_eo_bob, regress_eo_carol, regress_eo_dave, regress_eo_nogrant;
DROP ROLE regress_eo_alice, regress_eo_bob, regress_eo_carol, regress_eo_dave, regress_eo_nogrant;
SELECT state, result FROM eo_status('priv:alice');

