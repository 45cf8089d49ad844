# Copyright: eo authors.  See README.
#
# eo_nats against a real nats-server with JetStream (user and password
# required): events of an outbox reach a stream effectively once, and a
# second database applies them once with eo_claim.
# - two forwarders share a group: every event is stored once, with
#   Nats-Msg-Id = its id, its headers and payload, on {outbox}.{aggregatetype},
#   in emit order per aggregate; eo_metrics.outbox counts them; the
#   password is never in a log;
# - kill -9 after JetStream stored a page and before eo_relay_ack: the
#   page comes back and JetStream drops the copies (nothing twice, nothing
#   lost); kill -9 at random moments while producers emit, the same;
# - nats-server stopped: emits, claims and eo_maintain go on at once; the
#   forwarder reconnects and delivers when it is back;
# - PostgreSQL stopped (immediate) and started: the forwarder reconnects;
# - a stream that refuses an event (over its max_msg_size) and a subject no
#   stream takes: the log names the event and the cause, the event is not
#   acknowledged, the events before it are, and other aggregates' events
#   after it in the page are still published;
# - eo_nats apply into a second database: each event applied once, killed
#   after COMMIT and before the ack: redelivered, a duplicate, not applied
#   again.

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

my $node = EoTest::eo_node('nats', conf => "eo.naptime = 1", eo_in => []);
for my $db ('shop', 'inbox')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION eo');
}
$node->safe_psql('shop', q{
SELECT eo_outbox_create('billing', slots => 4) IS NOT NULL;
SELECT eo_group_create('billing', 'nats');
SELECT eo_outbox_create('big', slots => 1) IS NOT NULL;
SELECT eo_group_create('big', 'nats');
});
$node->safe_psql('inbox', q{
CREATE TABLE ledger (id uuid PRIMARY KEY, aggregate text, type text, n int, applied int DEFAULT 1);
SELECT eo_scope_create('billing-consumer');
});

# ---- nats-server ----------------------------------------------------------

my $nats     = EoNats->new;
my $dir      = $nats->dir;
my $password = $nats->password;
my $nport    = $nats->port;
my @nats     = @{ $nats->nats };

sub nats_start    { $nats->start; }
sub nats_stop     { $nats->stop; }
sub eo_nats_run   { return $nats->run(@_); }
sub eo_nats_start { return $nats->spawn(@_); }
sub wait_log      { return $nats->wait_log(@_); }
sub dump_stream   { return $nats->dump(@_); }
sub field         { return EoNats::field(@_); }
sub kill9         { EoNats::kill9(@_); }
sub stop_all      { EoNats::stop_all(@_); }

my @shop = ('--pg', $node->connstr('shop'));
my @forward = (@nats, @shop, 'forward', '--outbox', 'billing', '--group', 'nats', '--stream', 'BILLING');

# Is the group's backlog 0 within `secs`?
sub drained
{
	my ($outbox, $secs) = @_;
	my $until = time + $secs;
	while (time < $until)
	{
		return 1 if $node->safe_psql('shop',
			"SELECT coalesce(sum(backlog), 0) FROM eo_outbox_status WHERE outbox = '$outbox'") eq '0';
		usleep(200_000);
	}
	return 0;
}

sub emit
{
	my ($n, $tag) = @_;
	$node->safe_psql('shop', qq{
SELECT count(eo_emit('billing', 'order', 'agg-' || (g % 20), '$tag-' || g,
                     jsonb_build_object('n', g), '{"trace": "t-$tag"}'))
FROM generate_series(1, $n) g;});
}

