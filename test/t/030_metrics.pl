# Copyright: eo authors.  See README.
#
# The exporter queries of monitoring/queries.yaml, run as a role that has
# only pg_monitor, against a database where this test did known things:
# - every query runs as that role, every metric column is a number, and
#   the role can read no key (eo_keys(), eo_key_stats(): 42501);
# - each value is what the test did: claims by answer, takeovers,
#   completions, failures, dead keys, reclaims, fingerprint conflicts,
#   stale tokens; leases live and expired, retries waiting, generations
#   and keys; per outbox and group, events emitted, fetched, acknowledged
#   and handed out again, and the oldest pending event's age;
# - the counters survive a restart, and start again from zero after a
#   crash (as pg_stat_statements');
# - the queries work as they are with eo in a schema of its own;
# - with more databases than counter slots (64), the worker's passes do
#   not crash the server, and 64 databases are counted.

use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# ---- the exporter queries -------------------------------------------------

# monitoring/queries.yaml, read with the little YAML it uses: top-level
# names, a `query: |` block, and `metrics:` entries with a usage.
sub read_queries
{
	my ($path) = @_;
	open my $fh, '<', $path or die "cannot read $path: $!";
	my (%q, $name, $in_query, $metric);
	while (my $line = <$fh>)
	{
		next if $line =~ /^\s*#/ || $line =~ /^\s*$/;
		if ($line =~ /^(\w+):\s*$/)
		{
			$name = $1;
			$q{$name} = { query => '', usage => {} };
			$in_query = 0;
		}
		elsif ($line =~ /^  query: \|\s*$/) { $in_query = 1; }
		elsif ($line =~ /^  metrics:\s*$/) { $in_query = 0; }
		elsif ($in_query && $line =~ /^    (.*)$/) { $q{$name}{query} .= "$1\n"; }
		elsif ($line =~ /^    - (\w+):\s*$/) { $metric = $1; }
		elsif ($line =~ /^        usage: "(\w+)"/) { $q{$name}{usage}{$metric} = $1; }
	}
	close $fh;
	return \%q;
}

my $queries = read_queries('monitoring/queries.yaml');
is_deeply([ sort keys %$queries ],
	[qw(eo_claims eo_keys eo_maintenance eo_outbox)],
	'queries.yaml has the four queries');

my $node = PostgreSQL::Test::Cluster->new('metrics');
$node->init;
# The worker never visits 'app': every pass counted there is eo_maintain().
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'eo'
eo.naptime = 3600
eo.databases = 'postgres'
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION eo');
$node->safe_psql('app', 'CREATE ROLE mon LOGIN IN ROLE pg_monitor');

