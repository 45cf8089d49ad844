# Copyright: eo authors.  See README.
#
# Lease mode: a lease claimed in autocommit is durable.  After an immediate
# shutdown (no checkpoint; crash recovery at the next start) the key is
# still processing with the same token and expiry, others still get busy,
# the holder can complete with its token, and fencing tokens handed out
# after the crash are larger than every token handed out before it.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;

my $node = EoTest::eo_node('immediate_stop_lease');

# Some tokens before the one we keep, so that the sequence has moved on.
$node->safe_psql('postgres',
	q{SELECT eo_claim('warmup:' || g, lease => '1 minute') FROM generate_series(1, 3) g});

my ($status, $token, $expires, $attempts) = split /\|/,
  $node->safe_psql(
	'postgres', q{
SELECT status, lease_token, lease_expires_at, attempts
FROM eo_claim('job:1', lease => '10 minutes')});
is($status, 'claimed', 'lease claim of job:1 before the crash');
is($attempts, 1, 'first attempt');
like($token, qr/^\d+$/, "lease token $token returned");
ok($expires ne '', "lease expires at $expires");
is( $node->safe_psql(
		'postgres',
		qq{SELECT '$expires'::timestamptz - now() > interval '9 minutes'
		          AND '$expires'::timestamptz - now() <= interval '10 minutes'}),
	't',
	'expiry is about 10 minutes ahead');

my $log_offset = -s $node->logfile;
$node->stop('immediate');
$node->start;
ok( $node->log_contains(
		qr/database system was interrupted|database system was not properly shut down/,
		$log_offset),
	'the server started with crash recovery');

is( $node->safe_psql(
		'postgres', q{
SELECT state, lease_token, lease_expires_at, attempts, result IS NULL
FROM eo_status('job:1')}),
	"processing|$token|$expires|1|t",
	'eo_status after the crash: processing with the same token and expiry');

is( $node->safe_psql(
		'postgres', q{
SELECT status, lease_token IS NULL, lease_expires_at, attempts
FROM eo_claim('job:1', lease => '10 minutes')}),
	"busy|t|$expires|1",
	'another claimer gets busy until the old expiry, without a token');
is( $node->safe_psql(
		'postgres',
		q{SELECT status, lease_expires_at FROM eo_claim('job:1')}),
	"busy|$expires",
	'a transaction-mode claimer gets busy too');

# The pre-crash holder still holds the lease: it can renew it ...
is( $node->safe_psql(
		'postgres', qq{
SELECT eo_extend('job:1', $token, '20 minutes') > '$expires'::timestamptz}),
	't',
	'eo_extend with the pre-crash token renews the lease');

# ... and finish with its token.
$node->safe_psql('postgres',
	qq{SELECT eo_complete('job:1', '{"sent": true}', lease_token => $token)});
is( $node->safe_psql(
		'postgres', q{
SELECT state, result, attempts FROM eo_status('job:1')}),
	qq(done|{"sent": true}|1),
	'eo_complete with the pre-crash token made job:1 done with its result');
is( $node->safe_psql(
		'postgres',
		q{SELECT status, result FROM eo_claim('job:1', lease => '1 minute')}),
	'duplicate|{"sent": true}',
	'job:1 is a duplicate now');

# The token sequence survived the crash.
my ($status2, $token2) = split /\|/,
  $node->safe_psql(
	'postgres',
	q{SELECT status, lease_token FROM eo_claim('job:2', lease => '10 minutes')});
is($status2, 'claimed', 'lease claim of job:2 after the crash');
cmp_ok($token2, '>', $token,
	"token after the crash ($token2) is greater than the pre-crash token ($token)");

$node->stop;
done_testing();
