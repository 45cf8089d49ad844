# Copyright: eo authors.  See README.
#
# Code run in eo_nats apply's session is not eo_nats's: --sql writes the
# application's tables, and a database owner's trigger on one of them runs
# in that session, as the consumer.  PREPARE and DEALLOCATE work from
# PL/pgSQL, and a session's prepared statements are not transactional, so
# had apply prepared eo_claim's call or --sql by name, such a trigger could
# put its own statements under those names: claims answering "duplicate"
# would have every later message acknowledged and never applied (lost),
# an --sql made a no-op the same.  On eo 0.4.0, which reserves the names
# eo_nats prepares under (PREPARE, EXECUTE and DEALLOCATE refuse them),
# apply prepares by name, and the trigger's every attempt is refused (to
# replace them, or to have them planned again by EXPLAIN EXECUTE); a
# trigger's DEALLOCATE ALL makes apply connect again.  On an older eo its
# statements are unnamed, parsed from its own text each time.  Either
# way every message is applied once.
# The settings such a trigger changes for the rest of the session
# (synchronous_commit off: an acknowledged message lost by a crash;
# client_encoding, search_path, DateStyle, the role) are pinned again
# at every COMMIT of apply (eo 0.4.0's eo_session_pin_at_commit), or at
# the start of every transaction apply begins (an older eo), and its
# LISTENs dropped: each later message's --sql sees apply's own, and a TEMP
# table it makes does not take the name of --search-path's table.  Within a batch, the settings the server reports
# are pinned again when one moved; deferred triggers are fired before the
# step that makes the commit durable (a crash with the WAL writer stopped
# loses nothing); a message whose trigger ends the session is given back
# alone, the rest of its fetch applied.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use lib 'test/perl';
use EoNats;
use EoTest;

EoNats::require_nats();

my $node = EoTest::eo_node('statements', conf => "eo.naptime = 1", eo_in => []);
$node->safe_psql('postgres', q{
CREATE ROLE owner LOGIN;
CREATE ROLE consumer LOGIN;
CREATE DATABASE shop;
CREATE DATABASE inbox OWNER owner;
});
$node->safe_psql('shop', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('orders', slots => 2) IS NOT NULL;
SELECT eo_group_create('orders', 'nats');
SELECT count(eo_emit('orders', 'order', 'agg-' || (g % 3), 'placed', jsonb_build_object('n', g)))
  FROM generate_series(1, 10) g;
});
$node->safe_psql('inbox', q{
CREATE SCHEMA eo;
CREATE EXTENSION eo SCHEMA eo;
GRANT USAGE ON SCHEMA eo TO consumer;
GRANT EXECUTE ON FUNCTION eo.eo_claim(text, text, interval, text),
      eo.eo_fail(text, text, bigint, interval, text, text, boolean) TO consumer;
SELECT eo.eo_scope_create('orders-consumer', owner => 'consumer');
});

# The owner's table the consumer writes, with her trigger: it replaces
# every prepared statement of the session that claims (with one that says
# "duplicate") or writes the ledger (with a no-op).
$node->safe_psql('inbox', q{
SET ROLE owner;
CREATE TABLE public.ledger (id uuid PRIMARY KEY, n int);
GRANT INSERT, UPDATE, SELECT ON public.ledger TO consumer;
CREATE TABLE public.seen (what text);
GRANT INSERT ON public.seen TO PUBLIC;
CREATE FUNCTION public.plant() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE r record;
BEGIN
  FOR r IN SELECT name, statement, parameter_types FROM pg_catalog.pg_prepared_statements LOOP
    INSERT INTO public.seen VALUES (r.name || ': ' || r.statement);
    -- have it analysed and planned again under this trigger's settings
    BEGIN
      EXECUTE pg_catalog.format('EXPLAIN EXECUTE %I%s', r.name,
        CASE WHEN pg_catalog.cardinality(r.parameter_types) > 0
        THEN '(' || pg_catalog.array_to_string(pg_catalog.array_fill('NULL'::text,
                    ARRAY[pg_catalog.cardinality(r.parameter_types)]), ',') || ')'
        ELSE '' END);
      INSERT INTO public.seen VALUES ('explained ' || r.name);
    EXCEPTION WHEN insufficient_privilege THEN
      INSERT INTO public.seen VALUES ('explain refused ' || r.name);
    END;
    BEGIN
      IF r.statement LIKE '%eo_claim(%' THEN
        EXECUTE pg_catalog.format('DEALLOCATE %I', r.name);
        EXECUTE pg_catalog.format('PREPARE %I (text, text) AS SELECT %L::text AS status', r.name, 'duplicate');
        INSERT INTO public.seen VALUES ('replaced ' || r.name);
      ELSIF r.statement LIKE '%INSERT INTO public.ledger%' THEN
        EXECUTE pg_catalog.format('DEALLOCATE %I', r.name);
        EXECUTE pg_catalog.format('PREPARE %I (text, text, jsonb, jsonb, timestamptz) AS SELECT 1', r.name);
        INSERT INTO public.seen VALUES ('replaced ' || r.name);
      END IF;
    EXCEPTION WHEN insufficient_privilege THEN
      INSERT INTO public.seen VALUES ('refused ' || r.name);
    END;
  END LOOP;
  RETURN NEW;
END $f$;
CREATE TRIGGER plant BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.plant();
});

