# Copyright: eo authors.  See README.
#
# ALTER EXTENSION eo UPDATE from the released 0.1.0.  0.1.0 is
# built from its commit (tools/test.sh puts its source in EO_OLD_SOURCE)
# and installed into a private copy of the PostgreSQL installation; a
# server from that copy gets keys (done, failed, leased), a switched
# generation, an outbox with groups and unacknowledged events.  Then this
# build is installed over it and the server restarted:
# - with the new library and the old SQL objects, eo's functions refuse
#   with "run ALTER EXTENSION eo UPDATE" and the worker skips the database;
# - ALTER EXTENSION eo UPDATE, with the worker running, keeps every key,
#   lease, token and event, and everything works after it;
# - in a database whose owner replaced an outbox table, the update stops
#   with a message that names the outbox and says how to go on.

use strict;
use warnings;

use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;

my $old = $ENV{EO_OLD_SOURCE};
my $default = EoTest::default_version();
plan skip_all => 'EO_OLD_SOURCE (the 0.1.0 source, set by tools/test.sh) is not set'
  unless defined $old && -d $old;

my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
plan skip_all => '0.1.0 was released for PostgreSQL 15 only'
  unless `$pg_config --version` =~ /PostgreSQL 15\./;
my $inst = EoTest::private_install();
EoTest::install_eo($inst, $old, 'eo-0.1.0');
my $node = EoTest::node($inst, 'upgrade');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'eo'
eo.naptime = 1
});
$node->start;
$node->safe_psql('postgres', q{CREATE EXTENSION eo VERSION '0.1.0'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'eo'}),
	'0.1.0', 'the old version is installed');
$node->safe_psql('postgres', q{
CREATE ROLE app;
GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval), eo_status(text) TO app;
BEGIN;
SELECT eo_claim('done', 'fp');
SELECT eo_complete('done', '{"r": 1}');
COMMIT;
SET eo.partition_interval = 1;
SELECT pg_sleep(1.1);
SELECT switched FROM eo_maintain();
RESET eo.partition_interval;
SELECT eo_claim('done2');
SELECT eo_fail('failed', 'x', lease_token, '1 hour') FROM eo_claim('failed', lease => '1 hour');
SELECT eo_claim('leased', lease => '1 hour');
SELECT eo_outbox_create('billing', slots => 2);
SELECT eo_group_create('billing', 'g');
SELECT count(eo_emit('billing', 'order', 'o' || (i % 3), 'E' || i, NULL)) FROM generate_series(1, 10) i;
SELECT eo_relay_ack('billing', 'g', max(lease_token)) FROM eo_relay_fetch('billing', 'g', 3);
});
# A database whose owner replaced an outbox table with one of its own
# (public is its schema, so it may drop eo's table there).
$node->safe_psql('postgres', q{CREATE ROLE dbo; CREATE DATABASE shop OWNER dbo;});
$node->safe_psql('shop', q{
CREATE EXTENSION eo VERSION '0.1.0';
SELECT eo_outbox_create('orders', slots => 1);
SELECT eo_outbox_create('kept', slots => 1);
SELECT eo_outbox_create('lost', slots => 1);
SELECT eo_group_create('lost', 'g');
SET ROLE dbo;
DROP TABLE public.orders CASCADE;
CREATE TABLE public.orders (id int);
DROP TABLE public.lost CASCADE;
});
my $token = $node->safe_psql('postgres', q{SELECT lease_token FROM eo_status('leased')});
my $acked = $node->safe_psql('postgres', q{
SELECT string_agg(e.type, ',' ORDER BY e.type) FROM billing e, eo_outbox_slots s
WHERE s.grp = 'g' AND s.slot = (hashtext(e.aggregateid) & 2147483647) % 2
AND (pg_visible_in_snapshot(e.txid, s.pos_snap)
     OR (e.seq <= s.acked_seq AND pg_visible_in_snapshot(e.txid, s.batch_snap)))});
$node->stop;

# The new build over the old one.
EoTest::install_eo($inst, '.', 'eo-new');
my $log_offset = 0;
$node->start;
my ($ret, $out, $err) = $node->psql('postgres', q{SELECT eo_claim('between')});
like($err, qr/older than its library.*\n.*\n?.*ALTER EXTENSION eo UPDATE/s,
	'between the new library and the update, eo says to run ALTER EXTENSION eo UPDATE');
ok($node->wait_for_log(qr/skipping database "postgres": eo's SQL objects are older than its library/,
		$log_offset), 'the worker skips the database until then');

($ret, $out, $err) = $node->psql('postgres', q{ALTER EXTENSION eo UPDATE});
is($ret, 0, 'ALTER EXTENSION eo UPDATE succeeds');
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'eo'}),
	$default, "updated to $default (eo.control's default_version), with the worker running");
# The claim functions are made again (they take a scope): the update says
# which grants are gone, as statements to run again.
my @grants = $err =~ /^(GRANT EXECUTE ON FUNCTION .*;)$/mg;
like($err, qr/WARNING:  eo 0\.2\.0 makes eo_claim, eo_complete, eo_fail, eo_extend and eo_status again: these grants are gone/,
	'the update warns that grants on the claim functions are gone');
is(join("\n", @grants),
	"GRANT EXECUTE ON FUNCTION public.eo_claim TO app;\nGRANT EXECUTE ON FUNCTION public.eo_status TO app;",
	'... and lists them as statements');
