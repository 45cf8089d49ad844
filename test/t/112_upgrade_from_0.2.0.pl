# Copyright: eo authors.  See README.
#
# ALTER EXTENSION eo UPDATE from the released 0.2.0 (built from its commit:
# tools/test.sh puts every release's source under EO_RELEASED) to this
# tree's default version, on every supported PostgreSQL:
# - keys, results, an outbox with a group mid-page and a scope made by
#   0.2.0 are all there afterwards and keep working: a done key is a
#   duplicate with its result, the outstanding page is acknowledged by the
#   token 0.2.0 issued, the group's next fetch gets the rest;
# - the new SQL (eo_relay_wait with a group) is there;
# - the updated database has the same eo objects as a fresh CREATE
#   EXTENSION: every function signature and every column of eo's tables.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;

my $src = defined $ENV{EO_RELEASED} ? "$ENV{EO_RELEASED}/eo-0.2.0" : undef;
plan skip_all => 'the source of 0.2.0 (EO_RELEASED, set by tools/test.sh) is not at hand'
  unless defined $src && -d $src;
my $default = EoTest::default_version();
plan skip_all => "eo.control installs 0.2.0 itself: nothing to update to" if $default eq '0.2.0';

my $inst = EoTest::private_install();
EoTest::install_eo($inst, $src, 'eo-0.2.0');
my $node = EoTest::node($inst, 'upgrade_020');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'eo'\neo.naptime = 3600\n");
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION eo VERSION '0.2.0';
SELECT eo_scope_create('s');
BEGIN;
SELECT status FROM eo_claim('done', 'fp');
SELECT eo_complete('done', '{"charge": "ch_1"}');
COMMIT;
SELECT status FROM eo_claim('k', scope => 's');
SELECT eo_outbox_create('ob', slots => 2);
SELECT eo_group_create('ob', 'g');
SELECT count(eo_emit('ob', 'order', 'o' || i, 'E', jsonb_build_object('i', i))) FROM generate_series(1, 10) i;
SET eo.max_attempts = 1;
SELECT eo_fail('dead', 'upstream down');
SELECT status FROM eo_claim('leased', lease => '1 hour');
});
my $token = $node->safe_psql('postgres',
	q{SELECT max(lease_token) FROM eo_relay_fetch('ob', 'g', 3, '1 hour')});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'eo'}),
	'0.2.0', '0.2.0 is installed, with a page outstanding');

# The new library and scripts, then the update.
EoTest::install_eo($inst, '.', 'eo-new');
$node->restart;

# Between the restart and ALTER EXTENSION UPDATE, the new library serves
# 0.2.0's SQL and tables (a generation without the 0.3.0 columns).
is( $node->safe_psql(
		'postgres', q{
SELECT status FROM eo_claim('between', lease => '1 hour');
SELECT status, result FROM eo_claim('done', 'fp');
SELECT count(*) FROM eo_claim('between2');
SELECT claimed > 0 FROM eo_metrics.claims}),
	"claimed\nduplicate|{\"charge\": \"ch_1\"}\n1\nt",
	'before the update, the new library claims with 0.2.0\'s tables and functions');

# The update never makes claims wait for another role: a pg_monitor member
# holding eo_metrics.claims open in a transaction makes the update wait
# (it replaces the view), and meanwhile a new session's claim goes through
# (issue 35: the update used to alter eo_claim_result first, and every new
# claim waited for the type behind the update).
$node->safe_psql('postgres', q{
CREATE DATABASE stall;
CREATE ROLE mon LOGIN IN ROLE pg_monitor;});
$node->safe_psql('stall', q{CREATE EXTENSION eo VERSION '0.2.0'});
{
	my ($rin, $rout) = ("BEGIN;\nSELECT count(*) FROM eo_metrics.claims;\n\\echo __ready__\n", '');
	my $reader = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('stall') . ' user=mon' ],
		'<', \$rin, '>', \$rout, '2>', \$rout);
	$reader->pump until $rout =~ /__ready__/;
	my ($uin, $uout) = ("ALTER EXTENSION eo UPDATE;\n", '');
	my $update = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('stall') ],
		'<', \$uin, '>', \$uout, '2>', \$uout);
	$update->pump_nb while length $uin;    # IPC::Run writes input only when pumped
	$node->poll_query_until('stall', q{
SELECT count(*) > 0 FROM pg_stat_activity
WHERE query LIKE 'ALTER EXTENSION eo UPDATE%' AND wait_event_type = 'Lock'})
	  or die 'the update does not wait for the reader';
	my ($ret, $out, $err) = $node->psql('stall',
		q{SET statement_timeout = '10s'; SELECT status FROM eo_claim('during-update')});
	is($out, 'claimed', 'a claim goes through while the update waits for a monitor\'s open transaction')
	  or diag($err);
	$rin .= "COMMIT;\n\\q\n";
	$reader->finish;
	$update->finish;
	is($node->safe_psql('stall', q{SELECT extversion FROM pg_extension WHERE extname = 'eo'}),
		$default, 'the update finished once the monitor\'s transaction ended')
	  or diag($uout);
}

