# Copyright: eo authors.  See README.
#
# eo_nats apply under synchronous replication, when a COMMIT's wait for
# the standby is cancelled: the server ends the wait with a WARNING
# ("canceling wait for synchronous replication") and the COMMIT succeeds,
# committed on the primary, maybe not on the standby a failover would
# promote.  Acknowledged then, the message would be gone with such a
# failover.  apply acknowledges such a COMMIT's messages only once a
# later commit of its own comes back without a WARNING.  The standby is
# named in synchronous_standby_names and never connects, so every commit
# waits until the test takes the name back.  Two cancels, each checked:
# - apply's own, when it is stopped (SIGTERM) while its COMMIT waits: it
#   stops without acknowledging;
# - pg_cancel_backend from another session: apply waits in a second
#   commit, and acknowledges when that commit is confirmed.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use lib 'test/perl';
use EoNats;
use EoTest;

EoNats::require_nats();

my $shop = EoTest::eo_node('shop', conf => "eo.naptime = 1", eo_in => ['postgres']);
$shop->safe_psql('postgres', q{
SELECT eo_outbox_create('billing', slots => 1) IS NOT NULL;
SELECT eo_group_create('billing', 'nats');
});
# Commits wait for synchronous standbys only where WAL senders may run.
# eo's worker would wait too, and a claim with it when it waits for the
# worker to make the first key generation: that is made first (the
# claim of a key, committed), and passes are an hour apart.
my $inbox = EoTest::eo_node('inbox', conf => "eo.naptime = 3600", init => { allows_streaming => 1 },
	eo_in => ['postgres']);
$inbox->safe_psql('postgres', q{
CREATE TABLE effects (id uuid NOT NULL, n int NOT NULL);
SELECT eo_scope_create('billing-consumer');
SELECT status FROM eo_claim('warm-up', scope => 'billing-consumer');
});

my $nats = EoNats->new;
my @nats = @{ $nats->nats };
my ($rc) = $nats->run('admin.log', 'stream-add', @nats, '--stream', 'BILLING', '--subjects', 'billing.>');
is($rc, 0, 'stream BILLING made');

# events from..to emitted and forwarded (the shop's commits do not wait)
sub emit_and_forward
{
	my ($from, $to) = @_;
	$shop->safe_psql('postgres', qq{
SELECT count(eo_emit('billing', 'order', 'agg', 'Placed', jsonb_build_object('n', g)))
FROM generate_series($from, $to) g});
	my ($rc) = $nats->run('forward.log', @nats, '--pg', $shop->connstr('postgres'), 'forward',
		'--outbox', 'billing', '--group', 'nats', '--stream', 'BILLING', '--once');
	return $rc;
}

sub ack_floor
{
	my ($rc, $out) = $nats->run('admin.log', 'consumer-info', @nats, '--stream', 'BILLING',
		'--durable', 'inbox');
	return $out =~ /^ack_floor_stream_seq: (\d+)$/m ? $1 : "none ($rc)";
}

# Does a session (apply's: the only one that writes) wait for the standby
# within `secs`?  (This one reads: it does not wait.)
sub waits_for_standby
{
	my ($secs) = @_;
	for (1 .. $secs * 10)
	{
		return 1 if $inbox->safe_psql('postgres', q{SELECT count(*) > 0 FROM pg_stat_activity
			WHERE wait_event = 'SyncRep' AND backend_type = 'client backend'}) eq 't';
		usleep(100_000);
	}
	diag($inbox->safe_psql('postgres', q{SELECT pid, backend_type, state, wait_event, left(query, 60)
		FROM pg_stat_activity}));    # what they wait for instead
	return 0;
}

sub standby_named
{
	my ($name) = @_;
	$inbox->safe_psql('postgres', $name
		? qq{ALTER SYSTEM SET synchronous_standby_names = '$name'}
		: q{ALTER SYSTEM RESET synchronous_standby_names});
	$inbox->safe_psql('postgres', q{SELECT pg_reload_conf()});
}

my @apply = (@nats, '--pg', $inbox->connstr('postgres'), 'apply', '--stream', 'BILLING',
	'--durable', 'inbox', '--scope', 'billing-consumer', '--ack-wait', '2000', '--sql',
	q{INSERT INTO public.effects (id, n) SELECT $1::uuid, ($3->>'n')::int});

# ---- apply stopped while its COMMIT waits for the standby ---------------

standby_named('nosuch');
is(emit_and_forward(1, 3), 0, '3 events forwarded');
my $ap = $nats->spawn('apply-1.log', {}, @apply);
ok(waits_for_standby(60), 'apply\'s COMMIT waits for the standby');
EoNats::stop_all($ap);
like($nats->log('apply-1.log'), qr/a COMMIT came with a WARNING/,
	'stopped, its COMMIT came with the WARNING, and apply says so');
is($inbox->safe_psql('postgres', q{SELECT count(*) FROM effects}), '3',
	'the transaction committed on the primary');
is(ack_floor(), '0', '... and apply acknowledged none of its messages');

# ---- a cancel from another session ---------------------------------------

$ap = $nats->spawn('apply-2.log', {}, @apply);
# 1-3 come back after --ack-wait as duplicates (a read-only transaction
# does not wait for the standby); 4 and 5 are new
ok($nats->wait_log('apply-2.log', qr/connected to PostgreSQL/, 30), 'apply started again');
is(emit_and_forward(4, 5), 0, '2 more events forwarded');
ok(waits_for_standby(60), 'apply\'s COMMIT of the new ones waits for the standby');
$inbox->safe_psql('postgres',
	q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	  WHERE wait_event = 'SyncRep' AND backend_type = 'client backend'});
ok($nats->wait_log('apply-2.log', qr/a COMMIT came with a WARNING/, 30),
	'the wait cancelled by another session: apply says so')
  or diag($nats->log('apply-2.log'));
ok(waits_for_standby(30), '... and waits for the standby again, in a commit of its own');
usleep(500_000);
cmp_ok(ack_floor(), '<', 4, 'events 4 and 5 not acknowledged while that commit waits');
standby_named(undef);
my $acked = 0;
for (1 .. 300)
{
	last if ($acked = ack_floor()) eq '5';
	usleep(100_000);
}
is($acked, '5', 'the standby no longer required: the commit is confirmed, and all 5 acknowledged');
is($inbox->safe_psql('postgres', q{SELECT count(*) || ' ' || count(DISTINCT id) FROM effects}),
	'5 5', 'each event applied once');
EoNats::stop_all($ap);
like($nats->log('apply-2.log'), qr/stopping: \d+ applied/, 'apply stops when asked');
$nats->stop;
done_testing();