# One exporter query as mon: its rows, as hashes of column => value.
sub scrape
{
	my ($name) = @_;
	my $q = $queries->{$name};
	my $out = $node->safe_psql('app',
		"SELECT row_to_json(q) FROM ($q->{query}) q",
		extra_params => [ '-U', 'mon' ]);
	my @rows = map { decode_json($_) } grep { $_ ne '' } split /\n/, $out;
	for my $row (@rows)
	{
		for my $col (keys %$row)
		{
			my $usage = $q->{usage}{$col} // 'none';
			next if $usage eq 'LABEL';
			ok(defined $row->{$col} && $row->{$col} =~ /^-?[0-9.e+-]+$/,
				"$name.$col is a number") or diag "$name.$col = " . ($row->{$col} // 'NULL');
		}
		is_deeply([ sort keys %$row ], [ sort keys %{ $q->{usage} } ],
			"$name: every column has a metric entry");
	}
	return \@rows;
}

sub run { return $node->safe_psql('app', $_[0]); }

# ---- do known things ------------------------------------------------------

# three keys claimed and completed, then each delivered once more
run("BEGIN; SELECT eo_claim('k$_'); SELECT eo_complete('k$_', '{}'); COMMIT;")
  for 1 .. 3;
run("SELECT eo_claim('k$_')") for 1 .. 2;

# a lease; busy while it lives; taken over once it expired; the old
# holder's token is then stale
my $old = run("SELECT lease_token FROM eo_claim('L', lease => '1 s')");
run("SELECT eo_claim('L', lease => '1 s')");
usleep(1_200_000);
my $new = run("SELECT lease_token FROM eo_claim('L', lease => '1 s')");
my ($ret, $stdout, $stderr) = $node->psql('app', "SELECT eo_complete('L', '{}', $old)");
like($stderr, qr/stale/, 'the old holder is refused');
run("SELECT eo_complete('L', '{}', $new)");

# a fingerprint conflict
run("SELECT eo_claim('fp', fingerprint => 'a')");
($ret, $stdout, $stderr) = $node->psql('app', "SELECT eo_claim('fp', fingerprint => 'b')");
like($stderr, qr/fingerprint/, 'a different fingerprint is refused');

# two failures make a key dead (eo.max_attempts = 2), which a claim then
# answers; one failure waits for its retry
run("SET eo.max_attempts = 2; SELECT eo_fail('D', 'x'); SELECT eo_fail('D', 'x');");
run("SELECT eo_claim('D')");
# ... and is redriven (once: the second finds it no longer dead)
is(run("SELECT eo_redrive('D'); SELECT eo_redrive('D')"), "t\nf", 'the dead key is redriven once');
run("SELECT eo_fail('W', 'x', retry_after => '1 hour')");

# an expired lease reclaimed by a pass (eo_maintain)
run("SELECT eo_claim('R', lease => '1 s')");
usleep(1_200_000);
is(run("SELECT reclaimed FROM eo_maintain()"), '1', 'one lease reclaimed');

# then one live lease and one expired
run("SELECT eo_claim('live', lease => '1 hour')");
run("SELECT eo_claim('gone', lease => '1 s')");
usleep(1_200_000);
run("ANALYZE");

# an outbox with one slot: 10 events, one rolled back; a page of 4 fetched
# and acknowledged; a page of 4 fetched and left to expire, fetched again
# (4 redelivered) and acknowledged; 2 left pending
run("SELECT eo_outbox_create('ob', slots => 1)");
run("SELECT eo_group_create('ob', 'g')");
run("SELECT eo_emit('ob', 'a', i::text, 't', '{}') FROM generate_series(1, 10) i");
run("BEGIN; SELECT eo_emit('ob', 'a', '0', 't', '{}'); ROLLBACK;");
my $tok = run("SELECT max(lease_token) FROM eo_relay_fetch('ob', 'g', 4, '1 min')");
run("SELECT eo_relay_ack('ob', 'g', $tok)");
run("SELECT count(*) FROM eo_relay_fetch('ob', 'g', 4, '1 s')");
usleep(1_200_000);
$tok = run("SELECT max(lease_token) FROM eo_relay_fetch('ob', 'g', 4, '1 min')");
run("SELECT eo_relay_ack('ob', 'g', $tok)");

# ---- what the scrapes say ---------------------------------------------------

my $c = scrape('eo_claims')->[0];
my %want = (
	# k1-3, L, L again (its takeover), fp, R, live, gone
	claimed               => 9,
	duplicates            => 2,
	busy                  => 1,
	dead_answers          => 1,
	leases_taken_over     => 1,
	completed             => 4,
	failed                => 3,
	keys_dead             => 1,
	leases_reclaimed      => 1,
	fingerprint_conflicts => 1,
	stale_tokens_refused  => 1,
	keys_redriven         => 1);
is($c->{$_}, $want{$_}, "eo_claims_$_ = $want{$_}") for sort keys %want;
cmp_ok($c->{since_timestamp_seconds}, '>', 1_700_000_000, 'counters have a start time');

my $m = scrape('eo_maintenance')->[0];
is($m->{passes},            1, 'one pass (eo_maintain)');
is($m->{naptime_seconds}, 3600, 'eo.naptime in seconds');
cmp_ok($m->{seconds_since_last_pass}, '<', 60, 'the pass was a moment ago');
cmp_ok($m->{last_pass_seconds},       '<', 60, 'and short');
is($m->{"${_}_step_errors"}, 0, "no $_ step failed") for qw(drop reclaim switch retire outbox);
is($m->{lock_waits_given_up}, 0, 'no lock wait given up');

my $k = scrape('eo_keys')->[0];
my $stored = run("SELECT count(*) FROM eo_keys()");
is($k->{estimated_keys}, $stored, "estimated keys after ANALYZE: $stored");
is($k->{leases},         2, 'two leases (one live, one expired)');
is($k->{expired_leases}, 1, 'one of them expired');
is($k->{retries_waiting}, 3, 'three failed keys wait (W, the reclaimed R, the redriven D)');
cmp_ok($k->{oldest_lease_age_seconds}, '>', 1, 'the oldest lease is older than its 1 s lease');
cmp_ok($k->{generations}, '>=', 1, 'at least one generation');
is($k->{bytes},
	run("SELECT sum(pg_total_relation_size(relid)) FROM eo_internal.eo_generations WHERE state IN ('c','o')"),
	'bytes of the live generations');

my $o = scrape('eo_outbox');
is(scalar @$o, 1, 'one outbox and group');
is($o->[0]{outbox}, 'ob', 'labelled with the outbox');
is($o->[0]{consumer_group}, 'g', 'and the group');
is($o->[0]{events_emitted},     11, '11 events emitted (one rolled back)');
is($o->[0]{events_fetched},     12, '12 events handed out');
is($o->[0]{events_acked},       8,  '8 acknowledged');
is($o->[0]{events_redelivered}, 4,  '4 handed out again');
is($o->[0]{slots},              1,  'one slot');
is($o->[0]{leased_slots},       0,  'no lease held');
cmp_ok($o->[0]{oldest_pending_age_seconds}, '>', 1, 'the 2 pending events are older than the waits above');
is($o->[0]{retention_seconds}, 7 * 86400, 'retention 7 days');

# nothing of anyone's keys for the monitoring role
for my $f ('eo_keys()', 'eo_key_stats()')
{
	($ret, $stdout, $stderr) = $node->psql('app', "SELECT * FROM $f", extra_params => [ '-U', 'mon' ]);
	like($stderr, qr/permission denied/, "pg_monitor cannot call $f");
}

# ---- restarts -------------------------------------------------------------------

my $before = run("SELECT claimed || '|' || since FROM eo_metrics.claims");
$node->restart;
is(run("SELECT claimed || '|' || since FROM eo_metrics.claims"), $before,
	'the counters and their start survive a clean restart');
is(run("SELECT passes FROM eo_metrics.maintenance"), '1', 'so do the pass counters');

# A crash: a server process killed makes the postmaster reinitialize.
my $log_offset = -s $node->logfile;
my $launcher = run("SELECT pid FROM pg_stat_activity WHERE backend_type = 'eo launcher'");
is(kill('KILL', $launcher), 1, 'killed the eo launcher (SIGKILL)');
ok($node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset),
	'the server reinitialized');
