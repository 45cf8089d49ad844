# Copyright: eo authors.  See README.
#
# eo's memory across pg_dump / pg_restore.  A source cluster
# whose transaction ids are far ahead of a fresh one holds keys in every
# state, a lease, an outbox with two consumer groups (one partly through
# its events, with a page outstanding; one that has read nothing) and a
# switched generation.  Its dump is restored into fresh clusters, with
# pg_restore (serial and -j 2) and as plain SQL through psql.  After each:
# - every key answers as before (duplicate with its result, a different
#   fingerprint refused, failed and dead keys as they were, the lease busy,
#   owners kept), and new lease tokens are above every token issued;
# - eo_outbox_status shows the same backlog at once;
# - each group gets exactly the events it had not acknowledged, and
#   events written after the restore, and nothing twice;
# A schema-only restore gives working claims and an outbox that
# eo_outbox_create adopts; DROP EXTENSION eo CASCADE leaves an outbox that
# eo_outbox_create adopts, with its sequence continuing.

use strict;
use warnings;

use File::Temp qw(tempdir);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tmp = tempdir(CLEANUP => 1);

sub new_node
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'eo'
eo.naptime = 3600
});
	$node->start;
	return $node;
}

my $src = new_node('source');
# Transaction ids far ahead of a fresh cluster's.
$src->safe_psql('postgres', q{
CREATE TABLE burn (x int);
DO $$BEGIN FOR i IN 1..3000 LOOP INSERT INTO burn VALUES (i); COMMIT; END LOOP; END$$;
});
$src->safe_psql('postgres', q{
CREATE ROLE app;
CREATE ROLE relay;
CREATE DATABASE shop;
});
$src->safe_psql('shop', q{
CREATE EXTENSION eo;
GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text), eo_complete(text, jsonb, bigint, text),
    eo_fail(text, text, bigint, interval, text, text, boolean), eo_status(text, text),
    eo_scope_create(text, text), eo_scope_drop(text) TO app;
SET ROLE app;
BEGIN;
SELECT eo_claim('done', 'fp-1');
SELECT eo_complete('done', '{"charge": "ch_1"}');
COMMIT;
-- the same key in a scope; and in a scope dropped since, whose id a new
-- scope must not take again after the restore
SELECT eo_scope_create('billing');
SELECT eo_scope_create('gone');
BEGIN;
SELECT eo_claim('done', scope => 'billing');
SELECT eo_complete('done', '{"scope": "billing"}', scope => 'billing');
COMMIT;
SELECT eo_claim('done', scope => 'gone');
SELECT eo_scope_drop('gone');
RESET ROLE;
-- a switched generation, so that keys live in two tables
SET eo.partition_interval = 1;
SELECT pg_sleep(1.1);
SELECT switched FROM eo_maintain();
RESET eo.partition_interval;
SET ROLE app;
SELECT eo_claim('done2');
SELECT eo_fail('failed', 'upstream down', lease_token, '1 hour')
  FROM eo_claim('failed', lease => '1 hour');
SELECT lease_token FROM eo_claim('leased', lease => '1 hour');
RESET ROLE;
SET eo.max_attempts = 1;
SELECT eo_claim('dead', lease => '1 hour');
SELECT eo_fail('dead', 'gave up', (SELECT lease_token FROM eo_status('dead')));
-- a key redriven once, and the lease's recorded progress
SELECT eo_fail('redriven', 'gave up');
SELECT eo_redrive('redriven');
RESET eo.max_attempts;
SELECT eo_recovery_point('leased', (SELECT lease_token FROM eo_status('leased')), 'step1', '{"n": 1}');
SELECT eo_outbox_create('billing', slots => 2);
GRANT SELECT ON billing TO relay;
GRANT EXECUTE ON FUNCTION eo_relay_fetch(text, text, int, interval),
    eo_relay_ack(text, text, bigint) TO relay;
SELECT eo_group_create('billing', 'fast', owner => 'relay');
SELECT eo_group_create('billing', 'slow', owner => 'relay');
SELECT count(eo_emit('billing', 'order', 'o' || (i % 5), 'E' || i, jsonb_build_object('n', i)))
  FROM generate_series(1, 30) i;
});
# "fast" acknowledges some pages and leaves one outstanding.
my $fast_acked = 0;
for (1 .. 2)
{
	$fast_acked += $src->safe_psql('shop', q{
SET ROLE relay;
SELECT eo_relay_ack('billing', 'fast', max(lease_token))
  FROM eo_relay_fetch('billing', 'fast', 4, '1 hour');});
}
$src->safe_psql('shop', q{SET ROLE relay;
SELECT count(*) FROM eo_relay_fetch('billing', 'fast', 4, '1 hour');});
my $acked_events = $src->safe_psql('shop', q{
SELECT string_agg(type, ',' ORDER BY seq) FROM billing e
WHERE NOT EXISTS (SELECT FROM eo_internal.eo_outbox_slots s
                  WHERE s.grp = 'fast' AND s.slot = (hashtext(e.aggregateid) & 2147483647) % 2
                  AND NOT (pg_visible_in_snapshot(e.txid, s.pos_snap)
                           OR (s.acked_seq IS NOT NULL AND e.seq <= s.acked_seq
                               AND pg_visible_in_snapshot(e.txid, s.batch_snap))))});
