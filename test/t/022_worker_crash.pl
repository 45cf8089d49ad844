# Copyright: eo authors.  See README.
#
# The launcher survives its own crash, and keys and leases survive both a
# crash and a clean restart:
# - kill -9 of the launcher: the postmaster goes through a crash restart
#   (restart_after_crash = on, as on a user's server); a new launcher
#   starts and reclaims again, including a lease abandoned before the
#   crash; a live lease keeps its token and expiry, a done key its result;
# - pg_terminate_backend() of the launcher: a clean exit, no crash
#   restart; the postmaster starts it again;
# - a server restart: the same, and fencing tokens handed out afterwards
#   are larger than all before.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(time usleep);

my $node = EoTest::eo_node('worker_crash', conf => q{
eo.naptime = 1
# Cluster.pm turns crash restarts off; a user's server has them on.
restart_after_crash = on
});


# The state that must survive: a live lease, a done key, a failed key.
my $keys_q = q{
SELECT key, s.state, s.result, s.attempts, s.lease_token, s.lease_expires_at, s.last_error
FROM unnest(ARRAY['live', 'done', 'reclaimed']) AS key, eo_status(key) AS s
ORDER BY key};

my ($live_token) = $node->safe_psql('postgres',
	q{SELECT lease_token FROM eo_claim('live', lease => '1 hour')});
$node->safe_psql('postgres',
	q{BEGIN; SELECT eo_claim('done'); SELECT eo_complete('done', '{"n": 1}'); COMMIT;});
$node->safe_psql('postgres', q{SELECT eo_claim('reclaimed', lease => '1 s')});
ok( $node->poll_query_until(
		'postgres', q{SELECT state FROM eo_status('reclaimed')}, 'failed'),
	'before the crash: the worker reclaims');
my $before = $node->safe_psql('postgres', $keys_q);
like($before, qr/^done\|done\|\{"n": 1\}\|1\|\|\|$/m, 'done key');
like($before, qr/^live\|processing\|\|1\|$live_token\|/m, 'live lease');
like($before, qr/^reclaimed\|failed\|\|1\|.*\|lease expired$/m, 'reclaimed key');

# ---- kill -9 of the launcher ------------------------------------------------

# A lease abandoned just before the crash: expires while the server restarts.
$node->safe_psql('postgres', q{SELECT eo_claim('across-crash', lease => '2 s')});

my $old_pid    = EoTest::launcher_pid($node);
my $log_offset = -s $node->logfile;
ok(kill('KILL', $old_pid), "kill -9 of the launcher (pid $old_pid)");
ok( $node->wait_for_log(
		qr/background worker "eo launcher" \(PID $old_pid\) was terminated by signal 9/,
		$log_offset),
	'the postmaster saw the launcher die');
ok($node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset),
	'crash restart');
# The launcher comes back (the restart is at most bgw_restart_time away).
my $t0 = time;
$node->poll_query_until('postgres',
	qq{SELECT count(*) = 1 FROM pg_stat_activity
	   WHERE backend_type = 'eo launcher' AND pid <> $old_pid})
  or die 'the launcher did not come back';
my $new_pid = EoTest::launcher_pid($node);
isnt($new_pid, $old_pid, "a new launcher runs (pid $new_pid)");
note(sprintf('the launcher was back %.1f s after the server accepted connections', time - $t0));

is($node->safe_psql('postgres', $keys_q),
	$before, 'after the crash: the live lease, the done key and the failed key are unchanged');
ok( $node->poll_query_until(
		'postgres', q{SELECT state FROM eo_status('across-crash')}, 'failed'),
	'the lease abandoned before the crash is reclaimed after it');
$node->safe_psql('postgres', q{SELECT eo_claim('after-crash', lease => '1 s')});
ok( $node->poll_query_until(
		'postgres', q{SELECT state FROM eo_status('after-crash')}, 'failed'),
	'the new launcher keeps reclaiming');
is($node->safe_psql('postgres', $keys_q), $before, 'the live lease is left alone');

# ---- SIGTERM of the launcher ----------------------------------------------

# pg_terminate_backend() stops the launcher cleanly: no crash restart,
# and the postmaster starts it again after its restart interval (10 s).
$old_pid    = EoTest::launcher_pid($node);
$log_offset = -s $node->logfile;
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($old_pid)"),
	't', 'pg_terminate_backend() of the launcher');
$t0 = time;
$node->poll_query_until('postgres',
	qq{SELECT count(*) = 1 FROM pg_stat_activity
	   WHERE backend_type = 'eo launcher' AND pid <> $old_pid})
  or die 'the launcher did not come back after SIGTERM';
my $back = time - $t0;
cmp_ok($back, '<=', 15, sprintf('the launcher came back %.1f s after SIGTERM', $back));
ok(!$node->log_contains(qr/all server processes terminated; reinitializing/, $log_offset),
	'SIGTERM of the launcher causes no crash restart');
$node->safe_psql('postgres', q{SELECT eo_claim('after-sigterm', lease => '1 s')});
ok( $node->poll_query_until(
		'postgres', q{SELECT state FROM eo_status('after-sigterm')}, 'failed'),
	'the restarted launcher reclaims');
is($node->safe_psql('postgres', $keys_q), $before, 'the live lease is left alone');

# ---- a clean restart ------------------------------------------------------

$node->safe_psql('postgres', q{SELECT eo_claim('across-restart', lease => '2 s')});
$old_pid = EoTest::launcher_pid($node);
$node->restart;
$new_pid = EoTest::launcher_pid($node);
isnt($new_pid, $old_pid, 'after a restart a new launcher runs');
is($node->safe_psql('postgres', $keys_q),
	$before, 'after the restart: the live lease, the done key and the failed key are unchanged');
ok( $node->poll_query_until(
		'postgres', q{SELECT state FROM eo_status('across-restart')}, 'failed'),
	'the lease abandoned before the restart is reclaimed after it');

# The holder of the live lease still holds it, and new tokens are larger.
my ($new_token) = $node->safe_psql('postgres',
	q{SELECT lease_token FROM eo_claim('new', lease => '1 hour')});
cmp_ok($new_token, '>', $live_token, 'tokens after the restart are larger');
$node->safe_psql('postgres',
	qq{SELECT eo_complete('live', '"ok"', lease_token => $live_token)});
is($node->safe_psql('postgres', q{SELECT state, result FROM eo_status('live')}),
	'done|"ok"', 'the pre-crash holder completes its lease with its token');

# Errors in the log: only what the crash itself causes (connections
# terminated, and this test's own connection attempts during recovery).
my @bad = grep {
	/\b(ERROR|FATAL|PANIC):/
	  && !/terminating connection because of crash of another server process/
	  && !/the database system is (not yet accepting connections|in recovery mode|starting up|shutting down)/
	  && !/terminating background worker "eo launcher" due to administrator command/
	  && !/terminating connection due to administrator command/
} split /\n/, slurp_file($node->logfile);
is(join("\n", @bad), '', 'no unexpected errors in the server log');

$node->stop;
done_testing();
