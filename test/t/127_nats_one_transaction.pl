# Copyright: eo authors.  See README.
#
# eo_nats forward makes one transaction a page: the wait for new events,
# the last page's acknowledgement and the next fetch, in one round trip
# (src/nats/forward.c, fetch_in_one).  Checked here, against a real
# nats-server:
# - from the server's log: at about 200 events a second, every
#   acknowledgement of a page delivered whole is in a transaction with the
#   wait and the fetch after it, none on its own once the forwarder has
#   seen the rate; at a trickle, each on its own, at once;
# - every event JetStream stored is acknowledged to eo soon after events
#   stop coming (the last page's acknowledgement goes with an empty fetch);
# - a forwarder stopped (SIGTERM) while a page waits to be acknowledged
#   acknowledges it before it exits: what eo counts as delivered is what
#   the stream holds.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use lib 'test/perl';
use EoNats;
use EoTest;
use Time::HiRes qw(time usleep);

EoNats::require_nats();

my $node = EoTest::eo_node('onetx',
	conf => "eo.naptime = 1\nlog_statement = 'all'\nlog_line_prefix = '%a|%p|%v| '",
	eo_in => []);
$node->safe_psql('postgres', 'CREATE DATABASE shop');
$node->safe_psql('shop', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('orders', slots => 4) IS NOT NULL;
SELECT eo_group_create('orders', 'nats');
-- n events, each committed alone, `pause` seconds apart
CREATE PROCEDURE emit_paced(n int, pause float8) LANGUAGE plpgsql AS $p$
BEGIN
  FOR i IN 1 .. n LOOP
    PERFORM eo_emit('orders', 'order', 'agg-' || (i % 7), 'placed', jsonb_build_object('i', i));
    COMMIT;
    PERFORM pg_sleep(pause);
  END LOOP;
END $p$;
});

my $nats = EoNats->new;
my @nats = @{ $nats->nats };
my ($rc) = $nats->run('admin.log', 'stream-add', @nats, '--stream', 'ORDERS', '--subjects', 'orders.>');
is($rc, 0, 'stream ORDERS made');

sub forwarder
{
	my ($log, $app, @options) = @_;
	my $pid = $nats->spawn($log, {}, @nats, '--pg', $node->connstr('shop') . " application_name=$app",
		'forward', '--outbox', 'orders', '--group', 'nats', '--stream', 'ORDERS', @options);
	$nats->wait_log($log, qr/forwarding consumer group/, 20) or die "no forwarder ($log)";
	return $pid;
}

sub backlog
{
	return $node->safe_psql('shop', q{SELECT sum(backlog) FROM eo_relay_status('orders', 'nats')});
}

sub stored { return scalar @{ $nats->dump('ORDERS') }; }

# ---- one transaction a page, and the last page acknowledged soon -------------

my $pid = forwarder('paced.log', 'fwd_paced');
$node->safe_psql('shop', 'CALL emit_paced(200, 0.005)');
my $until = time + 10;
usleep(50_000) while time < $until && backlog() ne '0';
is(backlog(), '0', 'events stopped: every one acknowledged to eo soon after, with the forwarder running');
is(stored(), 200, '... and each of the 200 stored once in JetStream');

# Of the forwarder named `app`, from the server's log (each statement with
# its virtual transaction id): its transactions of a wait, an
# acknowledgement and a fetch, and its acknowledgements in a transaction
# of their own.
sub transactions
{
	my ($app) = @_;
	my (@order, %kinds);
	for my $line (split /\n/, slurp_file($node->logfile))
	{
		next unless $line =~ /^\Q$app\E\|\d+\|([^|]+)\| LOG:  (?:statement|execute [^:]+): (.*)$/;
		my ($vxid, $sql) = ($1, $2);
		my $k =
		    $sql =~ /eo_relay_wait\(/      ? 'wait'
		  : $sql =~ /eo_relay_ack_pages\(/ ? 'ack'
		  : $sql =~ /eo_relay_fetch\(/     ? 'fetch'
		  :                                  'other';
		push @order, $vxid unless $kinds{$vxid};
		push @{ $kinds{$vxid} }, $k;
	}
	my @tx = map { join(',', @{ $kinds{$_} }) } @order;
	return (scalar(grep { $_ eq 'wait,ack,fetch' } @tx), scalar(grep { $_ eq 'ack' } @tx));
}

my ($whole, $alone) = transactions('fwd_paced');
note("at about 200 events/s: transactions of wait, ack, fetch: $whole; acknowledgements alone: $alone");
cmp_ok($whole, '>=', 10, 'pages acknowledged in one transaction with the wait and the next fetch');
cmp_ok($alone, '<=', 2, '... and none on its own but before the forwarder saw the rate (the first pages)');
EoNats::stop_all($pid);

# A trickle, 2 events a second: a wait after a page ends in its timeout, not
# in a ring, so each page is acknowledged at once, on its own (an empty
# fetch would cost more).
$pid = forwarder('trickle.log', 'fwd_trickle');
$node->safe_psql('shop', 'CALL emit_paced(8, 0.5)');
$until = time + 10;
usleep(50_000) while time < $until && backlog() ne '0';
EoNats::stop_all($pid);
($whole, $alone) = transactions('fwd_trickle');
note("at 2 events/s: transactions of wait, ack, fetch: $whole; acknowledgements alone: $alone");
cmp_ok($alone, '>=', 6, 'a trickle: pages acknowledged at once, on their own');
cmp_ok($whole, '<=', 1, '... not with a fetch after the wait (but when it sees the rate)');
is(stored(), 208, '... the 8 events stored once');

# ---- a stop while a page waits for its acknowledgement -----------------------

# A long linger: after each page the forwarder waits 2 s past the bell with
# its acknowledgement pending, so the stop comes (most likely) in that wait
# and cancels it; a page just delivered is held the same way.
$pid = forwarder('stop.log', 'fwd_stop', '--linger-ms', '2000');
my $emitter = IPC::Run::start([ 'psql', '-X', '-q', '-d', $node->connstr('shop'),
	'-c', 'CALL emit_paced(1000, 0.01)' ]);
sleep 6;    # pages at about 0, 2 and 4 s (the first acknowledged alone: no rate seen yet)
EoNats::stop_all($pid);
$emitter->finish;
my ($delivered) = $nats->log('stop.log') =~ /stopping: (\d+) events delivered/;
my $acked = 1208 - backlog();
my $in_stream = stored();
note("stopped: delivered $delivered, acknowledged $acked, in the stream $in_stream");
my ($pages) = $nats->log('stop.log') =~ /stopping: \d+ events delivered in (\d+) pages/;
cmp_ok($pages, '>=', 2, 'the stopped forwarder delivered pages (the second on, acknowledged with a fetch)');
cmp_ok($delivered, '<', 1000, '... and was stopped while events came');
is($acked, $in_stream, 'stopped: every event the stream holds is acknowledged to eo');
is($acked - 208, $delivered, '... and counted as delivered');

# What the stop left is delivered by the next forwarder, once.
$pid = forwarder('after.log', 'fwd_after');
$until = time + 20;
usleep(100_000) while time < $until && backlog() ne '0';
EoNats::stop_all($pid);
is(stored(), 1208, 'after a restart: all 1208 events in the stream, once each');

$nats->stop;
$node->stop;
done_testing();