ok($node->poll_query_until('app', 'SELECT 1', '1'), 'and accepts connections again');
is(run("SELECT claimed FROM eo_metrics.claims"), '0', 'after a crash the counters start from zero');

# ---- eo in a schema of its own ------------------------------------------------

# The queries name eo_metrics.*, wherever eo is; pg_monitor needs nothing
# on eo's own schema.
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE SCHEMA eo; CREATE EXTENSION eo SCHEMA eo');
$node->safe_psql('other', "SELECT eo.eo_claim('x')");
for my $name (sort keys %$queries)
{
	my ($rc, $out, $err) = $node->psql('other', $queries->{$name}{query},
		extra_params => [ '-U', 'mon' ]);
	is($rc, 0, "$name runs as mon with eo in schema eo") or diag $err;
}
is($node->safe_psql('other', 'SELECT claimed FROM eo_metrics.claims', extra_params => [ '-U', 'mon' ]),
	'1', 'and counts that database');

# ---- eo.databases is checked when set -------------------------------------------

my ($rc_db, $out_db, $err_db) = $node->psql('postgres', q{ALTER SYSTEM SET eo.databases = '"unterminated'});
like($err_db, qr/invalid value for parameter "eo.databases"/,
	'a list that does not parse is refused when set, not found wrong at each pass');
($rc_db, $out_db, $err_db) = $node->psql('postgres', q{ALTER SYSTEM SET eo.databases = '""'});
like($err_db, qr/A database name is empty/, 'so is an empty database name');

# ---- more databases than counter slots -----------------------------------------

# 64 databases have counters; the others show NULLs.  A worker pass in a
# database without a slot must not read the catalog outside a transaction
# (it crashed the server before): 66 databases with eo, the worker in all.
$node->safe_psql('postgres', "ALTER SYSTEM SET eo.databases = ''");
$node->safe_psql('postgres', "ALTER SYSTEM SET eo.naptime = 1");
$node->reload;
$node->safe_psql('postgres', "CREATE DATABASE many_$_ TEMPLATE other") for 1 .. 64;
$log_offset = -s $node->logfile;
ok( $node->poll_query_until(
		'postgres', q{
SELECT count(*) FROM pg_database d
 WHERE datname LIKE 'many\_%' AND pg_stat_get_db_xact_commit(d.oid) > 0}, '64'),
	'the worker visited all 64 clones');
sleep 3;    # a few more passes in every database
ok(!$node->log_contains(qr/terminated by signal/, $log_offset),
	'no server process crashed with more databases than counter slots');
my $counted = 0;
for my $db ('app', 'other', map { "many_$_" } 1 .. 64)
{
	$counted++ if $node->safe_psql($db, 'SELECT passes IS NOT NULL FROM eo_metrics.maintenance') eq 't';
}
is($counted, 64, 'of 66 databases, 64 are counted');

$node->stop;
done_testing();
