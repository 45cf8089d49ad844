# Copyright: eo authors.  See README.
#
# Nobody but the extension owner can make maintenance wait.  PostgreSQL
# queues a DROP for an object's lock before it checks ownership, so a role
# that owns nothing (mallory) holds a weak lock on eo's object in one
# session and queues a DROP behind it in another; every later request for
# that object then waits.  Against each such queue:
# - extension eo (DROP EXTENSION queued): the worker still reclaims an
#   abandoned lease in time, logs the queued request with its pid, and its
#   passes end; in six databases at once (with six worker slots free for
#   the ten databases here), the passes hold no worker slot for long, and
#   a seventh database is still served;
# - schema eo_internal (DROP SCHEMA queued): the worker, a superuser,
#   cancels the request (it could only be refused), logging whose it was;
#   generations go on switching and being made ahead, leases are
#   reclaimed, events emitted; a grantee's eo_outbox_create, which cannot
#   cancel anyone, fails at once with 55P03 naming the pid in the way, and
#   eo_metrics.maintenance counts the wait given up;
# - a fresh installation (no key generation yet): an application's first
#   claim under either queue is answered at once;
# - the database itself (DROP DATABASE queued): the worker's connection
#   gives up, the other databases are served, and once the queue is gone
#   the database is served again.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(time usleep);

my $node = EoTest::eo_node('worker_lock_queue', conf => q{
eo.naptime = 1
max_worker_processes = 8
}, eo_in => []);
$node->safe_psql('postgres', 'CREATE ROLE mallory LOGIN');

my @dbs = map { "db_$_" } 1 .. 7;
for my $db (@dbs, 'fresh', 'gone')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION eo');
}

# A psql session of `role` in `db` that has run `sql` and stays open
# (its transaction too) until finish().
sub session
{
	my ($db, $role, $sql) = @_;
	my $in  = "$sql\n\\echo __ready__\n";
	my $out = '';
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=0', '-d', $node->connstr($db) . " user=$role" ],
		'<', \$in, '>', \$out, '2>', \$out);
	$h->pump until $out =~ /__ready__/;
	return $h;
}

# A session of mallory whose `sql` (a DROP) waits for a lock, once it waits.
sub queued
{
	my ($db, $sql) = @_;
	my $in  = "$sql\n";
	my $out = '';
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr($db) . ' user=mallory' ],
		'<', \$in, '>', \$out, '2>', \$out);
	$h->pump_nb while length $in;    # IPC::Run writes input only when pumped
	$node->poll_query_until('postgres', qq{
SELECT count(*) > 0 FROM pg_stat_activity
WHERE usename = 'mallory' AND wait_event_type = 'Lock' AND query = '$sql'})
	  or die "'$sql' does not wait";
	return $h;
}

# The pid of mallory's session in `db` that runs `sql`.
sub waiting_pid
{
	my ($sql, $db) = @_;
	return $node->safe_psql('postgres', qq{
SELECT pid FROM pg_stat_activity
WHERE usename = 'mallory' AND query = '$sql' AND datname = '$db'});
}

sub end_sessions
{
	$_->kill_kill for @_;
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM pg_stat_activity WHERE usename = 'mallory'})
	  or die 'mallory is still connected';
}

# Does `query` in `db` return `expected` within `secs` seconds?
sub within
{
	my ($secs, $db, $query, $expected) = @_;
	my $until = time + $secs;
	while (time < $until)
	{
		my ($ret, $out) = $node->psql($db, $query);
		return 1 if $ret == 0 && $out eq $expected;
		usleep(100_000);
	}
	return 0;
}

# Does the server log match `re` after `offset` within 10 s?
sub wait_log
{
	my ($re, $offset) = @_;
	for (1 .. 100)
	{
		return 1 if slurp_file($node->logfile, $offset) =~ $re;
		usleep(100_000);
	}
	return 0;
}

# Is `db` served?  A lease abandoned there (500 ms) is reclaimed within
# lease + 2 x eo.naptime, with some slack for a loaded machine.
my $n = 0;

sub served
{
	my ($db) = @_;
	my $key = 'abandoned-' . ++$n;
	$node->safe_psql($db, qq{SELECT eo_claim('$key', lease => '500 ms')});
	return within(6, $db, qq{SELECT state FROM eo_status('$key')}, 'failed');
}

ok(served($_), "$_ is served") for @dbs;

# ---- extension eo: a DROP EXTENSION queued behind an open transaction --

my $drop_ext = 'DROP EXTENSION eo;';
my $offset   = -s $node->logfile;
my @attack;
for my $db (@dbs[0 .. 5])
{
	push @attack,
	  session($db, 'mallory', q{BEGIN; SELECT pg_get_object_address('extension', '{eo}', '{}');}),
	  queued($db, $drop_ext);
}
my $pid = waiting_pid($drop_ext, 'db_1');

ok(served('db_1'), 'DROP EXTENSION queued: the database is still served');
ok(served('db_7'), '... and so is a database without a queue');
usleep(2_500_000);    # passes in all seven databases meanwhile
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM pg_stat_activity
WHERE backend_type = 'eo worker' AND now() - backend_start > interval '1 s'}),
	'0', 'no pass lasts longer than a second');
my $log = slurp_file($node->logfile, $offset);
like($log, qr/a lock request on extension eo that will be refused is queued in database "db_1"/,
	'the log tells of the queued DROP EXTENSION');
like($log, qr/DETAIL:  pid $pid \(role "mallory"\) waits for AccessExclusiveLock/,
	'... naming its pid and role');
end_sessions(@attack);
is($node->safe_psql('db_1', q{SELECT count(*) FROM pg_extension WHERE extname = 'eo'}),
	'1', 'the queued DROP EXTENSION was refused in the end');

