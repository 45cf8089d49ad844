# Copyright: eo authors.  See README.
#
# A consumer group that waits for a standby far away (flush lag 150 ms,
# steady: test/tools/far_standby.py) goes on delivering while producers
# write.  Each fetch needs the WAL written at its own start, so a fetch
# that waited less than the standby's lag under its locks would be held
# back as long as anything writes WAL (found by the second attack round:
# nothing delivered in 15 s of load); the fetch waits twice the standby's
# flush lag (at least 100 ms, at most 1 s).  A producer emits every 10 ms
# for 6 s while a relay loops fetch, acknowledge, eo_relay_wait: most
# events are delivered during the load, all of them after it.
#
# Needs python3 with psycopg2 (Debian: python3-psycopg2) for the standby;
# without it the test is skipped, unless EO_REQUIRE_PYTHON is set.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use lib 'test/perl';
use EoTest;

my $python = $ENV{EO_PYTHON} // '/usr/bin/python3';
if (system("$python -c 'import psycopg2.extras' >/dev/null 2>&1") != 0)
{
	die 'python3 with psycopg2 is missing (EO_REQUIRE_PYTHON is set)' if $ENV{EO_REQUIRE_PYTHON};
	plan skip_all => 'python3 with psycopg2 (python3-psycopg2) is missing';
}

my $node = EoTest::eo_node('primary', init => {allows_streaming => 1}, conf => "eo.naptime = 1\n");
$node->safe_psql('postgres', q{
SELECT pg_create_physical_replication_slot('far');
SELECT eo_outbox_create('ev');
SELECT eo_group_create('ev', 'safe');
SELECT eo_group_set_standby_slots('ev', 'safe', '{far}');
});
my $dsn = $node->connstr('postgres');
my ($sb_out, $sb_err) = ('', '');
my $standby = IPC::Run::start([ $python, 'test/tools/far_standby.py', $dsn, 'far', '0.15' ],
	'>', \$sb_out, '2>', \$sb_err);
END { $standby->kill_kill if $standby; }

# The lag shows once WAL flows: pg_stat_replication.flush_lag about 150 ms.
my $lag = 0;
for (1 .. 50)
{
	$node->safe_psql('postgres', 'SELECT pg_switch_wal() IS NULL; SELECT txid_current()');
	$lag = $node->safe_psql('postgres',
		q{SELECT COALESCE(extract(epoch FROM max(flush_lag)) * 1000, 0)::int FROM pg_stat_replication});
	last if $lag >= 120;
	usleep(100_000);
}
cmp_ok($lag, '>=', 120, "the far standby flushes about 150 ms late (flush_lag $lag ms)")
  or diag($sb_err);

# The producer: one event every 10 ms for 6 s.
my $script = $node->basedir . '/emit.sql';
open my $fh, '>', $script or die;
print $fh qq{SELECT eo_emit('ev', 'acct', (random() * 8)::int::text, 'T', '{}');\n};
close $fh;
my ($pgb_out, $pgb_err) = ('', '');
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '1', '-R', '100', '-T', '6', '-f', $script, $dsn ],
	'>', \$pgb_out, '2>', \$pgb_err);

# The relay: fetch, acknowledge, wait (as eo_nats forward does).
my $relay_round = q{
CREATE TEMP TABLE page AS SELECT * FROM eo_relay_fetch('ev', 'safe', 1000, '1 min', 8, false);
SELECT CASE WHEN EXISTS (SELECT FROM page)
  THEN eo_relay_ack_pages('ev', 'safe', (SELECT array_agg(DISTINCT lease_token) FROM page)) ELSE 0 END;
SELECT eo_relay_wait('ev', '2 s', 'safe', '0');};
my ($during, $rounds) = (0, 0);
my $t_end = time + 6;
while (time < $t_end)
{
	my $out = $node->safe_psql('postgres', $relay_round);
	my ($acked) = split /\n/, $out;
	$during += $acked;
	$rounds++;
}
$pgbench->finish;
my $emitted = $node->safe_psql('postgres', 'SELECT count(*) FROM ev');
cmp_ok($emitted, '>=', 400, "the producer emitted $emitted events in 6 s");
cmp_ok($during, '>=', $emitted / 2,
	"the group delivered $during of them while the producer wrote ($rounds relay rounds)");
my $after = 0;
for (1 .. 20)
{
	my ($acked) = split /\n/, $node->safe_psql('postgres', $relay_round);
	$after += $acked;
	last if $during + $after >= $emitted;
}
is($during + $after, $emitted, 'and every event once the producer stopped');

$standby->kill_kill;
undef $standby;
done_testing();
