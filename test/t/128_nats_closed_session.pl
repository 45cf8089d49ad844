# Copyright: eo authors.  See README.
#
# eo_nats when its server closed the session while eo_nats was not
# reading it (an immediate shutdown; a crash of another backend does the
# same): the server said a WARNING and closed.  The next pipeline is then
# sent into a closed socket, and libpq answers its reads with one
# failure, then NULL for ever, the session still CONNECTION_OK.  pgpipe.c
# waited there for the pipeline's Sync, spinning at 100% CPU, deaf to
# SIGTERM.  Two ways there, each checked: says it lost the connection,
# goes on when the server is back, stops when asked:
# - apply, idle, waiting for messages: then applies what came meanwhile,
#   each once;
# - forward waiting for PubAcks of a page it acknowledges with the next
#   fetch (in one pipeline: fetch_in_one): then delivers the rest.

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
SELECT eo_outbox_create('billing', slots => 4) IS NOT NULL;
SELECT eo_group_create('billing', 'nats');
});
my $inbox = EoTest::eo_node('inbox', conf => "eo.naptime = 1", eo_in => ['postgres']);
$inbox->safe_psql('postgres', q{
CREATE TABLE effects (id uuid NOT NULL, n int NOT NULL);   -- no unique constraint: on purpose
SELECT eo_scope_create('billing-consumer');
});

my $nats = EoNats->new;
my @nats = @{ $nats->nats };
my ($rc) = $nats->run('admin.log', 'stream-add', @nats, '--stream', 'BILLING', '--subjects', 'billing.>');
is($rc, 0, 'stream BILLING made');

# n events emitted and forwarded (forward --once: its own server stays up)
sub emit_and_forward
{
	my ($from, $n) = @_;
	$shop->safe_psql('postgres', qq{
SELECT count(eo_emit('billing', 'order', 'agg-' || (g % 3), 'Placed', jsonb_build_object('n', g)))
FROM generate_series($from, $from + $n - 1) g});
	my ($rc) = $nats->run('forward.log', @nats, '--pg', $shop->connstr('postgres'), 'forward',
		'--outbox', 'billing', '--group', 'nats', '--stream', 'BILLING', '--once');
	return $rc;
}

sub applied
{
	return $inbox->safe_psql('postgres', q{SELECT count(*) || ' ' || count(DISTINCT id) FROM effects});
}

my $ap = $nats->spawn('apply.log', {}, @nats, '--pg', $inbox->connstr('postgres'), 'apply', '--stream',
	'BILLING', '--durable', 'inbox', '--scope', 'billing-consumer', '--sql',
	q{INSERT INTO public.effects (id, n) SELECT $1::uuid, ($3->>'n')::int});
is(emit_and_forward(1, 5), 0, '5 events forwarded');
ok($inbox->poll_query_until('postgres', q{SELECT count(*) = 5 FROM effects}), 'apply applied them');

# apply is idle, waiting for messages: its server goes away
$inbox->stop('immediate');
is(emit_and_forward(6, 5), 0, '5 more forwarded while apply\'s server is down');
ok($nats->wait_log('apply.log', qr/lost the connection to PostgreSQL; reconnecting/, 30),
	'apply: its batch met the closed session, and it says it lost the connection')
  or diag($nats->log('apply.log'));
ok($nats->wait_log('apply.log', qr/cannot connect to PostgreSQL: .*; trying again/, 30),
	'... and tries again while the server is down');
$inbox->start;
ok($inbox->poll_query_until('postgres', q{SELECT count(*) = 10 FROM effects}),
	'the server back: apply applies what came meanwhile');
sleep 1;    # room for a second application, were there one
is(applied(), '10 10', '... each event once');

# a stop is heard (the spinning apply was deaf to SIGTERM)
EoNats::stop_all($ap);
like($nats->log('apply.log'), qr/stopping: \d+ applied/, 'apply stops when asked');

# ---- forward: its server goes away while it waits for PubAcks ------------
#
# A backlog of full pages (--max-events 10): each page stored whole waits
# to be acknowledged with the next fetch, in one pipeline.  nats-server is
# stopped (SIGSTOP) while forward publishes: forward waits in its PubAcks
# (--ack-wait 20 s), not in PostgreSQL, when its server stops; nats-server
# goes on, the page is stored whole, and the pipeline meets the closed
# session.

my $total = 5000;
$shop->safe_psql('postgres', qq{
SELECT count(eo_emit('billing', 'order', 'agg-' || (g % 3), 'Placed', jsonb_build_object('n', g)))
FROM generate_series(11, 10 + $total) g});
my $fw = $nats->spawn('forward-2.log', {}, @nats, '--pg', $shop->connstr('postgres'), 'forward',
	'--outbox', 'billing', '--group', 'nats', '--stream', 'BILLING', '--max-events', '10',
	'--ack-wait', '20000', '--lease', '5');
ok($shop->poll_query_until('postgres', qq{SELECT sum(backlog) < $total - 100 FROM eo_outbox_status}),
	'forward delivers the backlog, page by page');
kill 'STOP', $nats->pid;
usleep(500_000);
# Events left with nats-server paused: forward cannot finish the page it
# publishes, so it waits for PubAcks now (were the backlog gone, it would
# wait in PostgreSQL instead, and this part would not test the pipeline).
ok($shop->safe_psql('postgres', q{SELECT sum(backlog) > 10 FROM eo_outbox_status}) eq 't',
	'nats-server paused with the backlog not yet delivered: forward waits for PubAcks');
$shop->stop('immediate');
kill 'CONT', $nats->pid;
ok($nats->wait_log('forward-2.log', qr/lost the connection to PostgreSQL; reconnecting/, 30),
	'forward: its next fetch met the closed session, and it says it lost the connection')
  or diag($nats->log('forward-2.log'));
$shop->start;
ok($shop->poll_query_until('postgres', q{SELECT sum(backlog) = 0 FROM eo_outbox_status}),
	'the server back: forward delivers the rest');
my %in_stream;
$in_stream{ EoNats::field($_, 'Nats-Msg-Id') }++ for @{ $nats->dump('BILLING') };
is(scalar(keys %in_stream), $total + 10, 'every event is in the stream');
EoNats::stop_all($fw);
like($nats->log('forward-2.log'), qr/stopping: \d+ events delivered/, 'forward stops when asked');
$nats->stop;
done_testing();