($ret, $out, $err) = $node->psql('postgres', q{SET ROLE app; SELECT status FROM eo_claim('app-key')});
like($err, qr/permission denied for function eo_claim/, 'until they are run again, app cannot claim');
$node->safe_psql('postgres', join("\n", @grants));
is($node->safe_psql('postgres', q{SET ROLE app; SELECT status FROM eo_claim('app-key')}),
	'claimed', 'after running them, app claims again');
$node->safe_psql('postgres', q{SELECT eo_scope_create('s')});
is($node->safe_psql('postgres', q{SELECT status FROM eo_claim('done', scope => 's')}),
	'claimed', 'a key of 0.1.0 claimed in a scope is a new key');
is($node->safe_psql('postgres', q{SELECT status, result FROM eo_claim('done', 'fp')}),
	'duplicate|{"r": 1}', 'a done key is a duplicate with its result');
is($node->safe_psql('postgres', q{SELECT status FROM eo_claim('done2')}),
	'duplicate', 'a key of the other generation too');
is($node->safe_psql('postgres', q{SELECT state, attempts FROM eo_status('failed')}),
	'failed|1', 'a failed key stays failed');
is($node->safe_psql('postgres', q{SELECT state, lease_token FROM eo_status('leased')}),
	"processing|$token", 'a lease stays, with its token');
cmp_ok($node->safe_psql('postgres', q{SELECT lease_token FROM eo_claim('new', lease => '1 s')}),
	'>', $token, 'new tokens are above it');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_depend d JOIN eo_internal.eo_generations g
ON d.objid = g.relid WHERE d.deptype = 'e'}),
	'0', 'the generation tables are no longer extension members (pg_dump dumps them)');

# The replaced table stops the update, which names the outbox and what to do.
($ret, $out, $err) = $node->psql('shop', q{ALTER EXTENSION eo UPDATE});
like($err, qr/ERROR:  the table of outbox "orders" is not the one eo made/,
	'a replaced outbox table stops the update with a message naming the outbox');
like($err, qr/DETAIL:  Table public.orders \(or a partition of it\) is owned by role dbo, not by \w+, the owner of extension eo/,
	'... and saying why');
like($err, qr/HINT:  .*DELETE FROM public.eo_outboxes WHERE name = 'orders'/,
	'... and how to go on');
is($node->safe_psql('shop', q{SELECT extversion FROM pg_extension WHERE extname = 'eo'}),
	'0.1.0', '... the database stays at 0.1.0');
$node->safe_psql('shop', q{DELETE FROM public.eo_outboxes WHERE name = 'orders'});
($ret, $out, $err) = $node->psql('shop', q{ALTER EXTENSION eo UPDATE});
is($ret, 0, 'after the hint, the update goes through');
is($node->safe_psql('shop', q{SELECT name FROM eo_internal.eo_outboxes}),
	'kept', '... and keeps the other outbox');
like($err, qr/WARNING:  outbox "lost" is no longer registered: its table public.lost is gone/,
	'an outbox whose table was dropped is unregistered, with a warning naming it');
is($node->safe_psql('shop', q{SELECT count(*) FROM eo_internal.eo_outbox_slots WHERE outbox = 'lost'}),
	'0', '... and its group positions go with it');
is($node->safe_psql('shop', q{SELECT count(*) FROM public.orders}),
	'0', "... and leaves the owner's table alone");

my @types;
for (1 .. 20)
{
	my $page = $node->safe_psql('postgres', q{
CREATE TEMP TABLE p AS SELECT * FROM eo_relay_fetch('billing', 'g', 4);
SELECT string_agg(type, ',') FROM p;
SELECT eo_relay_ack('billing', 'g', t) FROM (SELECT max(lease_token) t FROM p) x WHERE t IS NOT NULL;});
	my ($list) = split /\n/, $page;
	last if !defined $list || $list eq '';
	push @types, split /,/, $list;
}
my %acked = map { $_ => 1 } split /,/, $acked;
is(join(',', sort @types), join(',', sort grep { !$acked{$_} } map { "E$_" } 1 .. 10),
	'the group gets every event it had not acknowledged, once');
$node->safe_psql('postgres', q{SELECT eo_emit('billing', 'order', 'o1', 'after', NULL)});
is($node->safe_psql('postgres', q{SELECT type FROM eo_relay_fetch('billing', 'g')}),
	'after', 'and new events after the update');
like($node->safe_psql('postgres', q{SELECT count(*) FROM eo_outbox_maintain()}),
	qr/^\d+$/, 'outbox maintenance runs after the update');

# NOTIFY: an outbox made by 0.1.0 (whose default was notify => true) keeps
# notifying its listeners; one made after the update does not, by default.
$node->safe_psql('postgres', q{SELECT eo_outbox_create('fresh')});
my $heard = $node->safe_psql('postgres', q{
LISTEN eo_billing;
LISTEN eo_fresh;
SELECT eo_emit('billing', 'order', 'o1', 'n1', NULL) IS NOT NULL;
SELECT eo_emit('fresh', 'order', 'o1', 'n2', NULL) IS NOT NULL;
SELECT 'done';
});
like($heard, qr/Asynchronous notification "eo_billing"/,
	'the outbox made by 0.1.0 still sends NOTIFY');
unlike($heard, qr/Asynchronous notification "eo_fresh"/,
	'an outbox made after the update does not, by default');

$node->stop;
done_testing();
