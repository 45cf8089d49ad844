# Copyright: eo authors.  See README.
#
# Nothing runs on a standby until it is promoted:
# - a streaming standby (eo preloaded, eo.naptime = 1 s) has no eo
#   launcher, and an expired lease replicated from the primary stays
#   processing there, readable through eo_status and eo_keys_overview;
#   eo_maintain() is refused as on any read-only server;
# - after promotion the standby's launcher starts, but runs no pass while
#   the server's own configuration sets default_transaction_read_only (an
#   HA manager's fence); once it does not, the worker reclaims the lease
#   within 2 x eo.naptime, a database's read-only setting notwithstanding.
# The primary's own worker is kept out of the way with eo.databases
# naming a database that does not exist (it runs, but serves nothing).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(time usleep);

my $primary = EoTest::eo_node('primary', init => {allows_streaming => 1}, conf => q{
eo.naptime = 1
eo.databases = 'nonexistent'
});
$primary->backup('backup');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
# The standby's own settings (they follow the primary's in the file).
$standby->append_conf(
	'postgresql.conf', q{
eo.naptime = 1
eo.databases = ''
});
$standby->start;

my $launchers_q =
  q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'eo launcher'};

# The primary's launcher runs (but eo.databases keeps it out of postgres).
$primary->poll_query_until('postgres', $launchers_q, '1')
  or die 'no eo launcher on the primary';

# A lease abandoned on the primary, replicated to the standby.
my ($token, $expiry) = split /\|/,
  $primary->safe_psql('postgres',
	q{SELECT lease_token, lease_expires_at FROM eo_claim('abandoned', lease => '1 s')});
$primary->safe_psql('postgres', q{SELECT eo_claim('live', lease => '1 hour')});
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres', q{SELECT pg_is_in_recovery()}),
	't', 'the standby is in recovery');
# Well past the lease and a few of the standby's naptimes.
usleep(4_000_000);
is($standby->safe_psql('postgres', $launchers_q),
	'0', 'no eo launcher on the standby');
is( $standby->safe_psql(
		'postgres', qq{
SELECT state, lease_token = $token, lease_expires_at = '$expiry'::timestamptz,
       lease_expires_at < clock_timestamp(), last_error IS NULL
FROM eo_status('abandoned')}),
	'processing|t|t|t|t',
	'the expired lease stays processing on the standby');
is( $standby->safe_psql(
		'postgres',
		q{SELECT processing, failed, expired_leases FROM eo_keys_overview}),
	'2|0|1',
	'eo_keys_overview on the standby: two leases, one expired');
my ($ret, $stdout, $stderr) =
  $standby->psql('postgres', q{SELECT * FROM eo_maintain()});
isnt($ret, 0, 'eo_maintain() fails on the standby');
like($stderr, qr/read-only transaction|recovery is in progress/,
	'... because it is read-only');
# ... and so does the primary's worker leave it alone.
is($primary->safe_psql('postgres', q{SELECT state FROM eo_status('abandoned')}),
	'processing', 'the primary did not reclaim it either (eo.databases)');

# Promotion, with the standby's own configuration read-only, as an HA
# manager (pg_auto_failover) keeps a node it just promoted until it knows
# the old primary is gone: the launcher starts, no pass writes.  A
# database's setting (its owner's) does not stop passes.
$standby->append_conf('postgresql.conf', "default_transaction_read_only = on\n");
$standby->reload;
my $log_offset = -s $standby->logfile;
$standby->promote;
ok($standby->poll_query_until('postgres', $launchers_q, '1'),
	'after promotion an eo launcher runs on the former standby');
usleep(3_000_000);
is($standby->safe_psql('postgres', q{SELECT state FROM eo_status('abandoned')}),
	'processing', 'no pass writes while the server\'s configuration is read-only');
$standby->safe_psql('postgres', q{
SET default_transaction_read_only = off;
ALTER DATABASE postgres SET default_transaction_read_only = on});
$standby->append_conf('postgresql.conf', "default_transaction_read_only = off\n");
$standby->reload;
my $t0 = time;
ok( $standby->poll_query_until(
		'postgres', q{SELECT state FROM eo_status('abandoned')}, 'failed'),
	'and it reclaims the expired lease');
my $elapsed = time - $t0;
cmp_ok($elapsed, '<=', 2 + 1,
	sprintf('... %.1f s after the server became writable (2 x naptime, + 1 s), a database\'s read-only setting notwithstanding',
		$elapsed));
is( $standby->safe_psql(
		'postgres',
		q{SELECT state, attempts, last_error FROM eo_status('abandoned')}),
	'failed|1|lease expired', 'failed with "lease expired"');
is($standby->safe_psql('postgres', q{SELECT state FROM eo_status('live')}),
	'processing', 'the live lease is left alone');
ok($standby->log_contains(qr/eo: reclaimed 1 expired leases/, $log_offset),
	'the promoted server logs the reclaim');

my @bad =
  grep {
	/\b(ERROR|FATAL|PANIC):/
	  && !/read-only transaction|recovery is in progress/
	  && !/terminating walreceiver process due to administrator command/
  }
  split /\n/, slurp_file($standby->logfile);
is(join("\n", @bad), '', 'no unexpected errors in the standby\'s log');
@bad = grep { /\b(ERROR|FATAL|PANIC):/ } split /\n/, slurp_file($primary->logfile);
is(join("\n", @bad), '', 'no errors in the primary\'s log');

$standby->stop;
$primary->stop;
done_testing();
