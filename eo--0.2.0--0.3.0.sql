-- eo 0.2.0 -> 0.3.0.  CREATE EXTENSION runs eo--0.1.0.sql, then each
-- update script in turn, so fresh installs and upgrades end in the same
-- state.  0.2.0's scripts are released: never edit them, add here.
\echo Use "ALTER EXTENSION eo UPDATE TO '0.3.0'" to load this file. \quit

-- ---- relays ----

-- eo_relay_wait(outbox, timeout, consumer_group, linger): the doorbell,
-- with the group's leases in view.  The sleep also ends when a lease of
-- the group expires (or its session is gone, for one taken with
-- release_on_disconnect), so a relay that found the rest leased fetches
-- again as soon as it can be taken over; and once the bell rang it
-- sleeps `linger` more (not past the timeout), so that a page can fill:
-- fewer, fuller fetches at low rates, for that much more latency.  Like
-- the 0.1.0 one since 0.3.0, it comes back at once if the last fetch may
-- have left events behind, so a relay can wait right after acknowledging
-- a page that was not full.  A second function next to the 0.1.0 one,
-- whose grants stay as they are.
CREATE FUNCTION @extschema@.eo_relay_wait(
    outbox pg_catalog.text,
    timeout pg_catalog.interval,
    consumer_group pg_catalog.text,
    linger pg_catalog.interval)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'eo_relay_wait'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_wait(pg_catalog.text, pg_catalog.interval, pg_catalog.text, pg_catalog.interval) FROM PUBLIC;

-- eo_relay_ack_pages(outbox, consumer_group, lease_tokens): the pages of
-- several tokens (one fetch of several slots) acknowledged whole in one
-- call, all or nothing, with the rights eo_relay_ack needs.  Its own name:
-- an overload of eo_relay_ack would make a call with an untyped third
-- argument ambiguous.
CREATE FUNCTION @extschema@.eo_relay_ack_pages(
    outbox pg_catalog.text,
    consumer_group pg_catalog.text,
    lease_tokens pg_catalog.int8[])
RETURNS pg_catalog.int4
AS 'MODULE_PATHNAME', 'eo_relay_ack_pages'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.eo_relay_ack_pages(pg_catalog.text, pg_catalog.text, pg_catalog.int8[]) FROM PUBLIC;
