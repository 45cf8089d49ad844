# Copyright: eo authors.  See README.
#
# Consumer groups that wait for standbys (eo_group_set_standby_slots): no
# ghost events after an asynchronous failover.  A primary and an
# asynchronous standby streaming through physical slot "sb"; group "safe"
# waits for "sb", group "fast" does not.
# - With the standby streaming, "safe" hands out events as "fast" does.
# - A slot that does not exist: a WARNING when it is named, then fetches
#   hand out nothing, with a NOTICE saying why, and come back within the
#   bound; cleared (NULL), the group hands out at once again.
# - The standby stopped: producers and claims go on as before; "fast"
#   hands out the new events, "safe" holds them back (NOTICE: no standby
#   streams from the slot), and eo_relay_standbys / the metrics view show
#   the slot inactive and behind.
# - The primary stopped at once, the standby promoted: every event "safe"
#   ever handed out is on the new primary; "fast" handed out events whose
#   transactions the new primary does not have (the ghosts this option is
#   for: shown so that the check above can tell).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use lib 'test/perl';
use EoTest;

my $primary = EoTest::eo_node('primary', init => {allows_streaming => 1}, conf => "eo.naptime = 1\n");
$primary->safe_psql('postgres', q{
SELECT pg_create_physical_replication_slot('sb');
SELECT eo_outbox_create('ev');
SELECT eo_group_create('ev', 'safe');
SELECT eo_group_create('ev', 'fast');
CREATE ROLE monitor LOGIN IN ROLE pg_monitor;
});
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->append_conf('postgresql.conf', "primary_slot_name = 'sb'\neo.naptime = 1\n");
$standby->start;
$primary->wait_for_catchup($standby, 'write');

my $emit = sub {
	my ($n, $tag) = @_;
	return split /\n/, $primary->safe_psql('postgres',
		qq{SELECT eo_emit('ev', 'acct', (i % 4)::text, '$tag', '{}') FROM generate_series(1, $n) i});
};
# One fetch and acknowledgement of every free slot: (ids, stderr, seconds).
my $relay = sub {
	my ($grp) = @_;
	my $t0 = time;
	my ($ret, $out, $err) = $primary->psql('postgres', qq{
CREATE TEMP TABLE page AS SELECT * FROM eo_relay_fetch('ev', '$grp', 1000, '1 min', 8, false);
SELECT CASE WHEN EXISTS (SELECT FROM page) THEN eo_relay_ack_pages('ev', '$grp', (SELECT array_agg(DISTINCT lease_token) FROM page)) ELSE 0 END;
SELECT id FROM page ORDER BY seq;});
	die "relay of $grp failed: $err" if $ret != 0;
	my @ids = split /\n/, $out;
	shift @ids;    # eo_relay_ack_pages' count
	return (\@ids, $err, time - $t0);
};

# ---- streaming: no difference ----

is($primary->safe_psql('postgres', q{SELECT eo_group_set_standby_slots('ev', 'safe', '{sb}')}),
	'', 'group "safe" waits for slot "sb"');
my @first = $emit->(10, 'first');
my ($safe1, $err1) = $relay->('safe');
my ($fast1) = $relay->('fast');
is(scalar @$safe1, 10, 'with the standby streaming, the waiting group hands out every event');
is(scalar @$fast1, 10, 'and so does the other');
unlike($err1, qr/waits for standby/, 'without a NOTICE');

# ---- a slot that does not exist ----

my ($ret, $out, $err) = $primary->psql('postgres',
	q{SELECT eo_group_set_standby_slots('ev', 'safe', '{sb, nosuch}')});
like($err, qr/WARNING:  no physical replication slot "nosuch" exists/, 'naming a missing slot warns');
$emit->(3, 'missing');
my ($ids, $err2, $secs) = $relay->('safe');
is(scalar @$ids, 0, 'a group that names a missing slot hands out nothing');
like($err2, qr/waits for standby slot "nosuch".*\n.*No physical replication slot of that name exists/,
	'and says why');
cmp_ok($secs, '<', 5, 'the fetch comes back within its bound');
$primary->safe_psql('postgres', q{SELECT eo_group_set_standby_slots('ev', 'safe', NULL)});
($ret, $out, $err) = $primary->psql('postgres', q{SELECT eo_group_set_standby_slots('ev', 'safe', '{sb, sb}')});
like($err, qr/names slot "sb" twice/, 'a slot named twice is refused');
($ret, $out, $err) = $primary->psql('postgres',
	q{SELECT eo_group_set_standby_slots('ev', 'safe', array_agg('s' || i)::name[]) FROM generate_series(1, 65) i});