my $nats = EoNats->new;
my @nats = @{ $nats->nats };
my ($rc) = $nats->run('admin.log', 'stream-add', @nats, '--stream', 'ORDERS', '--subjects', 'orders.>');
is($rc, 0, 'stream ORDERS made');
($rc) = $nats->run('forward.log', @nats, '--pg', $node->connstr('shop'), 'forward', '--outbox', 'orders',
	'--group', 'nats', '--stream', 'ORDERS', '--once');
is($rc, 0, '10 events forwarded');

# one message a fetch: the first one's INSERT fires the trigger, and every
# later message would meet what it planted
($rc) = $nats->run('apply.log', @nats, '--pg', $node->connstr('inbox') . ' user=consumer', 'apply',
	'--stream', 'ORDERS', '--durable', 'inbox', '--scope', 'orders-consumer', '--batch', '1',
	'--ack-wait', '1000', '--once',
	'--sql', q{INSERT INTO public.ledger (id, n) VALUES ($1::uuid, ($3->>'n')::int)});
is($rc, 0, 'apply --once exits 0');
like($nats->log('apply.log'), qr/stopping: 10 applied, 0 duplicates, 0 failed/, 'it says 10 applied');
is($node->safe_psql('inbox', 'SELECT count(*) FROM public.ledger'), '10',
	'every message applied: the trigger replaced none of eo_nats\'s statements');
isnt($node->safe_psql('inbox', q{SELECT count(*) FROM public.seen WHERE what LIKE '%eo_claim(%'}), '0',
	'... which it found: on eo 0.4.0 apply prepares them by name');
isnt($node->safe_psql('inbox', q{SELECT count(*) FROM public.seen WHERE what LIKE 'refused eo_nats_%'}), '0',
	'... and every attempt to replace one was refused');
is($node->safe_psql('inbox', q{SELECT count(*) FROM public.seen WHERE what LIKE 'replaced %'}), '0',
	'... none succeeded');
isnt($node->safe_psql('inbox', q{SELECT count(*) FROM public.seen WHERE what LIKE 'explain refused eo_nats_%'}), '0',
	'its EXPLAIN EXECUTE of them was refused too');
is($node->safe_psql('inbox', q{SELECT count(*) FROM public.seen WHERE what LIKE 'explained eo_nats_%'}), '0',
	'... every time');

# A trigger's DEALLOCATE ALL (allowed: it replaces nothing) takes apply's
# statements from under it: the next use of one fails, apply connects
# again, and every message is applied once.
forward_new('dropall', 'DROPALL');
$node->safe_psql('inbox', q{
SET ROLE owner;
CREATE TABLE public.dropall (n int PRIMARY KEY);
GRANT INSERT ON public.dropall TO consumer;
CREATE FUNCTION public.drop_all() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF NEW.n IN (2, 4) THEN DEALLOCATE ALL; END IF;
  RETURN NEW;
END $f$;
CREATE TRIGGER drop_all BEFORE INSERT ON public.dropall FOR EACH ROW EXECUTE FUNCTION public.drop_all();
});
($rc) = $nats->run('apply-dropall.log', @nats, '--pg', $node->connstr('inbox') . ' user=consumer', 'apply',
	'--stream', 'DROPALL', '--durable', 'dropall', '--scope', 'orders-consumer', '--batch', '1',
	'--ack-wait', '1000', '--once', '--sql', q{INSERT INTO public.dropall SELECT ($3->>'n')::int});