# Nor for long for a role that holds what the update must alter: a
# transaction left open after a claim (a key table) or a temporary table
# made OF eo_claim_result (0.2.0 let PUBLIC use the type).  The update
# gives up after about 2 s (55P03, nothing changed) unless the session
# chose its own lock_timeout (the database's, which its owner sets, is
# bounded too), and claims go on; once the holder is gone it succeeds,
# and the session's lock_timeout is as it was.
$node->safe_psql('postgres', q{
CREATE DATABASE stall2;
CREATE ROLE holder LOGIN;});
$node->safe_psql('stall2', q{CREATE EXTENSION eo VERSION '0.2.0';
GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text) TO holder;
ALTER DATABASE stall2 SET lock_timeout = '1h';});
for my $hold (q{BEGIN; SELECT count(*) FROM eo_claim('held-open');},
	q{BEGIN; CREATE TEMP TABLE t OF eo_claim_result;})
{
	my ($hin, $hout) = ("$hold\n\\echo __ready__\n", '');
	my $holder = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('stall2') . ' user=holder' ],
		'<', \$hin, '>', \$hout, '2>', \$hout);
	$holder->pump until $hout =~ /__ready__/;
	my $t0 = time;
	# (statement_timeout: without the script's bound it would wait for good)
	my ($ret, $out, $err) = $node->psql('stall2', q{SET statement_timeout = '20s'; ALTER EXTENSION eo UPDATE});
	like($err, qr/canceling statement due to lock timeout/,
		"the update gives up on a holder ($hold)");
	ok(time - $t0 < 30, 'within its lock_timeout');
	is($node->safe_psql('stall2', q{SELECT extversion FROM pg_extension WHERE extname = 'eo'}),
		'0.2.0', 'nothing was changed');
	is($node->safe_psql('stall2', q{SET statement_timeout = '10s'; SELECT status FROM eo_claim('after-' || md5(random()::text))}),
		'claimed', 'claims go on');
	$hin .= "ROLLBACK;\n\\q\n";
	$holder->finish;
}
is( $node->safe_psql(
		'stall2', q{BEGIN; ALTER EXTENSION eo UPDATE; SHOW lock_timeout; COMMIT;
SELECT extversion FROM pg_extension WHERE extname = 'eo'}),
	"1h\n$default", 'with the holders gone the update succeeds, and lock_timeout is as it was');

# A dump of the 0.2.0 database, taken now, is restored after the update
# into a database whose CREATE EXTENSION installs the new version: its key
# generations keep 0.2.0's shape.
my $dump = $node->basedir . '/eo020.sql';
$node->command_ok([ 'pg_dump', '-Fp', '-f', $dump, '-d', $node->connstr('postgres') ],
	'pg_dump of the 0.2.0 database');
# The update, in a session that claimed before it: its next claim returns
# the wider row (the row type it had cached changed under it).
my ($ret, $out, $err) = $node->psql(
	'postgres', q{
SELECT count(*) FROM eo_claim('same-session-before');
ALTER EXTENSION eo UPDATE;
SELECT recovery_point IS NULL, recovery_state IS NULL FROM eo_claim('same-session-after');});
is($ret, 0, 'ALTER EXTENSION eo UPDATE succeeds') or diag($err);
is($out, "1\nt|t", 'a session that claimed before the update gets the 0.3.0 row after it');
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'eo'}),
	$default, "updated to $default");

