# Copyright: eo authors.  See README.
#
# A transaction-mode claim has no row until its transaction commits or is
# prepared: until then eo's lock of the key (an advisory lock, objsubid
# 17743) keeps other claimers out.  Two failure paths of that design:
#
# - PREPARE TRANSACTION writes the row; the prepared transaction keeps the
#   key's lock, also across an immediate shutdown (crash recovery restores
#   the prepared transaction with its locks).  A claimer waits for it and
#   gets 'duplicate' with the result after COMMIT PREPARED, 'claimed' after
#   ROLLBACK PREPARED.
# - The backend of an uncommitted claim (no row, only the lock) is killed
#   with SIGKILL: after crash recovery nothing is left, the key is claimed
#   by the next delivery.
# - A transaction with a deferred claim that drops the extension commits.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Time::HiRes qw(usleep);
use Test::More;
use lib 'test/perl';
use EoTest;

my $node = EoTest::eo_node('prepared_claim', conf => q{
max_prepared_transactions = 5
restart_after_crash = on
});

my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);

# Start a psql that runs `$sql` and stays connected.
sub start_session
{
	my ($sql) = @_;
	my %s = (in => $sql, out => '', err => '');
	$s{h} = IPC::Run::start(
		[ 'psql', '-XAtq', '-f', '-', '-d', $node->connstr('postgres') ],
		'<', \$s{in}, '>', \$s{out}, '2>', \$s{err}, $timeout);
	return \%s;
}

# Feed session `$s` its input until some backend waits for eo's lock of
# a key.
sub wait_for_key_lock_waiter
{
	my ($s) = @_;
	for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
	{
		$s->{h}->pump_nb;
		return 1
		  if $node->safe_psql(
			'postgres', q{
SELECT count(*) > 0 FROM pg_locks
WHERE locktype = 'advisory' AND objsubid = 17743 AND NOT granted}) eq 't';
		usleep(100_000);
	}
	return 0;
}

sub prepare_claim
{
	my ($key, $gid) = @_;
	$node->safe_psql(
		'postgres', qq{
BEGIN;
SELECT status FROM eo_claim('$key');
SELECT eo_complete('$key', '"prepared"');
PREPARE TRANSACTION '$gid';});
}

for my $case (['commit', 'COMMIT PREPARED', 'duplicate|"prepared"'],
	['rollback', 'ROLLBACK PREPARED', 'claimed|'])
{
	my ($name, $finish, $expected) = @$case;
	my $key = "prepared-$name";
	my $gid = "eo_$name";

	prepare_claim($key, $gid);
	is( $node->safe_psql(
			'postgres',
			qq{SELECT count(*) FROM pg_prepared_xacts WHERE gid = '$gid'}),
		'1',
		"$name: the claim's transaction is prepared");

	$node->stop('immediate');
	$node->start;
	is( $node->safe_psql(
			'postgres', q{
SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND objsubid = 17743 AND pid IS NULL AND granted}),
		'1',
		"$name: after an immediate shutdown the prepared transaction holds the key's lock again");

	my $waiter = start_session(
		qq{SELECT 'claim=' || status || '|' || coalesce(result::text, '') FROM eo_claim('$key');\n});
	ok(wait_for_key_lock_waiter($waiter), "$name: a new claim of the key waits");
	unlike($waiter->{out}, qr/claim=/,
		"$name: the waiting claim has not returned");

	$node->safe_psql('postgres', "$finish '$gid'");
	ok(pump_until($waiter->{h}, $timeout, \$waiter->{out}, qr/^claim=.*\n/m),
		"$name: the waiting claim returns after $finish")
	  or diag("stdout: $waiter->{out}\nstderr: $waiter->{err}");
	like($waiter->{out}, qr/^claim=\Q$expected\E$/m,
		"$name: the waiting claim gets $expected");
	$waiter->{in} .= "\\q\n";
	$waiter->{h}->finish;
}

# SIGKILL of a backend whose claim has no row yet, with a claimer waiting.
my $victim = start_session(q{
BEGIN;
SELECT 'pid=' || pg_backend_pid();
SELECT 'claim=' || status FROM eo_claim('killed-pending');
});
ok(pump_until($victim->{h}, $timeout, \$victim->{out}, qr/^claim=.*\n/m),
	'victim claimed killed-pending in an open transaction')
  or diag("stdout: $victim->{out}\nstderr: $victim->{err}");
my ($pid) = $victim->{out} =~ /^pid=(\d+)$/m;
is($node->safe_psql('postgres', q{SELECT count(*) FROM eo_keys() WHERE key = 'killed-pending'}),
	'0', 'the uncommitted claim has no row');

my $waiter = start_session(
	qq{SELECT 'claim=' || status FROM eo_claim('killed-pending');\n});
ok(wait_for_key_lock_waiter($waiter), 'a second claimer waits for the key lock');

my $log_offset = -s $node->logfile;
is(kill('KILL', $pid), 1, "sent SIGKILL to backend $pid");
ok($node->wait_for_log(qr/all server processes terminated; reinitializing/,
		$log_offset),
	'postmaster reinitialized after the killed backend');
$victim->{h}->finish;
$waiter->{h}->finish;
$node->poll_query_until('postgres', 'SELECT true')
  or die 'server did not come back';

is($node->safe_psql('postgres', q{SELECT count(*) FROM eo_status('killed-pending')}),
	'0', 'after crash recovery the killed claim left no trace');
is($node->safe_psql('postgres', q{SELECT status FROM eo_claim('killed-pending')}),
	'claimed', 'the next delivery claims the key');

# A transaction that made a deferred claim and then dropped the extension
# commits: the claim is forgotten with the key store.
is( $node->safe_psql(
		'postgres', q{
BEGIN;
SELECT status FROM eo_claim('dropped-with-eo');
DROP EXTENSION eo;
COMMIT;
CREATE EXTENSION eo;
SELECT count(*) FROM eo_status('dropped-with-eo');}),
	"claimed\n0",
	'a deferred claim in a transaction that drops eo: COMMIT works, no key');

$node->stop;
done_testing();