ok($fast_acked > 0, "the source's fast group acknowledged $fast_acked events");
my $status_q = q{SELECT consumer_group, backlog FROM eo_outbox_status ORDER BY 1};
my $src_status = $src->safe_psql('shop', $status_q);
my $max_token = $src->safe_psql('shop',
	q{SELECT max(lease_token) FROM eo_keys() WHERE lease_token IS NOT NULL});
my $src_xid = $src->safe_psql('shop', 'SELECT pg_current_xact_id()');

my $dump = "$tmp/shop.dump";
my $sqldump = "$tmp/shop.sql";
$src->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $src->connstr('shop') ], 'pg_dump -Fc');
$src->command_ok([ 'pg_dump', '-Fp', '-f', $sqldump, '-d', $src->connstr('shop') ], 'pg_dump -Fp');

# Everything a restored database must answer as the source did.
sub check_restored
{
	my ($node, $how) = @_;
	cmp_ok($node->safe_psql('shop', 'SELECT pg_current_xact_id()'), '<', $src_xid,
		"$how: the new cluster's transaction ids are behind the source's");
	is( $node->safe_psql('shop', q{SET ROLE app;
SELECT status, result FROM eo_claim('done', 'fp-1')}),
		'duplicate|{"charge": "ch_1"}', "$how: a done key is a duplicate with its result");
	my ($ret, $out, $err) = $node->psql('shop', q{SET ROLE app; SELECT eo_claim('done', 'fp-2')});
	like($err, qr/different fingerprint/, "$how: ... and keeps its fingerprint");
	is( $node->safe_psql('shop', q{SET ROLE app;
SELECT status, result FROM eo_claim('done', scope => 'billing')}),
		'duplicate|{"scope": "billing"}', "$how: a key in a scope is there, with its result");
	is( $node->safe_psql('shop', q{SELECT name, owner FROM eo_scopes}),
		'billing|app', "$how: scopes keep their owner");
	$node->safe_psql('shop', q{SET ROLE app; SELECT eo_scope_create('gone')});
	is( $node->safe_psql('shop', q{SET ROLE app; SELECT status FROM eo_claim('done', scope => 'gone')}),
		'claimed', "$how: a new scope does not get a dropped scope's id, nor its keys");
	is($node->safe_psql('shop', q{SET ROLE app; SELECT status FROM eo_claim('done2')}),
		'duplicate', "$how: a key of the other generation too");
	is($node->safe_psql('shop', q{SET ROLE app; SELECT state, attempts, last_error FROM eo_status('failed')}),
		'failed|1|upstream down', "$how: a failed key stays failed");
	is($node->safe_psql('shop', q{SELECT state FROM eo_status('dead')}),
		'dead', "$how: a dead key stays dead");
	is($node->safe_psql('shop', q{SET ROLE app; SELECT status FROM eo_claim('leased')}),
		'busy', "$how: a live lease is still a lease");
	is( $node->safe_psql(
			'shop', q{SELECT key, recovery_point, recovery_state, attempts_before_redrive
FROM eo_keys() WHERE key IN ('leased', 'redriven') ORDER BY key}),
		"leased|step1|{\"n\": 1}|\nredriven|||1", "$how: recovery points and redrives are kept");
	is($node->safe_psql('shop', q{SET eo.max_attempts = 1; SELECT status, attempts FROM eo_claim('redriven')}),
		'claimed|2', "$how: ... so the redriven key still has its attempt");
	is($node->safe_psql('shop', q{SELECT owner FROM eo_keys() WHERE key = 'done' AND scope = 0}),
		'app', "$how: keys keep their owner");
	cmp_ok($node->safe_psql('shop', q{SELECT lease_token FROM eo_claim('new', lease => '1 s')}),
		'>', $max_token, "$how: new lease tokens are above every token issued");
	is($node->safe_psql('shop', $status_q), $src_status,
		"$how: eo_outbox_status shows the backlog at once");

	# Events after the restore, then drain both groups.
	$node->safe_psql('shop', q{
SELECT count(eo_emit('billing', 'order', 'o' || (i % 5), 'N' || i, NULL)) FROM generate_series(1, 3) i});
	my %got;
	for my $grp ('fast', 'slow')
	{
		my @types;
		for (1 .. 50)
		{
			my $page = $node->safe_psql('shop', qq{
SET ROLE relay;
CREATE TEMP TABLE p AS SELECT * FROM eo_relay_fetch('billing', '$grp', 7);
SELECT string_agg(type, ',' ORDER BY slot, seq) FROM p;
SELECT eo_relay_ack('billing', '$grp', t) FROM (SELECT max(lease_token) t FROM p) x WHERE t IS NOT NULL;});
			my ($list) = split /\n/, $page;
			last if !defined $list || $list eq '';
			push @types, split /,/, $list;
		}
		$got{$grp} = \@types;
	}
	my %fast_acked = map { $_ => 1 } split /,/, $acked_events;
	my @want_fast = grep { !$fast_acked{$_} } (map { "E$_" } 1 .. 30), (map { "N$_" } 1 .. 3);
	is(join(',', sort @{ $got{fast} }), join(',', sort @want_fast),
		"$how: the fast group gets exactly what it had not acknowledged, and the new events");
	is(join(',', sort @{ $got{slow} }), join(',', sort((map { "E$_" } 1 .. 30), (map { "N$_" } 1 .. 3))),
		"$how: the slow group gets every event once");
	is($node->safe_psql('shop', q{SELECT sum(backlog) FROM eo_outbox_status}),
		'0', "$how: nothing left");
}

