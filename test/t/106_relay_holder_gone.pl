# Copyright: eo authors.  See README.
#
# A relay that dies holding pages it fetched with release_on_disconnect
# does not stall its slots until the lease ends.  A relay (a psql process)
# fetches with a one-hour lease from every slot and is killed (SIGKILL, the client process: its backend sees
# the connection close).  While it lived, another relay got nothing and
# eo_relay_status said 'leased' with its pid; once its backend is gone the
# next fetch gets the same events at once under new tokens, the dead
# relay's tokens are stale, and everything is delivered once.  The same
# holds for a backend ended by pg_terminate_backend.  Without
# release_on_disconnect (the default: a relay may connect per call) the
# lease outlives its session.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;
use lib 'test/perl';
use EoTest;

my $node = EoTest::eo_node('relay_holder_gone', preload => 0, conf => "eo.naptime = 3600", eo_in => []);
$node->safe_psql('postgres', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('hg', slots => 4, notify => false);
SELECT eo_group_create('hg', 'g');
SELECT count(eo_emit('hg', 'order', 'o' || i, 'E', jsonb_build_object('i', i)))
FROM generate_series(1, 40) i;
});

# A relay in its own psql process: fetch from every slot, keep the lease.
sub start_relay
{
	my ($on_disconnect) = @_;
	$on_disconnect //= 'true';
	my ($in, $out, $err) = ('', '', '');
	my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-f', '-',
		  '-d', $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err, $timeout);
	$in .= qq{
SELECT 'pid=' || pg_backend_pid();
SELECT 'got=' || count(*) || ',' || count(DISTINCT lease_token) || ',' || string_agg(lease_token::text, ' ')
FROM eo_relay_fetch('hg', 'g', 1000, '1 hour', 4, $on_disconnect);
};
	ok(pump_until($h, $timeout, \$out, qr/^got=.*\n/m), 'the relay fetched')
	  or diag("stdout: $out\nstderr: $err");
	my ($pid) = $out =~ /^pid=(\d+)$/m;
	my ($n, $tokens, $list) = $out =~ /^got=(\d+),(\d+),(.*)$/m;
	return ($h, $pid, $n, $tokens, $list);
}

sub wait_gone
{
	my ($pid) = @_;
	$node->poll_query_until('postgres',
		"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $pid)")
	  or die "backend $pid did not go away";
}

my ($h, $pid, $n, $tokens, $list) = start_relay();
is($n, 40, 'the first relay got every event');
ok($tokens > 1, "from several slots, a token each ($tokens)");

is($node->safe_psql('postgres', q{SELECT count(*) FROM eo_relay_fetch('hg', 'g', 1000, '1 hour', 4, true)}),
	'0', 'while it lives, another relay gets nothing');
is( $node->safe_psql(
		'postgres',
		qq{SELECT count(*) FILTER (WHERE state = 'leased' AND holder_pid = $pid), sum(backlog)
		   FROM eo_relay_status('hg', 'g')}),
	"$tokens|40",
	'eo_relay_status: its slots are leased, by its pid, and the backlog is all 40');

# kill -9 of the relay process
$h->signal('KILL');
$h->finish;
wait_gone($pid);

is( $node->safe_psql(
		'postgres', q{SELECT string_agg(DISTINCT state, ',') FROM eo_relay_status('hg', 'g')}),
	'ready', 'once its backend is gone, its slots are ready, not leased');
my ($h2, $pid2, $n2, $tokens2, $list2) = start_relay();
is($n2, 40, 'the next relay gets the same 40 events at once, an hour before the lease ends');

# the dead relay's tokens are stale now
my @stale = grep { $_ ne '' } split / /, $list;
my (undef, undef, $err) = $node->psql('postgres', "SELECT eo_relay_ack('hg', 'g', $stale[0])");
like($err, qr/is stale/, "the dead relay's token is stale (55006)");

# the second relay's backend is ended by an administrator
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid2)");
$h2->finish;
wait_gone($pid2);

# a third relay, in this process, delivers and acknowledges everything
my $acked = $node->safe_psql('postgres', q{
CREATE TABLE got AS SELECT * FROM eo_relay_fetch('hg', 'g', 1000, '1 hour', 4, true);
SELECT sum(eo_relay_ack('hg', 'g', t)) FROM (SELECT DISTINCT lease_token AS t FROM got) x;
});
is($acked, '40', 'after pg_terminate_backend too, the next relay gets and acknowledges all 40');
is( $node->safe_psql(
		'postgres',
		q{SELECT (SELECT count(DISTINCT payload->>'i') FROM got),
		         (SELECT sum(backlog) FROM eo_relay_status('hg', 'g'))}),
	'40|0',
	'each event once, and nothing left');
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM eo_relay_fetch('hg', 'g', 1000, '1 hour', 4, true)}),
	'0', 'caught up');

# Without release_on_disconnect the lease is the lease: a relay that
# disconnects after its fetch (and would acknowledge from a new
# connection) keeps its pages until they expire.
$node->safe_psql('postgres', q{
SELECT count(eo_emit('hg', 'order', 'o' || i, 'E', jsonb_build_object('i', i)))
FROM generate_series(41, 50) i});
my ($h3, $pid3, $n3) = start_relay('false');
is($n3, 10, 'a relay without release_on_disconnect fetched the 10 new events');
$h3->signal('KILL');
$h3->finish;
wait_gone($pid3);
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM eo_relay_fetch('hg', 'g', 1000, '1 hour', 4, true)}),
	'0', 'after it is gone, its leases still hold: nobody else gets those events');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FILTER (WHERE state = 'leased' AND holder_pid IS NULL) > 0, sum(backlog)
		  FROM eo_relay_status('hg', 'g')}),
	't|10', 'eo_relay_status: leased (no holder recorded), backlog 10');

$node->stop;
done_testing();
