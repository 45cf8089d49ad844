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
# waits until the test takes the name back.  Checked:
# - apply stopped (SIGTERM) while its COMMIT waits: its stop cancels the
#   wait, and it stops without acknowledging;
# - pg_cancel_backend from another session: apply waits in a commit of
#   its own that writes WAL, and acknowledges when that is confirmed;
# - messages of such a commit that come back: eo_claim finds them done,
#   and apply acknowledges them only once a commit that writes WAL,
#   after the keys' own, is confirmed;
# - a stop that comes before the COMMIT: the transaction is rolled back;
# - on eo 0.3.0, which puts settings back only when apply begins the next
#   transaction: a trigger that turns synchronous_commit to local for the
#   session, or client_min_messages to error for the transaction, changes
#   none of that.

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
	$out =~ /^ack_floor_stream_seq: (\d+)$/m or die "consumer-info failed ($rc): $out";
	return $1;
}

# Does a session (apply's: the only one that writes) wait for the standby
# within `secs`?  (This one reads: it does not wait.)
sub waits_for_standby
{
	my ($secs, $db) = @_;
	my $in_db = defined $db ? "AND datname = '$db'" : '';
	for (1 .. $secs * 10)
	{
		return 1 if $inbox->safe_psql('postgres', qq{SELECT count(*) > 0 FROM pg_stat_activity
			WHERE wait_event = 'SyncRep' AND backend_type = 'client backend' $in_db}) eq 't';
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

# the standby no longer required: every message acknowledged (n of them)
sub all_acknowledged
{
	my ($n) = @_;
	standby_named(undef);
	my $acked = 0;
	for (1 .. 300)
	{
		last if ($acked = ack_floor()) == $n;
		usleep(100_000);
	}
	return $acked;
}

# ---- a cancel from another session ---------------------------------------

# 4 and 5 come within --ack-wait, before 1-3 come back: apply's COMMIT of
# them is the one that waits, and is cancelled
$ap = $nats->spawn('apply-2.log', {}, @apply);
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
sleep 1;
is(ack_floor(), 0, 'events 4 and 5 not acknowledged while that commit waits');
is(all_acknowledged(5), 5, 'the standby no longer required: all 5 acknowledged (1-3 as duplicates)');
EoNats::stop_all($ap);
like($nats->log('apply-2.log'), qr/stopping: 2 applied, 3 duplicates/,
	'apply applied 4 and 5 and found 1-3 done, and stops when asked');

# ---- duplicates of a commit the standby may lack --------------------------

# 6 and 7 committed, their wait cancelled by a stop (as 1-3 were): their
# keys are done here.  When they come back, the claims find them and
# write nothing; a COMMIT that writes nothing waits for no standby, and
# would have them acknowledged while the standby may still lack them.
standby_named('nosuch');
is(emit_and_forward(6, 7), 0, '2 more events forwarded');
$ap = $nats->spawn('apply-3.log', {}, @apply);
ok(waits_for_standby(60), 'apply\'s COMMIT of them waits for the standby');
EoNats::stop_all($ap);
is(ack_floor(), 5, 'stopped there, apply acknowledged neither');
$ap = $nats->spawn('apply-4.log', {}, @apply);
ok($nats->wait_log('apply-4.log', qr/connected to PostgreSQL/, 30), 'apply started again');
ok(waits_for_standby(30), 'they come back as duplicates, and their commit waits for the standby');
sleep 1;
is(ack_floor(), 5, '... unacknowledged while it waits');
is(all_acknowledged(7), 7, 'the standby no longer required: both acknowledged');
is($inbox->safe_psql('postgres', q{SELECT count(*) || ' ' || count(DISTINCT id) FROM effects}),
	'7 7', 'each event applied once');
EoNats::stop_all($ap);
like($nats->log('apply-4.log'), qr/stopping: 0 applied, 2 duplicates/, 'apply found both done');
# ---- a stop that comes before the COMMIT -----------------------------------

# Two messages in one fetch, the first one's --sql slow: a stop during it
# cancels nothing (only the COMMIT's round trip is cancelled), and the
# COMMIT would then wait for the standby, deaf to the stop.  It is rolled
# back instead, and apply stops.
standby_named('nosuch');
is(emit_and_forward(8, 9), 0, '2 more events forwarded');
my @slow = @apply;
$slow[-1] = q{INSERT INTO public.effects (id, n) SELECT $1::uuid, ($3->>'n')::int FROM pg_catalog.pg_sleep(1)};
$ap = $nats->spawn('apply-5.log', {}, @slow);
ok($inbox->poll_query_until('postgres', q{SELECT count(*) > 0 FROM pg_stat_activity
	WHERE wait_event = 'PgSleep' AND backend_type = 'client backend'}), 'apply runs the slow --sql');
kill 'TERM', $ap;
ok(EoNats::exited_within($ap, 15), 'stopped during --sql, apply stops within seconds')
  or EoNats::kill9($ap);
is($inbox->safe_psql('postgres', q{SELECT count(*) FROM effects}), '7', '... having committed nothing');
is(ack_floor(), 7, '... and acknowledged nothing');
$ap = $nats->spawn('apply-6.log', {}, @apply);
is(all_acknowledged(9), 9, 'started again, the standby no longer required: both acknowledged');
is($inbox->safe_psql('postgres', q{SELECT count(*) || ' ' || count(DISTINCT id) FROM effects}),
	'9 9', 'each event applied once');
EoNats::stop_all($ap);

# ---- eo 0.3.0: what a trigger sets does not reach the confirmation --------

$inbox->safe_psql('postgres', 'CREATE DATABASE inbox03');
$inbox->safe_psql('inbox03', q{
CREATE EXTENSION eo VERSION '0.3.0';
CREATE TABLE effects (id uuid NOT NULL, n int NOT NULL);
SELECT eo_scope_create('billing-consumer');
SELECT status FROM eo_claim('warm-up', scope => 'billing-consumer');
CREATE FUNCTION sc_local() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN PERFORM pg_catalog.set_config('synchronous_commit', 'local', false); RETURN NULL; END $f$;
CREATE FUNCTION cmm_error() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN PERFORM pg_catalog.set_config('client_min_messages', 'error', true); RETURN NULL; END $f$;
});
my $n = 9;
for my $fn ('sc_local', 'cmm_error')
{
	my $what = $fn eq 'sc_local' ? 'synchronous_commit local for the session'
	  : 'client_min_messages error for the transaction';
	$inbox->safe_psql('inbox03', qq{DROP TRIGGER IF EXISTS t ON effects;
CREATE TRIGGER t AFTER INSERT ON effects FOR EACH ROW EXECUTE FUNCTION $fn();});
	standby_named('nosuch');
	$n++;
	is(emit_and_forward($n, $n), 0, "eo 0.3.0, a trigger setting $what: event $n forwarded");
	my @old = map { $_ eq $inbox->connstr('postgres') ? $inbox->connstr('inbox03') : $_ } @apply;
	$ap = $nats->spawn("apply-030-$fn.log", {}, @old);
	ok(waits_for_standby(60, 'inbox03'), '... its COMMIT waits for the standby');
	$inbox->safe_psql('postgres', q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	  WHERE wait_event = 'SyncRep' AND backend_type = 'client backend' AND datname = 'inbox03'});
	ok(waits_for_standby(30, 'inbox03'), '... cancelled, apply waits in a commit of its own');
	sleep 1;
	is(ack_floor(), $n - 1, '... and has not acknowledged it');
	is(all_acknowledged($n), $n, '... until the standby is no longer required');
	EoNats::stop_all($ap);
}
$nats->stop;
done_testing();
