# Copyright: eo authors.  See README.
#
# Transaction mode: a backend that claimed a key and is killed (SIGKILL)
# before COMMIT leaves no trace.  The postmaster goes through crash
# recovery; afterwards the key is unknown to eo_status and the next
# delivery claims it, while a key committed before the crash is still a
# duplicate with its stored result.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;
use lib 'test/perl';
use EoTest;

# Cluster.pm turns crash restarts off; a user's server has them on.
my $node = EoTest::eo_node('killed_backend', conf => "restart_after_crash = on");

# A key whose work was completed and committed before the crash.
is( $node->safe_psql(
		'postgres', q{
BEGIN;
SELECT status FROM eo_claim('done-before');
SELECT eo_complete('done-before', '{"charge": "ch_1"}');
COMMIT;}),
	"claimed\n",
	'key done-before claimed and completed before the crash');
is( $node->safe_psql(
		'postgres',
		q{SELECT status, result FROM eo_claim('done-before')}),
	'duplicate|{"charge": "ch_1"}',
	'done-before is a duplicate before the crash');

# The victim: BEGIN; eo_claim('k'); and the transaction stays open.
my ($in, $out, $err) = ('', '', '');
my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
my $victim = IPC::Run::start(
	[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-f', '-',
	  '-d', $node->connstr('postgres') ],
	'<', \$in, '>', \$out, '2>', \$err, $timeout);

$in .= q{
BEGIN;
SELECT 'pid=' || pg_backend_pid();
SELECT 'claim=' || status FROM eo_claim('k');
SELECT 'own-status=' || state FROM eo_status('k');
};
ok(pump_until($victim, $timeout, \$out, qr/^own-status=.*\n/m),
	'victim claimed k inside an open transaction')
  or diag("victim stdout: $out\nstderr: $err");
my ($pid) = $out =~ /^pid=(\d+)$/m;
like($out, qr/^claim=claimed$/m, "victim's eo_claim('k') returned claimed");
like($out, qr/^own-status=processing$/m,
	'eo_status shows k as processing inside the claiming transaction');
ok(defined $pid, "victim's backend pid is known");

is( $node->safe_psql(
		'postgres',
		qq{SELECT state FROM pg_stat_activity WHERE pid = $pid}),
	'idle in transaction',
	'victim is idle in transaction, uncommitted');
# eo_status waits for the claim's transaction to end: here it
# never ends by itself, so a statement timeout cuts the wait.
my (undef, undef, $status_err) = $node->psql('postgres',
	q{SET statement_timeout = '300ms'; SELECT count(*) FROM eo_status('k')});
like($status_err, qr/canceling statement due to statement timeout/,
	'another session\'s eo_status waits while the claim is uncommitted');

# Write the uncommitted row to disk, so that the files recovery starts from
# hold k's row version (heap and index) from a transaction that never ends.
$node->safe_psql('postgres', 'CHECKPOINT');

# Kill the backend before COMMIT.
my $log_offset = -s $node->logfile;
is(kill('KILL', $pid), 1, "sent SIGKILL to backend $pid");

# The victim's psql finds its connection gone.
$in .= "SELECT 'after-kill';\n";
ok( pump_until(
		$victim, $timeout, \$err,
		qr/server closed the connection unexpectedly|connection to server was lost|could not send data to server|terminating connection/m
	),
	'victim psql lost its connection');
$victim->finish;

# The postmaster notices, resets shared memory and runs crash recovery.
ok( $node->wait_for_log(
		qr/all server processes terminated; reinitializing/, $log_offset),
	'postmaster reinitialized after the killed backend');
ok($node->poll_query_until('postgres', 'SELECT 1', '1'),
	'server accepts connections again after crash recovery');
ok( $node->log_contains(
		qr/database system was not properly shut down; automatic recovery in progress/,
		$log_offset),
	'crash recovery ran');

# No trace of the killed claim.
is($node->safe_psql('postgres', q{SELECT count(*) FROM eo_status('k')}),
	'0', 'eo_status has no row for k after recovery');
is( $node->safe_psql(
		'postgres',
		q{SELECT status, attempts, lease_token IS NULL, lease_expires_at IS NULL
		  FROM eo_claim('k')}),
	'claimed|1|t|t',
	'k is claimable again after recovery (first attempt)');
is($node->safe_psql('postgres', q{SELECT state FROM eo_status('k')}),
	'done', 'the new claim of k committed and is done');
is($node->safe_psql('postgres', q{SELECT status FROM eo_claim('k')}),
	'duplicate', 'k is now a duplicate');

# The key committed before the crash is untouched.
is( $node->safe_psql(
		'postgres',
		q{SELECT status, result, attempts FROM eo_claim('done-before')}),
	'duplicate|{"charge": "ch_1"}|1',
	'done-before is still a duplicate with its result after recovery');
is( $node->safe_psql(
		'postgres',
		q{SELECT state, result FROM eo_status('done-before')}),
	'done|{"charge": "ch_1"}',
	'eo_status of done-before: done with its result');

$node->stop;
done_testing();
