# Copyright: eo authors.  See README.
#
# eo.naptime is reloaded with the configuration (SIGHUP), without a restart
# and without waiting out the old naptime:
# - with eo.naptime = 3600 an expired lease stays processing;
# - ALTER SYSTEM SET eo.naptime = 1 and pg_reload_conf(): it is reclaimed
#   within a couple of seconds, by the same launcher process;
# - back to 3600: expired leases are left alone again;
# - an invalid value in the configuration file is refused at reload; the
#   launcher keeps running with the old value.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(time usleep);

my $node = EoTest::eo_node('worker_sighup', conf => "eo.naptime = 3600");

my $launcher_q =
  q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'eo launcher'};
my $launcher = EoTest::launcher_pid($node);

# Its first pass ran at start-up; the next one is an hour away.
$node->safe_psql('postgres', q{SELECT eo_claim('k1', lease => '1 s')});
usleep(3_000_000);
is( $node->safe_psql(
		'postgres', q{
SELECT state, lease_expires_at < clock_timestamp() FROM eo_status('k1')}),
	'processing|t',
	'eo.naptime = 3600: a lease expired 2 s ago is still processing');

# Reload with eo.naptime = 1.
my $log_offset = -s $node->logfile;
my $t0         = time;
$node->safe_psql('postgres',
	q{ALTER SYSTEM SET eo.naptime = 1; SELECT pg_reload_conf()});
ok($node->poll_query_until('postgres', q{SELECT state FROM eo_status('k1')}, 'failed'),
	'after the reload the expired lease is reclaimed');
my $elapsed = time - $t0;
cmp_ok($elapsed, '<=', 3,
	sprintf('... %.1f s after pg_reload_conf() (at most 2 x the new naptime + 1 s)', $elapsed));
is($node->safe_psql('postgres', q{SELECT state, last_error FROM eo_status('k1')}),
	'failed|lease expired', 'failed with "lease expired"');
ok($node->log_contains(qr/parameter "eo.naptime" changed to "1"/, $log_offset),
	'the server log shows the new naptime');
is($node->safe_psql('postgres', $launcher_q),
	$launcher, 'the same launcher process (a reload, not a restart)');

# With naptime 1 s the worker keeps reclaiming.
$node->safe_psql('postgres', q{SELECT eo_claim('k2', lease => '1 s')});
ok($node->poll_query_until('postgres', q{SELECT state FROM eo_status('k2')}, 'failed'),
	'a second abandoned lease is reclaimed too');

# Back to an hour: once the reload is through, expired leases stay.
$node->safe_psql('postgres',
	q{ALTER SYSTEM SET eo.naptime = 3600; SELECT pg_reload_conf()});
$node->poll_query_until('postgres', q{SHOW eo.naptime}, '1h')
  or die 'eo.naptime not reloaded';
# a pass started just before the reload may still be running; let it end
usleep(1_500_000);
$node->safe_psql('postgres', q{SELECT eo_claim('k3', lease => '1 s')});
usleep(3_000_000);
is($node->safe_psql('postgres', q{SELECT state FROM eo_status('k3')}),
	'processing', 'eo.naptime back to 3600: the next expired lease is left alone');

# An invalid value in the configuration file (ALTER SYSTEM would refuse
# it) is refused at reload: the old value stays and the launcher lives on.
$log_offset = -s $node->logfile;
$node->append_conf('postgresql.auto.conf', 'eo.naptime = 0');
$node->reload;
ok( $node->wait_for_log(
		qr/outside the valid range for parameter "eo.naptime"/,
		$log_offset),
	'eo.naptime = 0 in the configuration file is refused at reload');
is($node->safe_psql('postgres', q{SHOW eo.naptime}), '1h', 'eo.naptime is still 1h');
usleep(1_000_000);
is($node->safe_psql('postgres', $launcher_q),
	$launcher, 'the launcher is still the same process');
is($node->safe_psql('postgres', q{SELECT state FROM eo_status('k3')}),
	'processing', 'and still waits an hour between passes');

# A valid value again, through the same file: reclaimed at once.
$node->safe_psql('postgres',
	q{ALTER SYSTEM SET eo.naptime = '1s'; SELECT pg_reload_conf()});
ok($node->poll_query_until('postgres', q{SELECT state FROM eo_status('k3')}, 'failed'),
	'eo.naptime = 1s: reclaimed');

my @bad = grep { /\b(ERROR|FATAL|PANIC):/ }
  split /\n/, slurp_file($node->logfile);
is(join("\n", @bad), '', 'no errors in the server log');

$node->stop;
done_testing();