is($node->safe_psql('inbox', q{SELECT string_agg(n::text, ',' ORDER BY n) FROM public.dropall}), '1,2,3,4,5,6',
	'a trigger running DEALLOCATE ALL: every message applied, once');
like($nats->log('apply-dropall.log'), qr/statement eo_nats prepared is gone/, '... apply said why it connected again');

# ---- settings a trigger changes for the rest of the session ----------------

forward_new('settings', 'SETTINGS');
$node->safe_psql('postgres', q{CREATE ROLE grp; GRANT grp TO consumer});
unsettle('inbox');
settings_seen('inbox', 'inbox2', 'on eo ' . EoTest::default_version() . ' (eo_session_pin_at_commit)',
	qr/SELECT "?eo"?\.eo_session_pin_at_commit\(\$1, \$2\)/);

# The same with an eo of 0.3.0, which has no eo_session_pin_at_commit: apply
# puts the settings back at the start of each transaction with a statement
# of its own, and UNLISTEN *.
$node->safe_psql('postgres', q{CREATE DATABASE inbox03 OWNER owner});
$node->safe_psql('inbox03', q{
CREATE SCHEMA eo;
CREATE EXTENSION eo VERSION '0.3.0' SCHEMA eo;
GRANT USAGE ON SCHEMA eo TO consumer;
GRANT EXECUTE ON FUNCTION eo.eo_claim(text, text, interval, text),
      eo.eo_fail(text, text, bigint, interval, text, text, boolean) TO consumer;
SELECT eo.eo_scope_create('orders-consumer', owner => 'consumer');
});
unsettle('inbox03');
settings_seen('inbox03', 'inbox03', 'on eo 0.3.0 (a statement)',
	qr/pg_catalog\.set_config\(p\.n, p\.v, false\)/);

# The owner's table in $db, whose trigger changes the session's settings
# (and LISTENs), with ALTER DATABASE ... SET role.
sub unsettle
{
	my ($db) = @_;

	$node->safe_psql($db, qq{
GRANT USAGE ON SCHEMA eo TO grp;
GRANT EXECUTE ON FUNCTION eo.eo_claim(text, text, interval, text) TO grp;
SET ROLE owner;
CREATE TABLE public.seen_settings (n int, sc text, sp text, ds text, ce text, cu text, ca text, ts text,
  li text);
GRANT INSERT, SELECT ON public.seen_settings TO consumer, grp;
ALTER DATABASE $db SET role = grp;
} . q{
CREATE FUNCTION public.unsettle() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  CREATE TEMP TABLE IF NOT EXISTS seen_settings (LIKE public.seen_settings);
  PERFORM pg_catalog.set_config('synchronous_commit', 'off', false),
          pg_catalog.set_config('search_path', 'public, pg_catalog', false),
          pg_catalog.set_config('DateStyle', 'SQL, DMY', false),
          pg_catalog.set_config('client_encoding', 'LATIN1', false),
          pg_catalog.set_config('plpgsql.check_asserts', 'off', false),
          pg_catalog.set_config('default_text_search_config', 'pg_catalog.simple', false),
          pg_catalog.set_config('role', 'grp', false);
  -- and LOCAL as apply has them: they read as apply's at COMMIT, and would
  -- go back to the trigger's for the session after it
  PERFORM pg_catalog.set_config('synchronous_commit', 'on', true),
          pg_catalog.set_config('search_path', 'public, pg_temp', true);
  LISTEN owner_channel;
  RETURN NEW;
END $f$;
CREATE TRIGGER unsettle BEFORE INSERT ON public.seen_settings FOR EACH ROW EXECUTE FUNCTION public.unsettle();
});
}

