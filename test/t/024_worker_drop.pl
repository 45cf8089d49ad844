# Copyright: eo authors.  See README.
#
# DROP EXTENSION and DROP DATABASE while the worker runs (eo.naptime = 1 s):
# - DROP EXTENSION eo in one database: no errors in the log, the other
#   databases are still served; CREATE EXTENSION eo again and the database
#   is served again; the same with the DROP or the CREATE left open across
#   several passes;
# - DROP DATABASE of a database that has eo succeeds at the first attempt
#   (the worker's passes are short-lived connections), over several
#   rounds;
# - the launcher lives through all of it and keeps serving.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(time usleep);

my $node = EoTest::eo_node('worker_drop', conf => "eo.naptime = 1", eo_in => []);

my $launcher_q =
  q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'eo launcher'};
my $launcher = EoTest::launcher_pid($node);

for my $db ('db_a', 'db_b')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION eo');
}

# Is $db served?  An abandoned lease there is reclaimed.
my $n = 0;

sub served
{
	my ($db) = @_;
	my $key = 'abandoned-' . ++$n;
	$node->safe_psql($db, qq{SELECT eo_claim('$key', lease => '500 ms')});
	return $node->poll_query_until($db,
		qq{SELECT state FROM eo_status('$key')}, 'failed');
}

# Errors in the log after $offset, other than those matching $allowed.
sub log_errors
{
	my ($offset, $allowed) = @_;
	my $log = slurp_file($node->logfile, $offset);
	my @bad = grep { /\b(ERROR|FATAL|PANIC):|exited with exit code [1-9]|terminated by signal/ }
	  split /\n/, $log;
	@bad = grep { !/$allowed/ } @bad if defined $allowed;
	return join("\n", @bad);
}

ok(served('db_a'), 'db_a is served');
ok(served('db_b'), 'db_b is served');

# ---- DROP EXTENSION ------------------------------------------------------

my $offset = -s $node->logfile;
$node->safe_psql('db_a', 'DROP EXTENSION eo');
usleep(3_000_000);    # three passes
ok(served('db_b'), 'after DROP EXTENSION in db_a, db_b is still served');
is(log_errors($offset), '', 'no errors in the log after DROP EXTENSION');

$node->safe_psql('db_a', 'CREATE EXTENSION eo');
ok(served('db_a'), 'CREATE EXTENSION again: db_a is served again');

# The DROP left open across several passes: the passes meet an extension
# that is being dropped (and wait for it, or find it gone).
$offset = -s $node->logfile;
$node->safe_psql('db_a',
	q{SELECT eo_claim('pending', lease => '100 ms'); SELECT pg_sleep(0.2)});
$node->safe_psql('db_a',
	q{BEGIN; DROP EXTENSION eo; SELECT pg_sleep(2.5); COMMIT;});
usleep(2_000_000);
ok(served('db_b'), 'slow DROP EXTENSION in db_a: db_b is still served');
is(log_errors($offset), '', 'no errors in the log after a slow DROP EXTENSION');

# ... and the CREATE left open across several passes.
$offset = -s $node->logfile;
$node->safe_psql(
	'db_a', q{
BEGIN;
CREATE EXTENSION eo;
SELECT eo_claim('during-create', lease => '100 ms');
SELECT pg_sleep(2.5);
COMMIT;});
ok( $node->poll_query_until(
		'db_a', q{SELECT state FROM eo_status('during-create')}, 'failed'),
	'slow CREATE EXTENSION: served once it commits');
is(log_errors($offset), '', 'no errors in the log after a slow CREATE EXTENSION');

# ---- DROP DATABASE -------------------------------------------------------

# Several rounds, each dropping a database the worker is serving, at
# different points of its 1 s cycle.  Plain DROP DATABASE must succeed
# the first time: a pass lasts far less than the 5 s DROP DATABASE waits
# for other sessions to leave.
$offset = -s $node->logfile;
my @first_errors;
my $dropped = 0;
my @dbs = ('db_b', map { "db_drop_$_" } 1 .. 4);
for my $i (0 .. $#dbs)
{
	my $db = $dbs[$i];
	if ($db ne 'db_b')
	{
		$node->safe_psql('postgres', "CREATE DATABASE $db");
		$node->safe_psql($db, 'CREATE EXTENSION eo');
		served($db) or die "$db is not served";
	}
	# some keys, one with an expired lease for the next pass to reclaim
	$node->safe_psql($db,
		q{SELECT eo_claim('k' || g, lease => '10 ms') FROM generate_series(1, 100) g});
	usleep(250_000 * $i);
	my $ok = 0;
	for my $attempt (1 .. 5)
	{
		my ($ret, $stdout, $stderr) =
		  $node->psql('postgres', "DROP DATABASE $db");
		if ($ret == 0)
		{
			$ok = 1;
			last;
		}
		push @first_errors, "$db, attempt $attempt: $stderr";
		usleep(200_000);
	}
	$dropped++ if $ok;
}
is($dropped, scalar @dbs, 'every DROP DATABASE succeeded (with retries)');
is(join("\n", @first_errors), '', 'no DROP DATABASE needed a retry');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_database WHERE datname ~ '^db_(b|drop_)'}),
	'0', 'the databases are gone');

# ---- the launcher lives on -----------------------------------------------

is($node->safe_psql('postgres', $launcher_q),
	$launcher, 'the launcher is the same process as at the start');
ok(served('db_a'), 'db_a is still served');
$node->safe_psql('postgres', 'CREATE EXTENSION eo');
ok(served('postgres'), 'a database that gets eo now is served too');
is(log_errors($offset), '', 'no errors in the log after the DROP DATABASEs');

$node->stop;
done_testing();
