# Copyright: eo authors.  See README.
#
# eo_nats forward's linger after the doorbell (src/nats/linger.c).  With
# its default, --linger-ms auto, a forwarder that sees events come at a
# couple of hundred a second lingers after the bell, so its pages gather
# several commits' events (fewer fetches for the database), while a slow
# trickle is fetched at every ring, one event a page (no latency added
# where lingering would gather nothing).  --linger-ms 0 fetches at every
# ring at any rate.  How long a commit waits is not asserted here (a timed
# test fails on a slow machine): bench/nats.sh measures it.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoNats;
use EoTest;
use Time::HiRes qw(time usleep);

EoNats::require_nats();

my $node = EoTest::eo_node('linger', conf => "eo.naptime = 1", eo_in => []);
$node->safe_psql('postgres', 'CREATE DATABASE shop');
$node->safe_psql('shop', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('paced', slots => 1) IS NOT NULL;
SELECT eo_group_create('paced', 'nats');
-- n events, each committed alone, `pause` seconds apart
CREATE PROCEDURE emit_paced(n int, pause float8) LANGUAGE plpgsql AS $p$
BEGIN
  FOR i IN 1 .. n LOOP
    PERFORM eo_emit('paced', 'order', 'agg-' || (i % 7), 'placed', jsonb_build_object('i', i));
    COMMIT;
    PERFORM pg_sleep(pause);
  END LOOP;
END $p$;
});

my $nats = EoNats->new;
my @nats = @{ $nats->nats };
my ($rc) = $nats->run('admin.log', 'stream-add', @nats, '--stream', 'PACED', '--subjects', 'paced.>');
is($rc, 0, 'stream PACED made');

# Events per page of a forwarder (given options) while `n` events are
# emitted `pause` s apart, from its last line ("N events delivered in M
# pages"); also the events it delivered.
sub per_page
{
	my ($log, $n, $pause, @options) = @_;
	my $pid = $nats->spawn($log, {}, @nats, '--pg', $node->connstr('shop'), 'forward',
		'--outbox', 'paced', '--group', 'nats', '--stream', 'PACED', @options);
	$nats->wait_log($log, qr/forwarding consumer group/, 20) or die "no forwarder ($log)";
	$node->safe_psql('shop', "CALL emit_paced($n, $pause)");
	my $until = time + 30;
	usleep(100_000) while time < $until
	  && $node->safe_psql('shop', q{SELECT sum(backlog) FROM eo_relay_status('paced', 'nats')}) ne '0';
	EoNats::stop_all($pid);
	my ($events, $pages) = $nats->log($log) =~ /stopping: (\d+) events delivered in (\d+) pages/;
	return (($events // 0), ($pages ? $events / $pages : 0));
}

# About 200 a second, alone on the machine: each commit rings the bell.
my ($events, $auto) = per_page('auto.log', 600, 0.004);
is($events, 600, 'auto (the default): the 600 events delivered');
my (undef, $zero) = per_page('zero.log', 600, 0.004, '--linger-ms', '0');
note(sprintf('events per page at about 200/s: auto %.2f, --linger-ms 0 %.2f', $auto, $zero));
cmp_ok($auto, '>=', 3, 'auto, at about 200 events a second: pages of several events');
cmp_ok($auto, '>=', 1.5 * $zero, '... half again as many a page as with --linger-ms 0, or more');

# A trickle of 5 a second: a linger would gather nothing, so none.
my (undef, $trickle) = per_page('trickle.log', 25, 0.2);
note(sprintf('events per page at 5/s: auto %.2f', $trickle));
cmp_ok($trickle, '<', 1.5, 'auto, at 5 events a second: a fetch at (nearly) every ring');

# A wrong value is refused before anything starts.
($rc) = $nats->run('bad.log', @nats, 'forward', '--outbox', 'paced', '--group', 'nats',
	'--linger-ms', 'soon');
is($rc, 2, '--linger-ms soon: a usage error (2)');
like($nats->log('bad.log'), qr/--linger-ms must be auto or an integer from 0/, '... saying what it takes');

$nats->stop;
$node->stop;
done_testing();
