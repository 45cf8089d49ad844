# Copyright: eo authors.  See README.
#
# Recovery points across a crash (docs/guides.md, "Work with several
# outside steps"): a ride is created, a card charged, a receipt sent, each
# step's point recorded with the key under its lease.  Two workers are
# killed with SIGKILL mid-transaction, and the server goes through crash
# recovery:
# - ride:7's worker had created the ride (step 1, committed with its
#   point) and called the card service, and was recording 'charged' in a
#   transaction that never committed: the next holder resumes at
#   'ride_created' with the ride's id, calls the card service again with
#   the same idempotency key (which answers from its own record: one
#   charge), and the dead worker's token is refused (55006);
# - ride:8's worker died inside step 1: neither the ride nor the point is
#   there, and the next holder starts from the beginning.
# A third worker resumes ride:7 at 'charged', sends the receipt and
# completes: one ride, one charge, one receipt.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;
use lib 'test/perl';
use EoTest;

my $node = EoTest::eo_node('recovery_points', conf => "restart_after_crash = on");
$node->safe_psql(
	'postgres', q{
CREATE TABLE rides (id bigserial PRIMARY KEY, request text UNIQUE NOT NULL);
CREATE TABLE receipts (ride_id bigint PRIMARY KEY);
-- the card service: every call it gets, and its own idempotency record
CREATE TABLE card_calls (n serial, idempotency_key text NOT NULL);
CREATE TABLE card_charges (idempotency_key text PRIMARY KEY, amount int NOT NULL);
});

# A call to the card service: outside the worker's transactions.
sub charge_card
{
	my ($key) = @_;
	$node->safe_psql(
		'postgres', qq{
INSERT INTO card_calls (idempotency_key) VALUES ('$key:charge');
INSERT INTO card_charges VALUES ('$key:charge', 100) ON CONFLICT DO NOTHING;});
	return;
}

my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);

# A worker: a psql session fed `sql`, until it prints `until`.
sub worker
{
	my ($name, $sql, $until) = @_;
	my %w = (in => $sql, out => '', err => '');
	$w{h} = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-f', '-', '-d', $node->connstr('postgres') ],
		'<', \$w{in}, '>', \$w{out}, '2>', \$w{err}, $timeout);
	ok(pump_until($w{h}, $timeout, \$w{out}, $until), "$name got as far as it should")
	  or diag("stdout: $w{out}\nstderr: $w{err}");
	($w{pid}) = $w{out} =~ /^pid=(\d+)$/m;
	($w{token}) = $w{out} =~ /^token=(\d+)$/m;
	return \%w;
}

# ride:7: step 1 committed with its point, then the card call ...
my $w7 = worker(
	'ride:7 worker', q{
SELECT 'pid=' || pg_backend_pid();
SELECT lease_token AS token FROM eo_claim('ride:7', lease => '1 second') \gset
SELECT 'token=' || :token;
BEGIN;
INSERT INTO rides (request) VALUES ('ride:7') RETURNING id AS ride_id \gset
SELECT eo_recovery_point('ride:7', :token, 'ride_created', jsonb_build_object('ride_id', :ride_id));
COMMIT;
SELECT 'step1=done';
}, qr/^step1=done$/m);
charge_card('ride:7');
# ... and the point 'charged' recorded in a transaction that is open when
# the worker dies.
$w7->{in} .= q{
BEGIN;
SELECT eo_recovery_point('ride:7', :token, 'charged', '{"charge": "ride:7:charge"}');
SELECT 'charged=uncommitted';
};
ok(pump_until($w7->{h}, $timeout, \$w7->{out}, qr/^charged=uncommitted$/m),
	'ride:7 worker is recording the charge, uncommitted');