# SETTINGS applied into $db as durable $durable, one message a fetch: each
# is a transaction of its own, after the first one's trigger ran.
sub settings_seen
{
	my ($db, $durable, $how, $pin) = @_;
	my $log_from = -s $node->logfile;

	$node->safe_psql('postgres', "ALTER ROLE consumer IN DATABASE $db SET log_statement = 'all'");
	my ($rc) = $nats->run("apply-$durable.log", @nats, '--pg', $node->connstr($db) . ' user=consumer',
		'apply', '--stream', 'SETTINGS', '--durable', $durable, '--scope', 'orders-consumer',
		'--batch', '1', '--ack-wait', '1000', '--once', '--search-path', 'public', '--sql',
		q{INSERT INTO seen_settings
  SELECT ($3->>'n')::int, pg_catalog.current_setting('synchronous_commit'), pg_catalog.current_setting('search_path'),
         pg_catalog.current_setting('DateStyle'), pg_catalog.current_setting('client_encoding'),
         current_user, pg_catalog.current_setting('plpgsql.check_asserts'),
         pg_catalog.current_setting('default_text_search_config'),
         (SELECT pg_catalog.count(*) FROM pg_catalog.pg_listening_channels())});
	is($rc, 0, "apply --once exits 0, $how");
	is($node->safe_psql($db, q{SELECT count(*) FROM public.seen_settings}), '6',
		'the 6 applied into the table --search-path names, not the TEMP table of the same name the'
		. ' trigger made (temporary tables come last in --sql\'s search_path)');
	is($node->safe_psql($db, q{SELECT string_agg(DISTINCT concat_ws('|', sc, sp, ds, ce, cu, ca, ts, li), ',')
  FROM public.seen_settings}), 'on|public, pg_temp|ISO, MDY|UTF8|consumer|on|pg_catalog.english|0',
		'each --sql saw apply\'s own settings, not what the trigger set for the session before it:'
		. ' its role (not the owner\'s ALTER DATABASE ... SET role), ASSERTs on, the server\'s'
		. " default_text_search_config (postgresql.conf's, not PostgreSQL's built-in), and no LISTEN"
		. " left, $how");
	like(slurp_file($node->logfile, $log_from), $pin, "... put back $how");
	$node->safe_psql($db, "SET ROLE NONE; ALTER DATABASE $db RESET role");
	$node->safe_psql('postgres', "ALTER ROLE consumer IN DATABASE $db RESET log_statement");
}

# Six more events (n 1..6) in an outbox of their own, forwarded to a stream of their own.
sub forward_new
{
	my ($outbox, $stream) = @_;

	$node->safe_psql('shop', qq{
SELECT eo_outbox_create('$outbox', slots => 1) IS NOT NULL;
SELECT eo_group_create('$outbox', 'nats');
SELECT count(eo_emit('$outbox', 'order', 'agg', 'placed', jsonb_build_object('n', g)))
  FROM generate_series(1, 6) g;
});
	$nats->run("admin-$outbox.log", 'stream-add', @nats, '--stream', $stream, '--subjects', "$outbox.>");
	my ($rc) = $nats->run("forward-$outbox.log", @nats, '--pg', $node->connstr('shop'), 'forward',
		'--outbox', $outbox, '--group', 'nats', '--stream', $stream, '--once');
	is($rc, 0, "6 more events forwarded ($outbox)");
}

# ---- settings a trigger changes for its own transaction ---------------------

# One fetch, one transaction for its 6 messages: a BEFORE trigger sets
# settings LOCAL on each row that change what a message's data means (the
# server reports them: the later messages' --sql are pinned again before
# they run), and a deferred one turns synchronous_commit off at the end
# (on eo 0.4.0 eo_session_pin_at_commit makes the commit durable after
# every deferred trigger, even one that a deferred trigger made, after SET
# CONSTRAINTS ALL DEFERRED, at COMMIT; on 0.3.0, SET CONSTRAINTS ALL
# IMMEDIATE fires the deferred triggers before the durable step, which a
# trigger deferring again would escape).  Then the WAL writer is stopped
# and the server crashes: had the commit been asynchronous, what apply
# acknowledged would be gone.
local_settings('inbox', 'local', 'LOCAL', 'on eo ' . EoTest::default_version(), 1);
local_settings('inbox03', 'local03', 'LOCAL03', 'on eo 0.3.0', 0);

