# Copyright: eo authors.  See README.
#
# The worker against a hostile database owner: in a database
# owned by a role that is not a superuser, with eo installed in public
# (which that role owns):
# - an outbox table swapped for a look-alike whose created_at default runs
#   the owner's code: the worker's passes never run it (the owner does not
#   become a superuser), log a warning naming the outbox, and go on
#   keeping the other outboxes;
# - ALTER DATABASE ... SET default_transaction_read_only, statement and
#   lock timeouts, search_path: the worker still reclaims expired leases;
# - eo's own settings are superuser-only: the owner cannot set them for
#   the database, a superuser can, and the worker honours that;
# - ALTER DATABASE ... SET session_authorization or role: the worker's
#   DDL still does not run as the owner;
# - ALTER DATABASE ... ALLOW_CONNECTIONS false does not keep the worker
#   out.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;

my $node = EoTest::eo_node('worker_security', conf => "eo.naptime = 1", eo_in => []);
$node->safe_psql('postgres', q{
CREATE ROLE dbo LOGIN;
CREATE DATABASE shop OWNER dbo;
});
$node->safe_psql('shop', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('billing');
SELECT eo_outbox_create('other', premake => 2);
});

# Runs SQL as the database owner.
sub as_dbo
{
	my ($sql) = @_;
	return $node->safe_psql('shop', "SET ROLE dbo; $sql");
}

# The owner's trap: records who ran it; made a superuser if it was one.
as_dbo(q{
CREATE TABLE ran (who text);
GRANT INSERT ON ran TO PUBLIC;
CREATE FUNCTION escalate() RETURNS timestamptz LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO public.ran VALUES (current_user);
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE 'ALTER ROLE dbo SUPERUSER';
    END IF;
    RETURN now();
END $$;
CREATE FUNCTION planned() RETURNS timestamptz LANGUAGE plpgsql IMMUTABLE
    AS $$ BEGIN RETURN public.escalate(); END $$;
});