for my $how ('pg_restore', 'pg_restore -j 2', 'psql')
{
	(my $name = $how) =~ s/\W+/_/g;
	my $node = new_node("target_$name");
	$node->safe_psql('postgres', q{CREATE ROLE app; CREATE ROLE relay; CREATE DATABASE shop;});
	if ($how eq 'psql')
	{
		$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', $sqldump,
			'-d', $node->connstr('shop') ], "$how: restored");
	}
	else
	{
		my @j = $how =~ /-j 2/ ? ('-j', '2') : ();
		$node->command_ok([ 'pg_restore', '--exit-on-error', @j, '-d', $node->connstr('shop'), $dump ],
			"$how: restored");
	}
	check_restored($node, $how);
	$node->stop;
}

# A restore in stages: until its last section (the keys' indexes, the
# outbox's trigger and constraints) is in, neither is used - loudly - and
# the outbox's positions
# are not converted (which, done on a half-restored outbox, would lose or
# repeat events); once it is in, everything is as after a restore in one go.
{
	my $node = new_node('staged');
	$node->safe_psql('postgres', q{CREATE ROLE app; CREATE ROLE relay; CREATE DATABASE shop;});
	$node->command_ok([ 'pg_restore', '--exit-on-error', '--section=pre-data', '--section=data',
		'-d', $node->connstr('shop'), $dump ], 'staged: pre-data and data restored');
	my ($ret, $out, $err) = $node->psql('shop', q{SELECT eo_emit('billing', 'o', '1', 'early', NULL)});
	like($err, qr/ERROR:  outbox "billing" was restored from another cluster, and its restore has not finished/,
		'staged: eo_emit refuses the half-restored outbox');
	($ret, $out, $err) = $node->psql('shop', q{SET ROLE relay; SELECT * FROM eo_relay_fetch('billing', 'slow')});
	like($err, qr/its restore has not finished/, 'staged: ... and so does the relay');
	($ret, $out, $err) = $node->psql('shop', q{SET ROLE app; SELECT eo_claim('done', 'fp-1')});
	like($err, qr/ERROR:  key generation "eo_keys_\d+" has no unique index on \(key, scope\)/,
		'staged: a claim is refused until the keys\' indexes are in');
	($ret, $out, $err) = $node->psql('shop', q{SELECT * FROM eo_maintain()});
	unlike($err, qr/syntax error/, 'staged: maintenance fails cleanly');
	is($node->safe_psql('shop', q{
SELECT count(*) FROM eo_internal.eo_outboxes
WHERE sysid = (SELECT system_identifier FROM pg_control_system())}),
		'0', 'staged: maintenance converts nothing');
	$node->command_ok([ 'pg_restore', '--exit-on-error', '--section=post-data',
		'-d', $node->connstr('shop'), $dump ], 'staged: post-data restored');
	check_restored($node, 'staged');
	$node->stop;
}

# The schema, then the data, in two runs of pg_restore: the outbox's
# constraints are already there and refuse the events, saying what to do.
{
	my $node = new_node('schema_then_data');
	$node->safe_psql('postgres', q{CREATE ROLE app; CREATE ROLE relay; CREATE DATABASE shop;});
	$node->command_ok([ 'pg_restore', '--exit-on-error', '--schema-only',
		'-d', $node->connstr('shop'), $dump ], 'schema then data: schema restored');
	$node->command_fails_like([ 'pg_restore', '--exit-on-error', '--data-only',
		'-d', $node->connstr('shop'), $dump ],
		qr/seq and txid of an outbox event are set by eo.*\n(.*\n)*.*HINT:  .*restore the whole dump, or its sections in order, into an empty database/,
		'schema then data: the events are refused, with what to do instead');
	$node->stop;
}