like($err, qr/ERROR:  standby_slots names 65 slots/, 'more than 64 slots are refused');
($ids) = $relay->('safe');
is(scalar @$ids, 3, 'cleared, the group hands them out at once');
$primary->safe_psql('postgres', q{SELECT eo_group_set_standby_slots('ev', 'safe', '{sb}')});
$relay->('fast');

# ---- the standby stopped ----

$primary->wait_for_catchup($standby, 'write');
$standby->stop('fast');
my @lost = $emit->(20, 'lost');
is( $primary->safe_psql('postgres',
		q{BEGIN; SELECT status FROM eo_claim('k'); SELECT eo_complete('k', '{}'); COMMIT;}),
	"claimed\n", 'claims go on while the standby is gone');
my ($fast2) = $relay->('fast');
is(scalar @$fast2, 20, 'the other group hands out the events the standby does not have');
my ($safe2, $err3) = $relay->('safe');
is(scalar @$safe2, 0, 'the waiting group holds them back');
like($err3, qr/waits for standby slot "sb".*\n.*No standby streams from it/, 'and says why');
# A relay's loop: the held-back fetch, then eo_relay_wait, which waits for
# the standby holding no lock (retention's ACCESS EXCLUSIVE on the outbox
# gets through at once), and answers false at its timeout.
my ($bg_out, $bg_err) = ('', '');
my $bg = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $primary->connstr('postgres'),
		'-c', q{SELECT count(*) FROM eo_relay_fetch('ev', 'safe', 1000, '1 min', 8, false)},
		'-c', q{SELECT eo_relay_wait('ev', '3 s', 'safe', '0')} ],
	'>', \$bg_out, '2>', \$bg_err);
usleep(1_000_000);
is($primary->safe_psql('postgres', q{SET lock_timeout = '200ms'; BEGIN; LOCK TABLE ev IN ACCESS EXCLUSIVE MODE; SELECT 'locked'; COMMIT}),
	'locked', 'while eo_relay_wait waits for the standby, the outbox is not locked');
$bg->finish;
chomp $bg_out;
is($bg_out, "0\nf", 'the held-back fetch handed out nothing, and the wait ended at its timeout');
like( $primary->safe_psql('postgres', q{SELECT slot_name, present, active, behind_bytes > 0 FROM eo_relay_standbys('ev', 'safe')}),
	qr/^sb\|t\|f\|t$/, 'eo_relay_standbys shows the slot present, not streamed from, behind');
like( $primary->safe_psql('postgres',
		q{SET ROLE monitor; SELECT outbox, consumer_group, slot_name, active FROM eo_metrics.relay_standbys}),
	qr/^ev\|safe\|sb\|f$/, 'so does eo_metrics.relay_standbys, for pg_monitor');

# ---- the failover ----

$primary->stop('immediate');
$standby->start;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()') or die 'not promoted';
my $have = sub {
	my ($list) = @_;
	return 0 unless @$list;
	my $in = join ',', map { "'$_'" } @$list;
	return $standby->safe_psql('postgres', "SELECT count(*) FROM ev WHERE id IN ($in)");
};
my @safe_all = (@$safe1, @$safe2);
is($have->(\@safe_all), scalar @safe_all,
	'every event the waiting group handed out is on the promoted standby');
is($have->($fast2), 0,
	'the other group handed out events the promoted standby never had (ghosts)');

# The new primary relays "safe" on: the standby slot is gone with the old
# primary, so its list must change (it holds back until then).
($ret, $out, $err) = $standby->psql('postgres', q{SELECT count(*) FROM eo_relay_fetch('ev', 'safe', 1000, '1 min', 8, false)});
like($err, qr/waits for standby slot "sb"/, 'on the new primary the group waits for a slot it lacks');
$standby->safe_psql('postgres', q{SELECT eo_group_set_standby_slots('ev', 'safe', NULL)});
is($standby->safe_psql('postgres', q{SELECT count(*) FROM eo_relay_fetch('ev', 'safe', 1000, '1 min', 8, false)}),
	'0', 'cleared, it goes on (nothing new: the lost events are not there)');

done_testing();