# Swap the outbox: public is the owner's schema, so the drop is allowed.
my $log_offset = -s $node->logfile;
as_dbo(q{
DROP TABLE public.billing CASCADE;   -- (takes eo's view of it along)
CREATE TABLE public.billing (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL,
    payload jsonb, headers jsonb,
    created_at timestamptz NOT NULL DEFAULT public.planned(),
    txid xid8 NOT NULL DEFAULT pg_current_xact_id(), seq int8
) PARTITION BY RANGE (created_at);
CREATE TABLE public.billing_all PARTITION OF public.billing
    FOR VALUES FROM (MINVALUE) TO (MAXVALUE);
});

# The other outbox loses a partition made ahead; a pass that goes on past
# the broken outbox makes it again.
# Drops the other outbox's newest partition (after running $also, if
# given) and says whether the worker makes it again.
sub partition_remade
{
	my ($also) = @_;
	my $newest = $node->safe_psql('shop', q{
SELECT c.oid::regclass FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'other'::regclass ORDER BY c.relname DESC LIMIT 1});
	$node->safe_psql('shop', "DROP TABLE $newest;" . ($also // ''));
	return $node->poll_query_until('shop', "SELECT to_regclass('$newest') IS NOT NULL");
}
ok(partition_remade(), 'the worker makes the other outbox\'s partition again');
ok($node->wait_for_log(qr/eo: maintenance of outbox "billing" failed: table of outbox "billing" was dropped/,
		$log_offset),
	'the swapped outbox is logged, by name');
# a few more passes
sleep(3);
is($node->safe_psql('postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'dbo'}),
	'f', 'the database owner did not become a superuser');
is($node->safe_psql('shop', q{SELECT count(*) FROM ran}),
	'0', 'the worker never ran the look-alike\'s default');

# Settings the owner may make for the database cannot stop the worker.
as_dbo(q{
ALTER DATABASE shop SET exit_on_error = on;
ALTER DATABASE shop SET default_transaction_read_only = on;
ALTER DATABASE shop SET statement_timeout = '1ms';
ALTER DATABASE shop SET lock_timeout = '1ms';
ALTER DATABASE shop SET idle_in_transaction_session_timeout = '1ms';
ALTER DATABASE shop SET search_path = nowhere;
});
# (our own sessions override them, as any client may)
$ENV{PGOPTIONS} = '-c default_transaction_read_only=off -c statement_timeout=0 '
  . '-c lock_timeout=0 -c idle_in_transaction_session_timeout=0 -c search_path=public';
$node->safe_psql('shop', "SELECT eo_claim('abandoned', lease => '1 s')");
ok( $node->poll_query_until(
		'shop', "SELECT state FROM eo_status('abandoned')", 'failed'),
	'read-only, timeouts, search_path and exit_on_error for the database: the lease is still reclaimed');
ok(partition_remade(),
	'... and with exit_on_error the broken outbox still does not stop the others');

# A lock the owner holds on an outbox (an ANALYZE left open) makes that
# outbox wait for a later pass; the pass itself goes on.
my $hold_in = "BEGIN; ANALYZE public.other; SELECT 'held';\n";
my $hold_out = '';
my $hold = IPC::Run::start(
	[ 'psql', '-XAtq', '-f', '-', '-d', $node->connstr('shop') ],
	'<', \$hold_in, '>', \$hold_out, '2>', \my $hold_err);
$hold->pump until $hold_out =~ /held/;
$node->safe_psql('shop', "SELECT eo_claim('abandoned2', lease => '1 s')");
ok( $node->poll_query_until(
		'shop', "SELECT state FROM eo_status('abandoned2')", 'failed'),
	'an outbox locked by someone else does not hang the pass: leases are still reclaimed');
ok($node->log_contains(qr/eo: 1 outbox left for the next pass, a lock was not free in time: "other"/),
	'... it is logged, and retried on the next pass');
ok($node->log_contains(qr/still waiting for ShareUpdateExclusiveLock on relation \d+ of database \d+/),
	'... with who held the lock (log_lock_waits)');
$hold_in .= "ROLLBACK;\n";
$hold->finish;

# eo's settings: not the owner's to set for the database; a superuser's.
my ($ret, $stdout, $stderr) = $node->psql('shop',
	q{SET ROLE dbo; ALTER DATABASE shop SET eo.partition_interval = '2s'});
isnt($ret, 0, 'the database owner cannot set eo.partition_interval for the database');
like($stderr, qr/permission denied to set parameter "eo.partition_interval"/,
	'... permission denied');
$node->safe_psql('postgres', q{CREATE EXTENSION eo; SELECT eo_claim('first')});
$node->safe_psql('postgres', q{ALTER DATABASE shop SET eo.partition_interval = '2s'});
my $gen0 = $node->safe_psql('shop',
	"SELECT max(gen) FROM eo_internal.eo_generations WHERE state = 'c'");
ok($node->poll_query_until('shop',
		"SELECT max(gen) > $gen0 FROM eo_internal.eo_generations WHERE state = 'c'"),
	'a superuser\'s eo.partition_interval for the database reaches the worker');
is($node->safe_psql('postgres', q{SELECT max(gen) FROM eo_internal.eo_generations WHERE state = 'c'}),
	'1', '... and only that database');

# Who the worker is: the owner's session_authorization or role for the
# database would have the passes run (and be logged) as the owner.  A
# superuser's event trigger sees who makes the partitions.
my $me = $node->safe_psql('shop', 'SELECT current_user');
$node->safe_psql('shop', q{
CREATE TABLE ddl_seen (sess name, cur name, what text);
GRANT INSERT ON ddl_seen TO PUBLIC;
CREATE FUNCTION see_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.ddl_seen SELECT session_user, current_user, tg_tag;
END $$;
CREATE EVENT TRIGGER see_ddl ON ddl_command_end EXECUTE FUNCTION see_ddl();
});
as_dbo(q{
ALTER DATABASE shop SET session_authorization = 'dbo';
ALTER DATABASE shop SET role = 'dbo';
});
$ENV{PGOPTIONS} .= " -c session_authorization=$me -c role=none";
ok(partition_remade('TRUNCATE ddl_seen'),
	'session_authorization and role set for the database: the worker still makes partitions');
is($node->safe_psql('shop',
		q{SELECT count(*) > 0, count(*) FILTER (WHERE 'dbo' IN (sess, cur)) FROM ddl_seen}),
	't|0', '... and none of its DDL ran as the database owner');

# The owner closes the database to connections: the worker still comes.
$node->safe_psql('shop', "SELECT eo_claim('abandoned3', lease => '1 s')");
$log_offset = -s $node->logfile;
$node->safe_psql('postgres', 'SET ROLE dbo; ALTER DATABASE shop ALLOW_CONNECTIONS false');
ok($node->wait_for_log(qr/eo: reclaimed 1 expired leases/, $log_offset),
	'ALLOW_CONNECTIONS false: the worker still reclaims the expired lease');
$node->safe_psql('postgres', 'ALTER DATABASE shop ALLOW_CONNECTIONS true');
is($node->safe_psql('shop', "SELECT state FROM eo_status('abandoned3')"),
	'failed', '... that one');

$node->stop;
done_testing();
