# Copyright: eo authors.  See README.
#
# The background worker reclaims abandoned leases on its own.  With
# shared_preload_libraries = 'eo' and eo.naptime = 1 s:
# - the launcher shows in pg_stat_activity ('eo launcher', no database);
# - a lease abandoned by its holder (lease 2 s) becomes failed with
#   'lease expired' within lease + 2 x eo.naptime of the claim, and not
#   before it expired; the server log says so; the next claim gets it;
# - the worker serves every database that has eo, with that database's
#   settings (eo.max_attempts set per database: the key becomes dead), and
#   leaves databases without eo alone, without errors;
# - a live lease is never touched: neither a long one nor a short one that
#   its holder keeps extending;
# - eo.databases limits the databases served: a database not listed keeps
#   its expired lease until the list is cleared again;
# - with more databases than free background worker slots, every database
#   still gets its turn.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(time usleep);

my $naptime = 1;
my $lease   = 2;
my $bound   = $lease + 2 * $naptime;

my $node = EoTest::eo_node('worker_reclaim', conf => qq{
eo.naptime = $naptime
}, eo_in => []);

$node->safe_psql('postgres', 'CREATE EXTENSION eo');
$node->safe_psql('postgres', 'CREATE DATABASE served');
$node->safe_psql('served',   'CREATE EXTENSION eo');
$node->safe_psql('postgres', 'CREATE DATABASE noeo');
# a key of 'served' becomes dead at its first reclaim
$node->safe_psql('postgres',
	'ALTER DATABASE served SET eo.max_attempts = 1');

# ---- the launcher -------------------------------------------------------

# One launcher, connected to no database; between passes it waits on its
# latch (an Extension wait event: named ones need PostgreSQL 17).
ok( $node->poll_query_until(
		'postgres', q{
SELECT count(*) || '|' || bool_and(datname IS NULL) || '|' || string_agg(wait_event_type, ',')
FROM pg_stat_activity WHERE backend_type = 'eo launcher'}, '1|true|Extension'),
	'one eo launcher in pg_stat_activity, in no database, waiting on an Extension wait event');

# ---- an abandoned lease is reclaimed in time ----------------------------

# A live lease that must survive everything below.
my ($live_token, $live_expiry) = split /\|/,
  $node->safe_psql('postgres',
	q{SELECT lease_token, lease_expires_at FROM eo_claim('live', lease => '1 hour')});

my $log_offset = -s $node->logfile;
my $t0         = time;
my ($token, $claimed_at, $expires_at) = split /\|/,
  $node->safe_psql(
	'postgres',
	qq{SELECT lease_token, clock_timestamp(), lease_expires_at
	   FROM eo_claim('abandoned', lease => '$lease s')});
# The holder goes away.  Half-way through the lease the key is untouched.
usleep(1_000_000 * $lease / 2);
is( $node->safe_psql(
		'postgres',
		qq{SELECT state, lease_token = $token, last_error IS NULL
		   FROM eo_status('abandoned')}),
	'processing|t|t',
	'before its expiry the lease is left alone');

ok( $node->poll_query_until(
		'postgres', q{SELECT state FROM eo_status('abandoned')}, 'failed'),
	'the worker reclaimed the abandoned lease');
my $elapsed = time - $t0;
cmp_ok($elapsed, '<=', $bound + 0.5,
	sprintf('reclaimed %.1f s after the claim (lease %d s + 2 x naptime %d s = %d s)',
		$elapsed, $lease, $naptime, $bound));
is( $node->safe_psql(
		'postgres', qq{
SELECT state, attempts, last_error,
       updated_at >= '$expires_at'::timestamptz AS after_expiry,
       updated_at <= '$claimed_at'::timestamptz + interval '$bound s' AS within_bound,
       lease_expires_at <= clock_timestamp() AS retry_due
FROM eo_status('abandoned')}),
	'failed|1|lease expired|t|t|t',
	'failed with "lease expired" after the expiry, within the bound (server clock), retry due at once');
ok( $node->wait_for_log(
		qr/eo: reclaimed 1 expired leases(?:, | \()0 now dead/, $log_offset),
	'the server log reports the reclaim');

# The old holder is refused; the next delivery takes the key at once.
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	qq{SELECT eo_complete('abandoned', '{"late": true}', lease_token => $token)});
like($stderr, qr/lease token \d+ for idempotency key "abandoned" is stale/,
	"the old holder's late eo_complete is refused");
is( $node->safe_psql(
		'postgres',
		q{SELECT status, attempts FROM eo_claim('abandoned', lease => '1 hour')}),
	'claimed|2',
	'the next delivery claims the reclaimed key (attempt 2)');

# ---- other databases ----------------------------------------------------

$node->safe_psql('served',
	q{SELECT eo_claim('served:abandoned', lease => '1 s')});
ok( $node->poll_query_until(
		'served', q{SELECT state FROM eo_status('served:abandoned')}, 'dead'),
	'database "served": the worker reclaims there too, with its own eo.max_attempts (1): dead');
is( $node->safe_psql(
		'served',
		q{SELECT state, attempts, last_error FROM eo_status('served:abandoned')}),
	'dead|1|lease expired',
	'dead after its one attempt');