# ride:8: the worker dies inside step 1.
my $w8 = worker(
	'ride:8 worker', q{
SELECT 'pid=' || pg_backend_pid();
SELECT lease_token AS token FROM eo_claim('ride:8', lease => '1 second') \gset
BEGIN;
INSERT INTO rides (request) VALUES ('ride:8') RETURNING id AS ride_id \gset
SELECT eo_recovery_point('ride:8', :token, 'ride_created', jsonb_build_object('ride_id', :ride_id));
SELECT 'step1=uncommitted';
}, qr/^step1=uncommitted$/m);
ok(defined $w7->{pid} && defined $w7->{token}, 'the ride:7 worker\'s backend and token are known');

my $log_offset = -s $node->logfile;
is(kill('KILL', $w7->{pid}), 1, 'SIGKILL to the ride:7 worker\'s backend');
ok($node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset),
	'the postmaster went through crash recovery');
ok($node->poll_query_until('postgres', 'SELECT 1', '1'), 'the server is back');
$_->{h}->kill_kill for ($w7, $w8);

is( $node->safe_psql(
		'postgres', q{
SELECT request FROM rides ORDER BY id;
SELECT recovery_point, recovery_state FROM eo_keys() WHERE key IN ('ride:7', 'ride:8') ORDER BY key}),
	"ride:7\nride_created|{\"ride_id\": 1}\n|",
	'after the crash: ride:7 at its committed point, ride:8 with neither ride nor point');

# The leases (1 s) run out; the next holders resume.
sleep 2;
my $b7 = $node->safe_psql(
	'postgres', q{
SELECT status, attempts, lease_token AS token, recovery_point, recovery_state
FROM eo_claim('ride:7', lease => '1 minute') \gset
SELECT :'status', :attempts, :'recovery_point', :'recovery_state';
SELECT :token;});
my ($b7_claim, $b7_token) = split /\n/, $b7;
is($b7_claim, 'claimed|2|ride_created|{"ride_id": 1}',
	'the next holder of ride:7 resumes at ride_created, with the ride\'s id');
is( $node->safe_psql(
		'postgres', q{SELECT status, attempts, recovery_point IS NULL, recovery_state IS NULL
FROM eo_claim('ride:8', lease => '1 minute')}),
	'claimed|2|t|t', 'the next holder of ride:8 starts from the beginning');

# The dead worker's token is fenced out.
my ($rc, $o, $e) = $node->psql('postgres',
	"SELECT eo_recovery_point('ride:7', $w7->{token}, 'charged')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($e, qr/ERROR:  55006:/, 'the killed worker\'s token cannot record a point (55006)');

# Step 2 again: the card service answers from its record.
charge_card('ride:7');
$node->safe_psql('postgres',
	"SELECT eo_recovery_point('ride:7', $b7_token, 'charged', '{\"ride_id\": 1, \"charge\": \"ride:7:charge\"}')");
is($node->safe_psql('postgres', 'SELECT count(*) FROM card_calls; SELECT count(*) FROM card_charges'),
	"2\n1", 'the card service was called twice and charged once');

# That holder goes away too (its lease cut short, so as not to wait a
# minute); the third resumes at 'charged' and finishes.
$node->safe_psql('postgres', "SELECT eo_extend('ride:7', $b7_token, '1 ms')");
sleep 1;
is( $node->safe_psql(
		'postgres', q{
SELECT lease_token AS token, recovery_point, recovery_state
FROM eo_claim('ride:7', lease => '1 minute') \gset
SELECT :'recovery_point';
BEGIN;
INSERT INTO receipts VALUES ((:'recovery_state'::jsonb ->> 'ride_id')::bigint);
SELECT eo_complete('ride:7', :'recovery_state'::jsonb, lease_token => :token);
COMMIT;}),
	"charged\n", 'the third holder resumes at charged, sends the receipt and completes');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM rides WHERE request = 'ride:7';
SELECT count(*) FROM card_charges;
SELECT count(*) FROM receipts;
SELECT status, result FROM eo_claim('ride:7', lease => '1 minute')}),
	"1\n1\n1\nduplicate|{\"charge\": \"ride:7:charge\", \"ride_id\": 1}",
	'one ride, one charge, one receipt; the key is done with its result');

$node->stop;
done_testing();
