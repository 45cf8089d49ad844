-- eo 0.3.0 -> 0.4.0.  CREATE EXTENSION runs eo--0.1.0.sql, then each
-- update script in turn, so fresh installs and upgrades end in the same
-- state.  0.3.0's scripts are released: never edit them, add here.
\echo Use "ALTER EXTENSION eo UPDATE TO '0.4.0'" to load this file. \quit

-- ---- sessions (src/session_pin.c) ----

-- eo_session_pin(names, settings): each named setting whose value reads
-- otherwise, or that was set in the transaction at all (set LOCAL to the
-- value given over another for the session, it would read otherwise
-- after COMMIT), is set to its element of settings for the session, as
-- set_config(name, value, false) would, with the caller's rights; NULL
-- elements and settings the server lacks are passed over; returns how
-- many were set.  eo_nats apply calls it at the start of every
-- transaction to put back what code in its session may have changed: one
-- short call instead of a statement over two arrays.  It does only what
-- set_config does, so like set_config every role may execute it: granted
-- to PUBLIC in so many words, as an installer's default privileges may
-- have revoked it (and eo_nats apply would stop on an updated eo).
CREATE FUNCTION @extschema@.eo_session_pin(
    names pg_catalog.text[],
    settings pg_catalog.text[])
RETURNS pg_catalog.int4
AS 'MODULE_PATHNAME', 'eo_session_pin'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
GRANT EXECUTE ON FUNCTION @extschema@.eo_session_pin(pg_catalog.text[], pg_catalog.text[]) TO PUBLIC;

COMMENT ON FUNCTION @extschema@.eo_session_pin(pg_catalog.text[], pg_catalog.text[]) IS
    'set each named setting that reads otherwise to the given value for the session; returns how many were set';

-- eo_session_pin_at_commit(names, settings): when the transaction
-- commits, after all code in it has run (its deferred triggers too),
-- every LISTEN is dropped (as UNLISTEN * drops them) and
-- eo_session_pin(names, settings) is done, whose session-wide sets also
-- replace values set LOCAL in the transaction, with the rights the caller
-- had at the call; nothing is done if it rolls back or is prepared.  The
-- arrays are checked at the call, each value at COMMIT; a second call in
-- the transaction is refused, and so is a call within a SECURITY DEFINER
-- function (what it sets would outlive the function).  eo_nats apply
-- begins every transaction with it: one that commits leaves the session
-- as apply set it up, one that rolls back as it was, and no trigger can
-- make its commit asynchronous.  It does only what those statements do,
-- with the caller's rights, so every role may execute it (granted to
-- PUBLIC in so many words, as eo_session_pin is).
CREATE FUNCTION @extschema@.eo_session_pin_at_commit(
    names pg_catalog.text[],
    settings pg_catalog.text[])
RETURNS void
AS 'MODULE_PATHNAME', 'eo_session_pin_at_commit'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
GRANT EXECUTE ON FUNCTION @extschema@.eo_session_pin_at_commit(pg_catalog.text[], pg_catalog.text[]) TO PUBLIC;

COMMENT ON FUNCTION @extschema@.eo_session_pin_at_commit(pg_catalog.text[], pg_catalog.text[]) IS
    'when the transaction commits, after all code in it has run: drop every LISTEN, then set each named setting that reads otherwise to the given value for the session';

-- ---- prepared statements (src/statement_names.c) ----

-- eo_statement_names_reserved(): true: this session refuses PREPARE and
-- DEALLOCATE of prepared statements named "eo_nats_..." (42501), so code
-- run in it (a trigger) cannot put its own statement under a name eo_nats
-- prepared one under.  eo's library reserves them wherever it is loaded,
-- and calling this loads it.  eo_nats calls it at connect and prepares
-- its statements by name where it is true (elsewhere they go unnamed,
-- parsed every time).  It reads nothing, so every role may execute it
-- (granted to PUBLIC in so many words, as eo_session_pin is).
CREATE FUNCTION @extschema@.eo_statement_names_reserved()
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'eo_statement_names_reserved'
LANGUAGE C VOLATILE PARALLEL SAFE;
GRANT EXECUTE ON FUNCTION @extschema@.eo_statement_names_reserved() TO PUBLIC;

COMMENT ON FUNCTION @extschema@.eo_statement_names_reserved() IS
    'true: this session refuses PREPARE and DEALLOCATE of prepared statements named eo_nats_... (so eo_nats may prepare by name)';

-- ---- relays (src/outbox_relay_headers.c) ----

-- eo_relay_header_lines(headers): an event's headers as "key<TAB>value"
-- lines, ordered by the keys' bytes, only the keys a relay can carry as
-- message headers (printable ASCII without ':', none holding "nats-" or
-- beginning "eo-", in any case); a value as its string if it is a JSON
-- string without CR or LF, else as its JSON text; NULL if the headers are
-- not an object or no key qualifies.  eo_nats forward formats each page's
-- headers with it instead of a subquery per event.  It reads nothing but
-- its argument, so, like eo_http_answer, every role may execute it
-- (granted to PUBLIC in so many words: an installer's default privileges
-- may have revoked it, and forward's fetch would fail on an updated eo).
CREATE FUNCTION @extschema@.eo_relay_header_lines(headers pg_catalog.jsonb)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'eo_relay_header_lines'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
GRANT EXECUTE ON FUNCTION @extschema@.eo_relay_header_lines(pg_catalog.jsonb) TO PUBLIC;

COMMENT ON FUNCTION @extschema@.eo_relay_header_lines(pg_catalog.jsonb) IS
    'an event''s headers as key<TAB>value lines, those a relay can carry as message headers';