# Every event of billing is in the stream once, in seq order per aggregate.
sub check_stream
{
	my ($what) = @_;
	my $msgs = dump_stream('BILLING');
	my %count;
	my %order;
	for my $m (@$msgs)
	{
		my $id = field($m, 'Nats-Msg-Id');
		$count{$id}++;
		push @{ $order{ field($m, 'Eo-Aggregate-Id') } }, $id;
	}
	my @events = split /\n/, $node->safe_psql('shop',
		q{SELECT id || ' ' || aggregateid FROM billing ORDER BY seq});
	my %want;
	push @{ $want{ (split / /)[1] } }, (split / /)[0] for @events;
	is(scalar @$msgs, scalar @events, "$what: as many messages as events");
	is(join(',', grep { $count{$_} != 1 } keys %count), '', "$what: no event twice");
	is(scalar(grep { !$count{ (split / /)[0] } } @events), 0, "$what: no event missing");
	is(join(',', grep { join(',', @{ $order{$_} // [] }) ne join(',', @{ $want{$_} }) } keys %want),
		'', "$what: each aggregate's events in emit order");
	return $msgs;
}

my ($rc) = eo_nats_run('admin.log', 'stream-add', @nats, '--stream', 'BILLING', '--subjects', 'billing.>');
is($rc, 0, 'stream BILLING made');

# ---- two forwarders share the group ------------------------------------

# Both connected before the events come, each taking at most 4 of the 8
# slots per fetch: one forwarder alone would otherwise drain 400 events
# before the other starts, and the share test below would fail by timing.
my @fw = map { eo_nats_start("fw$_.log", {}, @forward, '--max-events', '10', '--slots', '4', '--verbose') } 1 .. 2;
ok(wait_log("fw$_.log", qr/connected to PostgreSQL/, 30), "forwarder $_ is connected") for 1 .. 2;
emit(400, 'a');
ok(drained('billing', 30), 'two forwarders deliver the backlog');
my $msgs = check_stream('two forwarders');
my ($m) = grep { field($_, 'Eo-Type') eq 'a-7' } @$msgs;
is(field($m, 'subject'), 'billing.order', 'the subject is {outbox}.{aggregatetype}');
like($m, qr/"data":"\{\\"n\\": 7\}"/, 'the payload is the event payload as JSON');
is(field($m, 'Eo-Aggregate-Type') . '|' . field($m, 'Eo-Aggregate-Id') . '|' . field($m, 'trace'),
	'order|agg-7|t-a', 'headers carry the aggregate and the event headers');
like(field($m, 'Eo-Created-At'), qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/, 'created_at is RFC 3339');
is(field($m, 'Nats-Msg-Id'),
	$node->safe_psql('shop', q{SELECT id FROM billing WHERE type = 'a-7'}), 'Nats-Msg-Id is the event id');
stop_all(@fw);
for my $i (1 .. 2)
{
	like(slurp_file("$dir/fw$i.log"), qr/stopping: [1-9]\d* events delivered/,
		"forwarder $i delivered a share");
}
is($node->safe_psql('shop', q{SELECT events_acked FROM eo_metrics.outbox WHERE outbox = 'billing'}),
	'400', 'eo_metrics.outbox counts them');

# ---- kill -9 between JetStream's acknowledgement and eo's --------------

# (with producer headers that must not confuse JetStream: a value naming
# Nats-Msg-Id, which nats-server 2.9 would otherwise take for the real
# one, and an empty value, which libnats 3.4 misreads)
$node->safe_psql('shop', q{
SELECT count(eo_emit('billing', 'order', 'agg-' || (g % 20), 'b-' || g,
                     jsonb_build_object('n', g), '{"I": "Nats-Msg-Id", "e": "", "trace": "t-b"}'))
FROM generate_series(1, 30) g;});
my $pid = eo_nats_start('crash.log', { EO_NATS_CRASH_AT => 'after-puback' }, @forward, '--lease', '1');
EoNats::exited_within($pid, 120) or kill9($pid);    # a crash point never reached fails below
like(slurp_file("$dir/crash.log"), qr/crash point after-puback/, 'a forwarder died after a page was stored');
my $after = eo_nats_start('after.log', {}, @forward, '--lease', '1', '--verbose');
ok(drained('billing', 30), 'the next forwarder delivers the page again');
stop_all($after);
like(slurp_file("$dir/after.log"), qr/page of \d+ events delivered \([1-9]\d* already in JetStream\)/,
	'... and JetStream dropped the copies');
check_stream('after a kill -9 past the PubAck');

# ---- events a producer made hard to deliver ------------------------------

$node->safe_psql('shop', q{
SELECT eo_emit('billing', repeat('L', 5000), 'agg-long', 'long-type', '{}');
SELECT eo_emit('billing', 'order', 'agg-hdr', 'big-header', '{}',
               jsonb_build_object('big', repeat('h', 33000)));
});
$after = eo_nats_start('hard.log', {}, @forward);
ok(drained('billing', 20), 'a 5000-byte aggregatetype and a 33 kB header value are delivered');
stop_all($after);
my ($long) = grep { field($_, 'Eo-Type') eq 'long-type' } @{ dump_stream('BILLING') };
is(length(field($long, 'subject')), length('billing.') + 64, '... the subject takes 64 bytes of the value');

# ---- kill -9 at random moments while producers emit ---------------------

for my $round (1 .. 6)
{
	my $p = eo_nats_start('random.log', {}, @forward, '--lease', '1', '--max-events', '7');
	emit(25, "c$round");
	usleep(50_000 + int(rand(400_000)));
	kill9($p);
}
$after = eo_nats_start('after2.log', {}, @forward, '--lease', '1');
ok(drained('billing', 30), 'after six kills, a forwarder delivers everything');
stop_all($after);
check_stream('after kills at random moments');

# ---- nats-server down ---------------------------------------------------

$after = eo_nats_start('outage.log', {}, @forward, '--lease', '2');
wait_log('outage.log', qr/connected to PostgreSQL/, 10) or die 'the forwarder did not start';
nats_stop();
my $t0 = time;
emit(20, 'd');
$node->safe_psql('shop', q{SELECT eo_claim('outage-key'); SELECT * FROM eo_maintain();});
cmp_ok(time - $t0, '<', 5, 'with NATS down, emits, claims and eo_maintain go on at once');
usleep(1_500_000);
nats_start();
ok(drained('billing', 30), 'NATS back: the forwarder reconnects and delivers');
like(slurp_file("$dir/outage.log"), qr/lost the connection to NATS/, '... it said it lost NATS');

# ---- PostgreSQL stopped immediately -------------------------------------

$node->stop('immediate');
usleep(1_000_000);
$node->start;
emit(20, 'e');
ok(drained('billing', 30), 'PostgreSQL back: the forwarder reconnects and delivers');
stop_all($after);
like(slurp_file("$dir/outage.log"), qr/lost the connection to PostgreSQL|cannot connect to PostgreSQL/,
	'... it said it lost PostgreSQL');
check_stream('after NATS and PostgreSQL restarts');

# The password in the URLs themselves: each is logged without it.
eo_nats_run('url.log', 'stream-info', '--nats',
	"nats://fwd:$password\@127.0.0.1:$nport,nats://fwd:$password\@127.0.0.1:$nport", '--stream', 'BILLING');
like(slurp_file("$dir/url.log"), qr{connected to NATS at nats://127.0.0.1:$nport,nats://127.0.0.1:$nport},
	'URLs are logged without their user information');
my $logs = join '', map { slurp_file($_) } glob("$dir/*.log");
unlike($logs, qr/\Q$password\E/, 'the NATS password is in no log');

# ---- refusals -------------------------------------------------------------

($rc) = eo_nats_run('admin.log', 'stream-add', @nats, '--stream', 'BIG', '--subjects', 'big.>',
	'--max-msg-size', '2048');
$node->safe_psql('shop', q{
SELECT eo_emit('big', 'order', 'a', 'A1', '{}');
SELECT eo_emit('big', 'order', 'x', 'X1', jsonb_build_object('blob', repeat('x', 5000)));
SELECT eo_emit('big', 'order', 'b', 'B1', '{}');
SELECT eo_emit('big', 'order', 'x', 'X2', '{}');
SELECT eo_emit('big', 'order', 'a', 'A2', '{}');
});
my $big_x1 = $node->safe_psql('shop', q{SELECT id FROM big WHERE type = 'X1'});
$pid = eo_nats_start('big.log', {}, @nats, @shop, 'forward', '--outbox', 'big', '--group', 'nats',
	'--stream', 'BIG');
usleep(2_500_000);
stop_all($pid);
my $biglog = slurp_file("$dir/big.log");
like($biglog, qr/event \Q$big_x1\E \(outbox "big", aggregate "order" "x", type "X1", seq \d+\) was not delivered: .*(size|maximum)/i,
	'an event over the stream\'s size limit: the log names it and the cause');
my %stored = map { field($_, 'Eo-Type') => 1 } @{ dump_stream('BIG') };
is(join(',', sort keys %stored), 'A1,A2,B1',
	'the other aggregates\' events were published, the refused one\'s later event was not');
is($node->safe_psql('shop', q{SELECT sum(backlog) FROM eo_outbox_status WHERE outbox = 'big'}),
	'4', 'only the event before the refused one is acknowledged');

$node->safe_psql('shop', q{SELECT eo_emit('billing', 'order', E'z\neo_nats info: forged', 'Z1', '{}')});
my $z1 = $node->safe_psql('shop', q{SELECT id FROM billing WHERE type = 'Z1'});
$pid = eo_nats_start('nostream.log', {}, @nats, @shop, 'forward', '--outbox', 'billing', '--group', 'nats',
	'--subject', 'nowhere.{aggregatetype}', '--ack-wait', '1000');
usleep(2_500_000);
stop_all($pid);
my $nostream = slurp_file("$dir/nostream.log");
like($nostream, qr/event \Q$z1\E .* was not delivered: no stream takes subject "nowhere.order"/,
	'a subject no stream takes: the log names the event, the subject and the cause');
like($nostream, qr/aggregate "order" "z\?eo_nats info: forged"/, 'a value that holds a newline is logged with ? for it');
unlike($nostream, qr/^eo_nats info: forged/m, '... so it cannot forge a log line');
is($node->safe_psql('shop', q{SELECT sum(backlog) FROM eo_outbox_status WHERE outbox = 'billing'}),
	'1', '... and it is not acknowledged');
$after = eo_nats_start('z.log', {}, @forward);
ok(drained('billing', 20), 'forwarded to the right subject, it goes through');
stop_all($after);
($rc) = eo_nats_run('start.log', @nats, @shop, 'forward', '--outbox', 'billing', '--group', 'nats',
	'--stream', 'NOPE', '--once');
isnt($rc, 0, 'a stream that does not exist: the forwarder refuses to start');
like(slurp_file("$dir/start.log"), qr/stream "NOPE": it does not exist/, '... saying so');

# ---- the consumer side: eo_nats apply -------------------------------------

# One event whose SQL fails on its data (n is not a number: 22P02), and
# one after it.
$node->safe_psql('shop', q{
SELECT eo_emit('billing', 'order', 'agg-bad', 'bad', '{"n": "x"}');
SELECT eo_emit('billing', 'order', 'agg-bad', 'after-bad', '{"n": 1}');});
$after = eo_nats_start('bad.log', {}, @forward);
ok(drained('billing', 20), 'they are forwarded');
stop_all($after);

my @apply = (@nats, '--pg', $node->connstr('inbox'), 'apply', '--stream', 'BILLING',
	'--durable', 'inbox', '--ack-wait', '1000', '--scope', 'billing-consumer', '--sql',
	q{INSERT INTO public.ledger (id, aggregate, type, n) VALUES ($1::uuid, $4->>'Eo-Aggregate-Id', $4->>'Eo-Type', ($3->>'n')::int) ON CONFLICT (id) DO UPDATE SET applied = ledger.applied + 1});
$pid = eo_nats_start('apply-crash.log', { EO_NATS_CRASH_AT => 'after-commit' }, @apply);
EoNats::exited_within($pid, 120) or kill9($pid);    # a crash point never reached fails below
like(slurp_file("$dir/apply-crash.log"), qr/crash point after-commit/, 'an applier died after COMMIT, before its ack');
usleep(1_500_000);    # past the durable's AckWait
($rc) = eo_nats_run('apply.log', @apply, '--once');
is($rc, 1, 'the next applier runs to the end (exit 1 with --once: --sql failed on a message)');
like(slurp_file("$dir/apply.log"), qr/stopping: \d+ applied, \d+ duplicates, 1 failed and 0 busy \(offered again\), 0 terminated/,
	'... and says what became of the messages');
my $events = $node->safe_psql('shop', q{SELECT count(*) FROM billing});
my $bad = $node->safe_psql('shop', q{SELECT count(*) FROM billing WHERE payload->>'n' = 'x'});
is($node->safe_psql('inbox', q{SELECT count(*) || ' ' || max(applied) FROM ledger}),
	($events - $bad) . " 1", 'every event applied once, the one redelivered after the crash too');
is($node->safe_psql('inbox', q{SELECT count(*) FROM ledger l, eo_status(l.id::text, 'billing-consumer') s WHERE s.state = 'done'}),
	$events - $bad, 'each under a done key (its event id, in the consumer\'s scope)');
my $bad_id = $node->safe_psql('shop', q{SELECT id FROM billing WHERE type = 'bad'});
is($node->safe_psql('inbox', qq{SELECT state || ' ' || attempts || ' ' || (last_error LIKE 'invalid input syntax%')
  FROM eo_status('$bad_id', 'billing-consumer')}), 'failed 1 true',
	'an event whose SQL fails on its data (22P02): the failure recorded against its key, a retry, never final');
is($node->safe_psql('inbox', q{SELECT count(*) FROM ledger WHERE type = 'after-bad'}), '1',
	'... and the events after it are still applied');

nats_stop();
$node->stop;
done_testing();