# ---- schema eo_internal: a DROP SCHEMA queued ---------------------------

# Generations switch every 2 s there: one is made ahead before the queue.
$node->safe_psql('postgres', 'ALTER DATABASE db_2 SET eo.partition_interval = 2');
$node->safe_psql('db_2', q{SELECT eo_outbox_create('ob', partition_interval => '1 hour', premake => 2)});
ok( within(10, 'db_2', q{SELECT count(*) FROM eo_partitions WHERE state = 'ahead'}, '1'),
	'a key generation is made ahead');

my $drop_schema = 'DROP SCHEMA eo_internal;';
my $queued_q = q{SELECT count(*) FROM pg_stat_activity WHERE usename = 'mallory' AND wait_event_type = 'Lock'};
$offset = -s $node->logfile;
@attack = (
	session('db_2', 'mallory', q{BEGIN; SELECT pg_get_object_address('schema', '{eo_internal}', '{}');}),
	queued('db_2', $drop_schema));
$pid = waiting_pid($drop_schema, 'db_2');
my $switched = $node->safe_psql('db_2', 'SELECT generations_switched FROM eo_metrics.maintenance');
ok(within(10, 'postgres', $queued_q, '0'),
	'DROP SCHEMA queued: the worker cancels it (it could only be refused)');
ok( wait_log(qr/cancelled the request of pid $pid \(role "mallory"\) for AccessExclusiveLock on schema "eo_internal", queued in front of maintenance/, $offset),
	'... and logs the pid and role it cancelled');
ok( within(10, 'db_2', "SELECT generations_switched > $switched FROM eo_metrics.maintenance", 't'),
	'... the key generations go on switching');
ok(within(10, 'db_2', q{SELECT count(*) FROM eo_partitions WHERE state = 'ahead'}, '1'),
	'... and the next one is made ahead');
ok(served('db_2'), '... leases are reclaimed');
is($node->safe_psql('db_2', q{SELECT eo_emit('ob', 'order', '1', 'Placed', '{}') IS NOT NULL}),
	't', '... events are emitted');
end_sessions(@attack);

# A grantee's eo_outbox_create cannot cancel anyone: it fails at once,
# naming who is in the way (in db_3 no pass needs the schema meanwhile).
$node->safe_psql('postgres', 'CREATE ROLE app LOGIN');
$node->safe_psql('db_3', q{
GRANT EXECUTE ON FUNCTION eo_outbox_create(text, name, text, int, interval, int, interval, bool) TO app;
GRANT CREATE ON SCHEMA public TO app;});
@attack = (
	session('db_3', 'mallory', q{BEGIN; SELECT pg_get_object_address('schema', '{eo_internal}', '{}');}),
	queued('db_3', $drop_schema));
$pid = waiting_pid($drop_schema, 'db_3');
my $t0 = time;
my ($ret, $out, $err) = $node->psql('db_3', q{\set VERBOSITY verbose
SET ROLE app;
SELECT eo_outbox_create('made_by_app')}, timeout => 30);
like($err, qr/ERROR:  55P03: schema "eo_internal" is locked: eo cannot make its objects there now/,
	'DROP SCHEMA queued: a grantee\'s eo_outbox_create fails with 55P03');
like($err, qr/In the way after 100 ms: pid $pid \(role "mallory"\) waits for AccessExclusiveLock/,
	'... naming the queued DROP SCHEMA, its pid and role');
cmp_ok(time - $t0, '<', 5, '... at once');
is($node->safe_psql('db_3', q{SELECT lock_waits_given_up > 0 FROM eo_metrics.maintenance}), 't',
	'... and eo_metrics.maintenance counts the wait given up');
end_sessions(@attack);

# ---- a fresh installation: the first key generation ---------------------

$node->safe_psql('fresh', q{GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text) TO app});
@attack = (
	session('fresh', 'mallory', q{BEGIN; SELECT pg_get_object_address('extension', '{eo}', '{}');}),
	queued('fresh', $drop_ext));
$t0 = time;
($ret, $out, $err) = $node->psql('fresh', q{SET ROLE app; SELECT status FROM eo_claim('first')},
	timeout => 30);
is($out, 'claimed', 'DROP EXTENSION queued: the first claim is answered');
cmp_ok(time - $t0, '<', 5, '... at once');
end_sessions(@attack);

$node->safe_psql('postgres', 'DROP DATABASE fresh');
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', q{CREATE EXTENSION eo;
GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text) TO app;});
@attack = (
	session('fresh', 'mallory', q{BEGIN; SELECT pg_get_object_address('schema', '{eo_internal}', '{}');}),
	queued('fresh', $drop_schema));
$t0 = time;
($ret, $out, $err) = $node->psql('fresh', q{SET ROLE app; SELECT status FROM eo_claim('first')},
	timeout => 30);
is($out, 'claimed', 'DROP SCHEMA queued: the first claim is answered (its helper cancels the DROP)');
cmp_ok(time - $t0, '<', 5, '... at once');
end_sessions(@attack);

# ---- the database: a DROP DATABASE queued -------------------------------

my $drop_db = 'DROP DATABASE gone;';
$offset = -s $node->logfile;
@attack = (
	session('postgres', 'mallory', q{BEGIN; SELECT pg_get_object_address('database', '{gone}', '{}');}),
	queued('postgres', $drop_db));
usleep(3_000_000);    # passes that cannot connect to gone
ok(served('db_3'), 'DROP DATABASE queued: the other databases are served');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM pg_stat_activity
WHERE backend_type = 'eo worker' AND now() - backend_start > interval '1 s'}),
	'0', '... and no pass waits to connect for longer than a second');
end_sessions(@attack);
ok(served('gone'), 'once the queue is gone, the database is served again');

$node->stop;
done_testing();