# A schema-only restore: claims work, the outbox is adopted.
{
	my $node = new_node('schema_only');
	$node->safe_psql('postgres', q{CREATE ROLE app; CREATE ROLE relay; CREATE DATABASE shop;});
	$node->command_ok([ 'pg_restore', '--exit-on-error', '--schema-only', '-d',
		$node->connstr('shop'), $dump ], 'schema-only: restored');
	is($node->safe_psql('shop', q{SELECT status FROM eo_claim('done')}),
		'claimed', 'schema-only: claims work (the keys were data)');
	my ($ret, $out, $err) = $node->psql('shop', q{SELECT eo_emit('billing', 'o', '1', 'x', NULL)});
	like($err, qr/outbox "billing" does not exist/, 'schema-only: the outbox is not registered ...');
	$node->safe_psql('shop', q{SELECT eo_outbox_create('billing', slots => 2)});
	$node->safe_psql('shop', q{SELECT eo_group_create('billing', 'g');
SELECT eo_emit('billing', 'o', '1', 'x', NULL)});
	is($node->safe_psql('shop', q{SELECT type FROM eo_relay_fetch('billing', 'g')}),
		'x', '... until eo_outbox_create adopts it');
	$node->stop;
}

# Tombstones survive a dump too: keys whose full records retired answer
# from their tombstones in the restored database.
$src->safe_psql('postgres', 'CREATE DATABASE tomb');
$src->safe_psql('tomb', q{
CREATE EXTENSION eo;
GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text) TO app;
SET eo.tombstone_retention = '90d';
BEGIN;
SELECT eo_claim('old', 'fp-1');
SELECT eo_complete('old', '{"r": 1}');
COMMIT;
SET ROLE app;
SELECT eo_claim('old-app');
RESET ROLE;
SET eo.partition_interval = 1;
SELECT pg_sleep(1.1);
SELECT eo_maintain();
SELECT pg_sleep(1.1);
SELECT eo_maintain();
SET eo.retention = 1;
SELECT pg_sleep(1.1);
SELECT eo_maintain();
});
my $tomb_q = q{SET eo.tombstone_retention = '90d';
SELECT status, result, result_expired FROM eo_claim('old', 'fp-1')};
is($src->safe_psql('tomb', $tomb_q), 'duplicate||t', 'source: a retired key answers from its tombstone');
my $tomb_dump = "$tmp/tomb.dump";
$src->command_ok([ 'pg_dump', '-Fc', '-f', $tomb_dump, '-d', $src->connstr('tomb') ], 'pg_dump of tombstones');
{
	my $node = new_node('target_tomb');
	# app gets another OID here than in the source: the tombstone's owner
	# must follow the role by name
	$node->safe_psql('postgres', 'CREATE ROLE filler1; CREATE ROLE filler2; CREATE ROLE app; CREATE ROLE relay; CREATE DATABASE tomb');
	isnt($node->safe_psql('postgres', q{SELECT 'app'::regrole::oid}),
		$src->safe_psql('postgres', q{SELECT 'app'::regrole::oid}), 'tombstones: app has another OID in the target');
	$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('tomb'), $tomb_dump ],
		'tombstones: restored');
	is($node->safe_psql('tomb', $tomb_q), 'duplicate||t', 'tombstones: the key still answers from its tombstone');
	my ($ret, $out, $err) = $node->psql('tomb', q{SET eo.tombstone_retention = '90d';
SELECT status FROM eo_claim('old', 'fp-2')});
	like($err, qr/different fingerprint/, 'tombstones: ... and keeps its fingerprint');
	is($node->safe_psql('tomb', q{SET eo.tombstone_retention = '90d'; SET ROLE app;
SELECT status, result_expired FROM eo_claim('old-app')}), 'duplicate|t',
		"tombstones: app's retired key is still app's, under its new OID");
	$node->stop;
}

# DROP EXTENSION ... CASCADE: the outbox table stays, adoptable.
$src->safe_psql('shop', q{SET client_min_messages = warning; DROP EXTENSION eo CASCADE});
$src->safe_psql('shop', q{CREATE EXTENSION eo; SELECT eo_outbox_create('billing', slots => 2)});
is( (split /\n/, $src->safe_psql('shop', q{
SELECT eo_group_create('billing', 'again');
SELECT eo_emit('billing', 'o', '1', 'after', NULL);
SELECT seq > 30 FROM billing WHERE type = 'after'}))[-1],
	't', 'after DROP EXTENSION CASCADE, eo_outbox_create adopts the table and its seq continues');

$src->stop;
done_testing();
