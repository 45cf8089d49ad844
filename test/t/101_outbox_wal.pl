# Copyright: eo authors.  See README.
#
# WAL-mode outbox: eo_emit writes each event as a transactional logical
# decoding message with prefix "eo:<outbox>" instead of a table row.  Read
# back through a logical replication slot with test_decoding: every event
# of a committed transaction arrives, at its commit, in emit order, as a
# JSON object with the outbox columns; none of a rolled-back transaction
# or savepoint does.  The outbox table stays empty and refuses plain
# INSERTs; with wal_level below logical eo_emit refuses to run rather
# than lose the event.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;

my $node = EoTest::eo_node('outbox_wal', init => {allows_streaming => 'logical'});

is( $node->safe_psql('postgres',
		q{SELECT eo_outbox_create('walbox', mode => 'wal')}),
	'walbox', 'WAL-mode outbox created');
$node->safe_psql('postgres',
	q{SELECT pg_create_logical_replication_slot('eo_slot', 'test_decoding')});

# A producer role: INSERT on the outbox table is what lets it emit.
$node->safe_psql(
	'postgres', q{
CREATE ROLE app LOGIN;
GRANT EXECUTE ON FUNCTION eo_emit(text, text, text, text, jsonb, jsonb) TO app;
GRANT INSERT ON walbox TO app;});

# Two events in one transaction, one rolled back, one in a rolled-back
# savepoint, one alone (as the producer role).
my $ids = $node->safe_psql(
	'postgres', q{
BEGIN;
SELECT eo_emit('walbox', 'order', 'o1', 'Created', '{"amount": 100}');
SELECT eo_emit('walbox', 'order', 'o1', 'Paid', '{"amount": 100}', '{"trace": "t\"1"}');
SAVEPOINT s;
SELECT eo_emit('walbox', 'order', 'o1', 'Lost', NULL);
ROLLBACK TO SAVEPOINT s;
COMMIT;
BEGIN;
SELECT eo_emit('walbox', 'order', 'o2', 'Lost', NULL);
ROLLBACK;});
my @committed = (split /\n/, $ids)[0, 1];
my $third = $node->safe_psql('postgres',
	q{SELECT eo_emit('walbox', 'order', 'o3', 'Shipped', NULL)},
	extra_params => [ '-U', 'app' ]);
push @committed, $third;

# The messages, as test_decoding shows them.
my $changes = $node->safe_psql('postgres',
	q{SELECT data FROM pg_logical_slot_get_changes('eo_slot', NULL, NULL)
	  WHERE data LIKE 'message:%'});
my @messages = split /\n/, $changes;
is(scalar @messages, 3, 'three messages: the committed events only');
like($_, qr/^message: transactional: 1 prefix: eo:walbox, sz: \d+ content:\{/,
	'a transactional message with prefix eo:walbox')
  for @messages;
unlike($changes, qr/Lost/, 'no event of a rolled-back transaction or savepoint');

my @contents = map { (/content:(\{.*\})$/)[0] } @messages;
for my $i (0 .. 2)
{
	like($contents[$i], qr/^\{"id":"\Q$committed[$i]\E",/,
		"message $i carries the id eo_emit returned");
}
like($contents[0],
	qr/"aggregatetype":"order","aggregateid":"o1","type":"Created","payload":\{"amount": 100\},"headers":null,"created_at":"/,
	'first event: all outbox columns');
like($contents[1], qr/"type":"Paid".*"headers":\{"trace": "t\\"1"\}/,
	'second event: headers, JSON-escaped');
like($contents[2], qr/"aggregateid":"o3","type":"Shipped","payload":null/,
	'third event, from the producer role');

# The messages are valid JSON: PostgreSQL parses them back.
my $json_ok = join ',', map { my $c = $_; $c =~ s/'/''/g; "'$c'::jsonb ->> 'id'" } @contents;
is($node->safe_psql('postgres', "SELECT concat_ws(' ', $json_ok)"),
	join(' ', @committed), 'messages parse as JSON with the right ids');

is($node->safe_psql('postgres', 'SELECT count(*) FROM walbox'),
	'0', 'the outbox table stays empty');
my ($ret, $out, $err) = $node->psql('postgres',
	q{INSERT INTO walbox (aggregatetype, aggregateid, type) VALUES ('order', 'x', 'y')});
like($err, qr/violates check constraint "walbox_wal_mode_use_eo_emit"/,
	'a plain INSERT into a WAL-mode outbox is refused');

# A decoded message survives a restart of the server (it is WAL).
$node->safe_psql('postgres',
	q{SELECT eo_emit('walbox', 'order', 'o4', 'AfterRestart', NULL)});
$node->stop('immediate');
$node->start;
like( $node->safe_psql('postgres',
		q{SELECT data FROM pg_logical_slot_get_changes('eo_slot', NULL, NULL)
		  WHERE data LIKE 'message:%'}),
	qr/"aggregateid":"o4","type":"AfterRestart"/,
	'an event emitted before an immediate shutdown is decoded after it');

# Below wal_level = logical no decoder could ever read the event.
$node->safe_psql('postgres', q{SELECT pg_drop_replication_slot('eo_slot')});
$node->append_conf('postgresql.conf', 'wal_level = replica');
$node->restart;
($ret, $out, $err) = $node->psql('postgres',
	q{SELECT eo_emit('walbox', 'order', 'o5', 'Nowhere', NULL)});
isnt($ret, 0, 'eo_emit fails with wal_level = replica');
like($err, qr/outbox "walbox" writes events to the WAL, but wal_level is not "logical"/,
	'and says why');

$node->stop;
done_testing();
