# Copyright: eo authors.  See README.
#
# eo_nats apply's batches, sent in pipelines (BEGIN and up to 63 claims in
# one round trip, then --sql, the last one's with COMMIT), against a real
# nats-server:
# - 150 messages fetched 100 at a time (claims in two pipelines): each
#   applied once, in order per aggregate;
# - a second durable reading them all again: every claim a duplicate, a
#   batch of nothing but a COMMIT, nothing applied twice;
# - a batch whose last --sql fails on its message's data (22P02): nothing
#   of the batch committed, then each message on its own: the others
#   applied once, the failure recorded against that message alone;
# - a batch whose COMMIT fails (a deferred unique constraint two messages
#   break together): the same, the second of the two recorded as failed.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoNats;
use EoTest;

EoNats::require_nats();

my $node = EoTest::eo_node('batch', conf => "eo.naptime = 1", eo_in => []);
for my $db ('shop', 'inbox')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION eo');
}
# an outbox and a stream for each part, so that no message of one is
# offered again in another
for my $o ('orders', 'bad', 'defer')
{
	$node->safe_psql('shop', qq{
SELECT eo_outbox_create('$o', slots => 4) IS NOT NULL;
SELECT eo_group_create('$o', 'nats');
});
}
# seq: the order the consumer applied them in; k: unique at COMMIT
$node->safe_psql('inbox', q{
CREATE TABLE ledger (id uuid PRIMARY KEY, aggregate text, n int, k int,
                     seq bigint GENERATED ALWAYS AS IDENTITY, applied int DEFAULT 1,
                     CONSTRAINT k_once UNIQUE (k) DEFERRABLE INITIALLY DEFERRED);
SELECT eo_scope_create('orders-consumer');
});

my $nats = EoNats->new;
my @nats = @{ $nats->nats };
my $sql = q{INSERT INTO public.ledger (id, aggregate, n, k)
 VALUES ($1::uuid, $4->>'Eo-Aggregate-Id', ($3->>'n')::int, ($3->>'k')::int)
 ON CONFLICT (id) DO UPDATE SET applied = ledger.applied + 1};
# apply from outbox $o's stream
sub apply
{
	my ($o, $durable) = @_;
	return (@nats, '--pg', $node->connstr('inbox'), 'apply', '--stream', uc $o, '--durable', $durable,
		'--scope', 'orders-consumer', '--sql', $sql, '--ack-wait', '1000', '--batch', '100', '--once');
}

# n events into outbox $o, forwarded to its stream; payload {"n": g, "k":
# k(g)} (k defaults to a number no other has)
sub emit
{
	my ($o, $n, $n_sql, $k_sql) = @_;
	$k_sql //= "1000000 + nextval('ks')";
	$node->safe_psql('shop', qq{
CREATE SEQUENCE IF NOT EXISTS ks;
SELECT count(eo_emit('$o', 'order', 'agg-' || (g % 7), 'placed',
                     jsonb_build_object('n', $n_sql, 'k', $k_sql)))
FROM generate_series(1, $n) g;});
	my ($rc) = $nats->run('forward.log', @nats, '--pg', $node->connstr('shop'), 'forward',
		'--outbox', $o, '--group', 'nats', '--stream', uc $o, '--once');
	is($rc, 0, "$n events forwarded to " . uc $o);
}

sub ledger
{
	return $node->safe_psql('inbox', 'SELECT count(*) || \' \' || max(applied) FROM ledger');
}

for my $o ('orders', 'bad', 'defer')
{
	my ($rc) = $nats->run('admin.log', 'stream-add', @nats, '--stream', uc $o, '--subjects', "$o.>");
	is($rc, 0, 'stream ' . uc $o . ' made');
}
my $rc;

# ---- 150 messages, fetched 100 at a time ----------------------------------------

emit('orders', 150, 'g');
($rc) = $nats->run('apply1.log', apply('orders', 'first'));
is($rc, 0, 'apply --once exits 0');
like($nats->log('apply1.log'), qr/stopping: 150 applied, 0 duplicates, 0 failed/, '... 150 applied');
is(ledger(), '150 1', 'each of the 150 applied once');
is($node->safe_psql('inbox', q{
SELECT count(*) FROM (SELECT n, lag(n) OVER (PARTITION BY aggregate ORDER BY seq) AS before FROM ledger) l
 WHERE n < before}), '0', '... in order per aggregate');
is($node->safe_psql('inbox', q{
SELECT count(*) FROM ledger l, eo_status(l.id::text, 'orders-consumer') s WHERE s.state = 'done'}),
	'150', '... each under a done key');

# ---- all of them again: duplicates only -----------------------------------------

($rc) = $nats->run('apply2.log', apply('orders', 'second'));
is($rc, 0, 'a second durable reads the stream again: exit 0');
like($nats->log('apply2.log'), qr/stopping: 0 applied, 150 duplicates, 0 failed/, '... all duplicates');
is(ledger(), '150 1', '... nothing applied twice');

# ---- the last --sql of a batch fails on its data ---------------------------------

emit('bad', 9, 'g');
emit('bad', 1, "'x'");    # n is not a number: 22P02 in --sql, the last message of the fetch
($rc) = $nats->run('apply3.log', apply('bad', 'first'));
is($rc, 1, 'a batch whose last --sql fails: apply --once exits 1 (a message failed)');
like($nats->log('apply3.log'), qr/stopping: 9 applied, 0 duplicates, 1 failed/,
	'... the 9 others applied on their own, the failure counted');
is(ledger(), '159 1', '... each once');
my $bad_id = $node->safe_psql('shop', q{SELECT id FROM bad WHERE payload->>'n' = 'x'});
is($node->safe_psql('inbox', qq{SELECT state || ' ' || attempts FROM eo_status('$bad_id', 'orders-consumer')}),
	'failed 1', '... the failure recorded against that message\'s key');

# ---- a batch whose COMMIT fails --------------------------------------------------

emit('defer', 5, 'g', "CASE WHEN g IN (2, 4) THEN 7 ELSE 2000000 + g END");    # two with k = 7
($rc) = $nats->run('apply4.log', apply('defer', 'first'));
is($rc, 1, 'a batch whose COMMIT fails (a deferred unique constraint): exit 1');
like($nats->log('apply4.log'), qr/stopping: 4 applied, 0 duplicates, 1 failed/,
	'... the 4 others applied on their own; the second k = 7 failed at its COMMIT');
is(ledger(), '163 1', '... each once');
is($node->safe_psql('inbox', q{SELECT count(*) FROM ledger WHERE k = 7}), '1', '... one of the two with k = 7');

$nats->stop;
$node->stop;
done_testing();