sub local_settings
{
	my ($db, $outbox, $stream, $how, $defer_again) = @_;
	# the deferred trigger that turns synchronous_commit off: on seen_local,
	# or on a table a deferred trigger of seen_local writes, deferred again
	my $async_on = $defer_again ? 'public.seen_local_later' : 'public.seen_local';

	forward_new($outbox, $stream);
	$node->safe_psql($db, q{
SET ROLE owner;
CREATE TABLE public.seen_local (n int, ce text, ds text, tz text);
GRANT INSERT, SELECT ON public.seen_local TO consumer, grp;
CREATE FUNCTION public.unsettle_local() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.set_config('client_encoding', 'LATIN1', true),
          pg_catalog.set_config('DateStyle', 'SQL, DMY', true),
          pg_catalog.set_config('TimeZone', 'Asia/Tokyo', true);
  RETURN NEW;
END $f$;
CREATE TRIGGER unsettle_local BEFORE INSERT ON public.seen_local FOR EACH ROW EXECUTE FUNCTION public.unsettle_local();
CREATE FUNCTION public.async_commit() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
  RETURN NULL;
END $f$;
CREATE TABLE public.seen_local_later (n int);
GRANT INSERT ON public.seen_local_later TO consumer, grp;
CREATE FUNCTION public.defer_again() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  SET CONSTRAINTS ALL DEFERRED;
  INSERT INTO public.seen_local_later VALUES (NEW.n);
  RETURN NULL;
END $f$;
} . ($defer_again ? q{
CREATE CONSTRAINT TRIGGER defer_again AFTER INSERT ON public.seen_local DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION public.defer_again();
} : '') . qq{
CREATE CONSTRAINT TRIGGER async_commit AFTER INSERT ON $async_on DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION public.async_commit();
});
	my $walwriter = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'});
	kill 'STOP', $walwriter;
	my ($rc) = $nats->run("apply-$outbox.log", @nats, '--pg', $node->connstr($db) . ' user=consumer',
		'apply', '--stream', $stream, '--durable', $outbox, '--scope', 'orders-consumer',
		'--ack-wait', '1000', '--once', '--verbose',
		'--sql', q{INSERT INTO public.seen_local SELECT ($3->>'n')::int, pg_catalog.current_setting('client_encoding'),
  pg_catalog.current_setting('DateStyle'), pg_catalog.current_setting('TimeZone')});
	is($rc, 0, "apply --once exits 0, $how");
	like($nats->log("apply-$outbox.log"), qr/fetch: 6 applied/, '... the 6 applied, in one fetch');
	is($node->safe_psql($db, q{SELECT string_agg(DISTINCT concat_ws('|', ce, ds, tz), ',')
  FROM public.seen_local}), 'UTF8|ISO, MDY|UTC',
		"each --sql of the fetch saw apply's settings, not what the trigger set for the transaction, $how");
	$node->stop('immediate');
	kill 'CONT', $walwriter;
	$node->start;
	is($node->safe_psql($db, q{SELECT count(*) FROM public.seen_local}), '6',
		'all 6 there after a crash with the WAL writer stopped: the commit was durable, whatever the'
		. " deferred trigger set, $how");
}

# ---- a message whose trigger ends the session --------------------------------

# Given back with its whole fetch, it held the fetch for ever (apply ran the
# others on the dead session); now it is given back alone, the session is
# made again, and the others of its fetch are applied.
forward_new('killer', 'KILLER');
$node->safe_psql('inbox', q{
SET ROLE owner;
CREATE TABLE public.killed (n int PRIMARY KEY);
GRANT INSERT ON public.killed TO consumer;
CREATE FUNCTION public.kill_three() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF NEW.n = 3 THEN PERFORM pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid()); END IF;
  RETURN NEW;
END $f$;
CREATE TRIGGER kill_three BEFORE INSERT ON public.killed FOR EACH ROW EXECUTE FUNCTION public.kill_three();
});
my @killer = (@nats, '--pg', $node->connstr('inbox') . ' user=consumer', 'apply', '--stream', 'KILLER',
	'--durable', 'killer', '--scope', 'orders-consumer', '--ack-wait', '1000', '--once', '--verbose',
	'--sql', q{INSERT INTO public.killed SELECT ($3->>'n')::int});
my $started = time;
($rc) = $nats->run('apply3.log', @killer);
is($rc, 1, 'the message whose trigger ends the session: apply --once ends with a failure');
ok(time - $started < 30, '... soon (' . (time - $started) . ' s), not held by it');
is($node->safe_psql('inbox', 'SELECT string_agg(n::text, \',\' ORDER BY n) FROM public.killed'), '1,2,4,5,6',
	'... and the 5 others of its fetch applied');
like($nats->log('apply3.log'), qr/stopping: 5 applied, 0 duplicates, 1 failed/, '... it says so');
$node->safe_psql('inbox', 'SET ROLE owner; DROP TRIGGER kill_three ON public.killed');
usleep(5_200_000);    # past the delay it was given back with
($rc) = $nats->run('apply4.log', @killer);
is($node->safe_psql('inbox', 'SELECT count(*) FROM public.killed'), '6',
	'the trigger gone, the message given back is applied: none lost');

$nats->stop;
$node->stop;
done_testing();