is($node->safe_psql('postgres', q{SELECT status, result FROM eo_claim('done', 'fp')}),
	'duplicate|{"charge": "ch_1"}', 'a done key of 0.2.0 is a duplicate with its result');
is($node->safe_psql('postgres', q{SELECT state FROM eo_status('k', scope => 's')}),
	'done', 'a key claimed in a scope of 0.2.0 is done');
is($node->safe_psql('postgres', "SELECT eo_relay_ack('ob', 'g', $token)"),
	'3', 'the page 0.2.0 handed out is acknowledged with its token');
is( $node->safe_psql(
		'postgres', q{
CREATE TABLE rest AS SELECT * FROM eo_relay_fetch('ob', 'g', 100, '1 minute', 2, false);
SELECT count(*), sum(eo_relay_ack('ob', 'g', t)) FROM (SELECT DISTINCT lease_token t FROM rest) x;
SELECT count(*) FROM rest;}),
	"2|7\n7", 'the rest comes in the next fetch, one token per slot');
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM eo_relay_fetch('ob', 'g');
SELECT eo_relay_wait('ob', '0', 'g', '0')}),
	"0\nf", "${default}'s eo_relay_wait with a group is there");

# 0.3.0 on the keys 0.2.0 made: the dead key is redriven and claimed, a
# recovery point is recorded on a lease 0.2.0 issued and handed to the
# next holder.
is( $node->safe_psql(
		'postgres', q{
SELECT eo_redrive('dead');
SELECT status, attempts FROM eo_claim('dead', lease => '1 hour');
SELECT keys_redriven FROM eo_metrics.claims}),
	"t\nclaimed|2\n1", 'a key that went dead under 0.2.0 is redriven and claimed');
is( $node->safe_psql(
		'postgres', q{
SELECT eo_recovery_point('leased', (SELECT lease_token FROM eo_status('leased')), 'step1', '{"n": 1}');
SELECT eo_fail('leased', 'crashed', (SELECT lease_token FROM eo_status('leased')));
SELECT status, recovery_point, recovery_state FROM eo_claim('leased', lease => '1 hour')}),
	"\nretry\nclaimed|step1|{\"n\": 1}",
	'a lease of 0.2.0 records a recovery point; the next claim gets it');

# The dump of 0.2.0, restored under the new version: its keys work, a new
# key too, and what needs the 0.3.0 columns is refused with 55000 for the
# keys of the restored (0.2.0-shaped) generation.
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', $dump, '-d', $node->connstr('restored') ],
	'the 0.2.0 dump restores into the new version');
is( $node->safe_psql(
		'restored', q{
SELECT extversion FROM pg_extension WHERE extname = 'eo';
SELECT status, result FROM eo_claim('done', 'fp');
SELECT status FROM eo_claim('new-after-restore');
SELECT count(*) > 0 FROM eo_keys() WHERE key = 'done';
SELECT state FROM eo_status('dead')}),
	"$default\nduplicate|{\"charge\": \"ch_1\"}\nclaimed\nt\ndead",
	'restored from 0.2.0: old keys, new keys and eo_keys() work');
my ($rc, $rout, $rerr) = $node->psql('restored', q{SELECT eo_redrive('dead')});
like($rerr, qr/made by eo 0\.2\.0/, 'a redrive in a 0.2.0-shaped generation is refused, saying why');

# The same objects as a fresh install.
my $objects = q{
SELECT string_agg(x, E'\n' ORDER BY x) FROM (
  SELECT p.oid::regprocedure::text || ' -> ' || pg_get_function_result(p.oid) AS x
  FROM pg_depend d JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
  WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
    AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'eo')
  UNION ALL
  SELECT c.oid::regclass::text || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
  FROM pg_depend d JOIN pg_class c ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
    AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'eo')) o};
my $updated = $node->safe_psql('postgres', $objects);
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION eo');
is($node->safe_psql('fresh', $objects), $updated,
	'the updated database has the functions and table columns of a fresh install');

$node->stop;
done_testing();