ok( $node->wait_for_log(qr/eo: reclaimed 1 expired leases(?:, | \()1 now dead/, $log_offset),
	'the server log reports the dead key');

# ---- a live lease, kept alive by its holder ------------------------------

my ($rtoken) = $node->safe_psql('postgres',
	q{SELECT lease_token FROM eo_claim('renewed', lease => '2 s')});
my $renewals_ok = 1;
for my $i (1 .. 5)
{
	usleep(1_000_000);
	my ($r, $o, $e) = $node->psql('postgres',
		qq{SELECT eo_extend('renewed', $rtoken, '2 s')});
	if ($r != 0)
	{
		diag("renewal $i failed: $e");
		$renewals_ok = 0;
		last;
	}
}
ok($renewals_ok,
	'a 2 s lease extended every second for 5 s is never reclaimed (every eo_extend succeeded)');
$node->safe_psql('postgres',
	qq{SELECT eo_complete('renewed', '"ok"', lease_token => $rtoken)});
is($node->safe_psql('postgres', q{SELECT state, result FROM eo_status('renewed')}),
	'done|"ok"', 'its holder completes it');

# ---- eo.databases --------------------------------------------------------

$node->safe_psql('postgres', q{ALTER SYSTEM SET eo.databases = 'postgres'});
$node->reload;
$node->poll_query_until('served', q{SHOW eo.databases}, 'postgres')
  or die 'eo.databases not reloaded';
# A pass that started before the reload may still be on its way; let it end.
usleep(2_000_000 * $naptime);

$node->safe_psql('served',
	q{SELECT eo_claim('served:unlisted', lease => '1 s')});
$node->safe_psql('postgres',
	q{SELECT eo_claim('listed', lease => '1 s')});
ok( $node->poll_query_until(
		'postgres', q{SELECT state FROM eo_status('listed')}, 'failed'),
	'eo.databases = postgres: postgres is still served');
# Give the worker two more passes for 'served'.
usleep(1_000_000 * (2 * $naptime + 0.5));
is( $node->safe_psql(
		'served', q{
SELECT state, last_error IS NULL, lease_expires_at < clock_timestamp()
FROM eo_status('served:unlisted')}),
	'processing|t|t',
	'a database not listed in eo.databases keeps its expired lease');
is( $node->safe_psql(
		'served', q{SELECT expired_leases FROM eo_keys_overview}),
	'1', 'eo_keys_overview there shows it as an expired lease');

$node->safe_psql('postgres', q{ALTER SYSTEM RESET eo.databases});
$node->reload;
ok( $node->poll_query_until(
		'served', q{SELECT state FROM eo_status('served:unlisted')}, 'dead'),
	'eo.databases cleared: the database is served again');

# ---- the live lease, untouched all along --------------------------------

is( $node->safe_psql(
		'postgres', qq{
SELECT state, attempts, lease_token = $live_token,
       lease_expires_at = '$live_expiry'::timestamptz, last_error IS NULL
FROM eo_status('live')}),
	'processing|1|t|t|t',
	'the one-hour lease was never touched');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'eo launcher'}),
	'1', 'still one launcher');

# Nothing went wrong: the only error in the log is the refused late
# complete above; no process crashed or exited with an error.
my @bad = grep { /\b(ERROR|FATAL|PANIC):/ && !/lease token \d+ for idempotency key "abandoned" is stale/ }
  split /\n/, slurp_file($node->logfile);
is(join("\n", @bad), '', 'no unexpected errors in the server log');
unlike(
	slurp_file($node->logfile),
	qr/terminated by signal|exited with exit code [1-9]/,
	'no process crashed or failed');

# ---- more databases than free worker slots -------------------------------

# Every database is served even when not all passes fit in the background
# worker slots at once: with max_worker_processes = 4 (the launcher and
# the logical replication launcher take two), six databases to visit and
# two free slots, every database must still get its turn within a few
# naptimes.
$node->append_conf('postgresql.conf', 'max_worker_processes = 4');
$node->restart;
for my $db (map { "more_$_" } 1 .. 3)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION eo');
}
$log_offset = -s $node->logfile;
my @dbs = ('postgres', 'served', map { "more_$_" } 1 .. 3);
$node->safe_psql($_, q{SELECT eo_claim('slots', lease => '1 s')}) for @dbs;
usleep(1_000_000 * (1 + 6 * $naptime));
my @unserved =
  grep { $node->safe_psql($_, q{SELECT state FROM eo_status('slots')}) eq 'processing' } @dbs;
is(join(', ', @unserved), '',
	'two free worker slots, six databases: every database was served within 6 naptimes');
ok($node->log_contains(qr/eo: no background worker slot free/, $log_offset),
	'the launcher logged that it ran out of worker slots');
@bad = grep { /\b(ERROR|FATAL|PANIC):|terminated by signal|exited with exit code [1-9]/ }
  split /\n/, slurp_file($node->logfile, $log_offset);
is(join("\n", @bad), '', 'no errors in the log since the restart');

$node->stop;
done_testing();
