# Copyright: eo authors.  See README.
#
# eo_nats at the edge (issue 34), against a real nats-server: it trusts no
# database owner, and no mistake in its set-up loses a message.
# - a database owner's search_path (ALTER DATABASE ... SET) with a schema
#   of hers first: her evil.jsonb_typeof is not run by forward, her
#   evil.eo_claim not by apply (a second durable reading the stream
#   again applies nothing twice); eo in a schema of its own needs nothing;
# - apply with an unknown --scope, a role without EXECUTE on eo_claim, an
#   --sql the role may not run (42501 at run time) and one naming a table
#   that is not there: each exits 3 having terminated nothing, and once
#   the mistake is fixed every message is applied;
# - exit codes: 0, 1 with --once after a failure, 2 for a wrong command
#   line, 3 for a group that does not exist, a group of another role
#   (with the server's HINT passed on), a wrong NATS password (naming
#   $NATS_PASSWORD);
# - the log of an outage is one line per cause per 30 s, with a count;
# - stream and durable commands: stream-add again is idempotent, with
#   another window it says stream-update, which changes it; apply with
#   another --ack-wait updates its durable; stream-delete wants --yes;
# - an idle forward and apply stop within a second of SIGTERM.

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

my $node = EoTest::eo_node('edge', conf => "eo.naptime = 1", eo_in => []);
my $nats = EoNats->new;
my @nats = @{ $nats->nats };

# ---- roles, and a database owner who is not trusted -----------------------

$node->safe_psql('postgres', q{
CREATE ROLE owner LOGIN;
CREATE ROLE relay LOGIN;
CREATE ROLE consumer LOGIN;
CREATE ROLE stranger LOGIN;
CREATE DATABASE shop OWNER owner;
CREATE DATABASE inbox OWNER owner;
});

# shop: eo in public (owned by the database owner), an outbox, a group of relay's
$node->safe_psql('shop', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('orders', slots => 2) IS NOT NULL;
GRANT EXECUTE ON FUNCTION eo_relay_fetch(text, text, int, interval, int, boolean),
      eo_relay_ack(text, text, bigint), eo_relay_ack(text, text, bigint, bigint),
      eo_relay_ack_pages(text, text, bigint[]),
      eo_relay_wait(text, interval), eo_relay_wait(text, interval, text, interval) TO relay, stranger;
GRANT SELECT ON orders TO relay, stranger;
SELECT eo_group_create('orders', 'nats', owner => 'relay');
});

# inbox: eo in a schema of its own, the consumer's scope and table
$node->safe_psql('inbox', q{
CREATE SCHEMA eo;
CREATE EXTENSION eo SCHEMA eo;
GRANT USAGE ON SCHEMA eo TO consumer;
GRANT EXECUTE ON FUNCTION eo.eo_claim(text, text, interval, text),
      eo.eo_fail(text, text, bigint, interval, text, text, boolean) TO consumer;
SELECT eo.eo_scope_create(s, owner => 'consumer')
  FROM unnest('{orders-consumer,fix-scope,fix-grant,fix-table,fix-breaker,fix-poison,enc}'::text[]) s;
CREATE SCHEMA app AUTHORIZATION consumer;
});
$node->safe_psql('inbox', q{
SET ROLE consumer;
CREATE TABLE app.ledger (id uuid PRIMARY KEY, n int, applied int NOT NULL DEFAULT 1);
CREATE TABLE app.fixed (id uuid PRIMARY KEY);
CREATE TABLE app.texts (id uuid PRIMARY KEY, s text, third text);
});
$node->safe_psql('inbox', q{CREATE TABLE app.secret (id uuid PRIMARY KEY)});

# The owner's trojans: look-alikes of a built-in and of eo_claim that copy
# what they see into her table, and a search_path that puts them first.
for my $db ('shop', 'inbox')
{
	$node->safe_psql($db, q{
SET ROLE owner;
CREATE SCHEMA evil;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
CREATE TABLE evil.loot (who text, what text);
GRANT INSERT ON evil.loot TO PUBLIC;
CREATE FUNCTION evil.jsonb_typeof(jsonb) RETURNS text LANGUAGE sql AS
  $$ INSERT INTO evil.loot VALUES (current_user, $1::text) RETURNING pg_catalog.jsonb_typeof($1) $$;
CREATE FUNCTION evil.eo_claim(key text, scope text) RETURNS TABLE (status text) LANGUAGE sql AS
  $$ INSERT INTO evil.loot VALUES (current_user, key) RETURNING 'claimed'::text $$;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA evil TO PUBLIC;
});
	$node->safe_psql($db, "ALTER DATABASE $db SET search_path = evil, pg_catalog, public, eo");
}

my @shop  = ('--pg', $node->connstr('shop') . ' user=relay');
my @inbox = ('--pg', $node->connstr('inbox') . ' user=consumer');
my @forward = (@nats, @shop, 'forward', '--outbox', 'orders', '--group', 'nats', '--stream', 'ORDERS');

sub emit
{
	my ($n, $tag) = @_;
	$node->safe_psql('shop', qq{
SELECT count(eo_emit('orders', 'order', 'agg-' || (g % 5), '$tag', jsonb_build_object('n', g),
                     '{"trace": "t"}')) FROM generate_series(1, $n) g;});
}

sub backlog
{
	return $node->safe_psql('shop',
		q{SELECT coalesce(sum(backlog), 0) FROM eo_outbox_status WHERE outbox = 'orders'});
}

my ($rc, $out) = $nats->run('admin.log', 'stream-add', @nats, '--stream', 'ORDERS', '--subjects', 'orders.>');
is($rc, 0, 'stream ORDERS made');

# ---- the owner's search_path: forward ----------------------------------------

emit(20, 'first');
($rc) = $nats->run('fw-evil.log', @forward, '--once');
is($rc, 0, 'forward --once as relay, under the owner\'s search_path, exits 0');
is(backlog(), '0', '... having delivered every event');
is(scalar @{ $nats->dump('ORDERS') }, 20, '... each stored once');
is($node->safe_psql('shop', 'SELECT count(*) FROM evil.loot'), '0',
	'the owner\'s evil.jsonb_typeof was never run as relay (no payload copied)');
like($nats->log('fw-evil.log'), qr/warning: eo is in schema public, which role "pg_database_owner" owns/,
	'it warns that eo\'s schema belongs to the database owner');

# Beside eo's, in public (hers), an eo_relay_wait that takes text where
# eo's takes an interval: an untyped literal would have chosen hers.
$node->safe_psql('shop', q{
SET ROLE owner;
CREATE FUNCTION public.eo_relay_wait(outbox text, timeout text, consumer_group text, linger interval)
  RETURNS boolean LANGUAGE sql AS $$ INSERT INTO evil.loot VALUES (current_user, outbox) RETURNING true $$;
GRANT EXECUTE ON FUNCTION public.eo_relay_wait(text, text, text, interval) TO PUBLIC;
});
($rc) = $nats->run('fw-lookalike.log', @forward, '--once');
is($rc, 3, 'a function beside eo\'s under the name of one eo_nats calls: forward exits 3');
like($nats->log('fw-lookalike.log'), qr/function public.eo_relay_wait\(text,text,text,interval\) in eo's schema public is not eo's/,
	'... naming it');
$node->safe_psql('shop', 'DROP FUNCTION public.eo_relay_wait(text, text, text, interval)');

# ---- the owner's search_path: apply, eo in a schema of its own ------------------

my $ledger_sql = q{INSERT INTO app.ledger (id, n) VALUES ($1::uuid, ($3->>'n')::int)
 ON CONFLICT (id) DO UPDATE SET applied = ledger.applied + 1};
my @apply = (@nats, @inbox, 'apply', '--stream', 'ORDERS', '--scope', 'orders-consumer',
	'--ack-wait', '1000', '--once');

($rc) = $nats->run('apply1.log', @apply, '--durable', 'first', '--sql', $ledger_sql);
is($rc, 0, 'apply --once with eo in a schema of its own exits 0');
is($node->safe_psql('inbox', 'SELECT count(*) || \' \' || max(applied) FROM app.ledger'), '20 1',
	'... and applied each message once');
($rc) = $nats->run('apply2.log', @apply, '--durable', 'second', '--sql', $ledger_sql, '--verbose');
is($node->safe_psql('inbox', 'SELECT count(*) || \' \' || max(applied) FROM app.ledger'), '20 1',
	'a second durable reading the stream again applies nothing twice (evil.eo_claim not called)');
like($nats->log('apply2.log'), qr/stopping: 0 applied, 20 duplicates/, '... its summary counts the duplicates');
like($nats->log('apply2.log'), qr/debug: fetch: 0 applied, [1-9]\d* duplicates/, '--verbose logs each fetch');
is($node->safe_psql('inbox', 'SELECT count(*) FROM evil.loot'), '0',
	'the owner\'s look-alikes in inbox were never run as consumer');

# ---- set-up mistakes: apply stops, and loses nothing ------------------------------

# (the owner's trojans gone, so that only the mistakes are tested)
$node->safe_psql('inbox', q{ALTER DATABASE inbox RESET search_path; DROP SCHEMA evil CASCADE});

# Rows of app.fixed whose key is done in `scope`: applied through eo_claim.
sub fixed_count
{
	my ($scope) = @_;
	return $node->safe_psql('inbox', qq{SELECT count(*) FROM app.fixed f,
  eo.eo_status(f.id::text, '$scope') s WHERE s.state = 'done'});
}
my $fixed_sql = q{INSERT INTO app.fixed VALUES ($1::uuid) ON CONFLICT DO NOTHING};

# each mistake with a durable of its own, all 20 messages pending
my @mistakes = (
	[ 'unknown --scope', 'scope', [ '--scope', 'no-such-scope', '--sql', $fixed_sql ], qr/42704/ ],
	[ '--sql the role may not run', 'grant',
		[ '--scope', 'fix-grant', '--sql', q{INSERT INTO app.secret VALUES ($1::uuid)} ],
		qr/42501/ ],
	[ '--sql naming a table that is not there', 'table',
		[ '--sql', q{INSERT INTO app.nosuch VALUES ($1::uuid)} ], qr/42P01.*search_path/s ],
	[ 'a role without EXECUTE on eo_claim', 'execute', [ '--sql', $fixed_sql ],
		qr/may not call eo's eo_claim/, 'stranger' ],
);
for my $m (@mistakes)
{
	my ($what, $durable, $args, $says, $role) = @$m;
	my @pg = $role ? ('--pg', $node->connstr('inbox') . " user=$role") : ();
	($rc) = $nats->run("mistake-$durable.log", @apply, @pg, '--durable', $durable, @$args);
	is($rc, 3, "$what: apply exits 3");
	like($nats->log("mistake-$durable.log"), $says, '... saying why');
}
# --sql wrong for every message on their data (22012 here): not the messages' fault
($rc) = $nats->run('mistake-breaker.log', @apply, '--durable', 'breaker', '--scope', 'fix-breaker',
	'--sql', q{INSERT INTO app.fixed SELECT $1::uuid WHERE ($3->>'n')::int / 0 = 1});
is($rc, 1, '--sql failing on every message, none applied: apply --once ends with a failure');
like($nats->log('mistake-breaker.log'), qr/failed on 3 messages in a row.*22012.*looks wrong/,
	'... saying from the third on that --sql looks wrong');
like($nats->log('mistake-breaker.log'), qr/stopping: 0 applied, 0 duplicates, 20 failed/,
	'... and went on with the fetch instead of stopping (whoever publishes could stop it)');
is($node->safe_psql('inbox', q{SELECT count(*) FROM app.ledger l, eo.eo_status(l.id::text, 'fix-breaker') s}),
	'0', '... recording nothing against the messages');
# three messages in a row --sql cannot apply, then the rest (a publisher's poison): the
# first four runs of --sql fail (the fetch's batch, then its first three messages alone)
my $poison_sql = q{INSERT INTO app.poisoned SELECT $1::uuid
 WHERE 1 / (CASE WHEN pg_catalog.nextval('app.poison_runs') <= 4 THEN 0 ELSE 1 END) = 1};
$node->safe_psql('inbox', q{CREATE TABLE app.poisoned (id uuid PRIMARY KEY);
CREATE SEQUENCE app.poison_runs;
GRANT INSERT ON app.poisoned TO consumer; GRANT USAGE ON app.poison_runs TO consumer});
($rc) = $nats->run('poison.log', @apply, '--durable', 'poison', '--scope', 'fix-poison',
	'--sql', $poison_sql);
like($nats->log('poison.log'), qr/failed on 3 messages in a row.*22012/,
	'three poison messages in a row: --sql looks wrong');
is($node->safe_psql('inbox', 'SELECT count(*) FROM app.poisoned'), '17',
	'... and the 17 after them are applied in the same run: it did not stop');
my ($rc2, $info) = $nats->run('admin.log', 'consumer-info', @nats, '--stream', 'ORDERS', '--durable', 'grant');
like($info, qr/ack_floor_stream_seq: 0\n/,
	'nothing was acknowledged or terminated by the apply stopped at its first message');
$node->safe_psql('inbox', q{
GRANT INSERT ON app.secret TO consumer;
GRANT USAGE ON SCHEMA eo, app TO stranger;
GRANT EXECUTE ON FUNCTION eo.eo_claim(text, text, interval, text),
      eo.eo_fail(text, text, bigint, interval, text, text, boolean) TO stranger;
GRANT INSERT ON app.fixed TO stranger;
});
$node->safe_psql('inbox', q{SELECT eo.eo_scope_create('stranger-scope', owner => 'stranger')});
usleep(1_200_000);    # past AckWait, for what was delivered and not answered
($rc) = $nats->run('fixed-scope.log', @apply, '--durable', 'scope', '--sql', $fixed_sql,
	'--scope', 'fix-scope');
is($rc, 0, 'the scope fixed: apply exits 0');
is(fixed_count('fix-scope'), '20', '... and every message is applied: none was lost to the typo');
($rc) = $nats->run('fixed-grant.log', @apply, '--durable', 'grant', '--scope', 'fix-grant',
	'--sql', q{INSERT INTO app.secret VALUES ($1::uuid)});
is($node->safe_psql('inbox', 'SELECT count(*) FROM app.secret'), '20',
	'the grant given: every message is applied');
$node->safe_psql('inbox', 'TRUNCATE app.fixed');
($rc) = $nats->run('fixed-table.log', @apply, '--durable', 'table', '--scope', 'fix-table',
	'--sql', $fixed_sql);
is(fixed_count('fix-table'), '20', 'the table named right: every message is applied');
$node->safe_psql('inbox', 'TRUNCATE app.fixed');
usleep(5_200_000);    # past the retry_after of what was offered again
($rc) = $nats->run('fixed-breaker.log', @apply, '--durable', 'breaker', '--scope', 'fix-breaker',
	'--sql', $fixed_sql);
is(fixed_count('fix-breaker'), '20', '--sql fixed: every message is applied');
($rc) = $nats->run('poison-again.log', @apply, '--durable', 'poison', '--scope', 'fix-poison',
	'--sql', q{INSERT INTO app.poisoned SELECT $1::uuid ON CONFLICT DO NOTHING});
is($node->safe_psql('inbox', 'SELECT count(*) FROM app.poisoned'), '20',
	'... and the three poison messages were only offered again, none lost');
$node->safe_psql('inbox', 'TRUNCATE app.fixed');
($rc) = $nats->run('fixed-execute.log', @apply, '--pg', $node->connstr('inbox') . ' user=stranger',
	'--durable', 'execute', '--scope', 'stranger-scope', '--sql', $fixed_sql);
is(fixed_count('stranger-scope'), '20', 'EXECUTE granted: every message is applied');

# ---- exit codes -------------------------------------------------------------------

# a message whose --sql fails on its data, after one that --sql applies
$node->safe_psql('shop', q{SELECT eo_emit('orders', 'order', 'bad', 'good', '{"n": 1, "s": "café €"}');
SELECT eo_emit('orders', 'order', 'bad', 'bad', '{"n": "x"}')});
# (forwarded with the owner's client_encoding: it must not change the bytes)
$node->safe_psql('postgres', q{ALTER DATABASE shop SET client_encoding = 'WIN1252'});
($rc) = $nats->run('fw-bad.log', @forward, '--once');
is($rc, 0, 'forward --once with nothing failing: 0');
# one attempt per key here: the bad one's key goes dead at its first failure
$node->safe_psql('postgres', q{ALTER DATABASE inbox SET eo.max_attempts = 1});
($rc) = $nats->run('apply-bad.log', @apply, '--durable', 'first', '--sql', $ledger_sql);
is($rc, 1, 'apply --once after --sql failed on a message\'s data (22P02): 1');
like($nats->log('apply-bad.log'), qr/event [0-9a-f-]+ is dead .*eo_status\('[0-9a-f-]+', 'orders-consumer'\)\): kept/,
	'its key dead (eo.max_attempts 1): the line names the scope, and says the message is kept');
($rc, $out) = $nats->run('admin.log', 'stream-info', @nats, '--stream', 'ORDERS');
my ($last) = $out =~ /last_seq: (\d+)/;
($rc, $out) = $nats->run('admin.log', 'consumer-info', @nats, '--stream', 'ORDERS', '--durable', 'first');
like($out, qr/ack_floor_stream_seq: @{[ $last - 1 ]}\n/,
	'... not terminated: JetStream holds it for a fixed --sql and eo_redrive_dead');
$node->safe_psql('postgres', q{ALTER DATABASE inbox RESET eo.max_attempts});

# The owner's client_encoding (and an operator's PGCLIENTENCODING): eo_nats
# reads and writes UTF-8 all the same.
$node->safe_psql('postgres', q{ALTER DATABASE inbox SET client_encoding = 'LATIN1';
ALTER DATABASE inbox SET extra_float_digits = -15});
{
	local $ENV{PGCLIENTENCODING} = 'LATIN1';
	($rc) = $nats->run('apply-enc.log', @apply, '--durable', 'enc', '--scope', 'enc',
		'--sql', q{INSERT INTO app.texts SELECT $1::uuid, $3->>'s', (($3->>'n')::float8 / 3)::text
  WHERE $3 ? 's'});
}
$node->safe_psql('postgres', q{ALTER DATABASE inbox RESET client_encoding; ALTER DATABASE shop RESET client_encoding;
ALTER DATABASE inbox RESET extra_float_digits});
is($node->safe_psql('inbox', q{SELECT third FROM app.texts}), '0.3333333333333333',
	'nor does its extra_float_digits');
is($node->safe_psql('inbox', q{SELECT encode(convert_to(s, 'UTF8'), 'hex') FROM app.texts}), '636166c3a920e282ac',
	'a database\'s client_encoding does not change what is applied');

($rc) = $nats->run('nogroup.log', @nats, @shop, 'forward', '--outbox', 'orders', '--group', 'nope', '--once');
is($rc, 3, 'forward of a group that does not exist: 3');
like($nats->log('nogroup.log'), qr/42704/, '... saying why');
($rc) = $nats->run('stranger.log', @nats, '--pg', $node->connstr('shop') . ' user=stranger',
	'forward', '--outbox', 'orders', '--group', 'nats', '--once');
is($rc, 3, 'forward of another role\'s group: 3');
like($nats->log('stranger.log'), qr/42501.*HINT: /, '... with the server\'s HINT');

{
	local $ENV{NATS_PASSWORD} = 'wrong';
	my $t0 = time;
	($rc) = $nats->run('badpass.log', @forward);
	is($rc, 3, 'a wrong NATS password: 3, also without --once');
	like($nats->log('badpass.log'), qr/refused the credentials.*check --user and \$NATS_PASSWORD/,
		'... naming --user and $NATS_PASSWORD');
	cmp_ok(time - $t0, '<', 20, '... at once, not after retrying for ever');
}
{
	local $ENV{NATS_PASSWORD};
	delete $ENV{NATS_PASSWORD};
	($rc) = $nats->run('nopass.log', @forward, '--once');
	like($nats->log('nopass.log'), qr/--user "fwd" is given but \$NATS_PASSWORD is not set/,
		'--user without $NATS_PASSWORD: a warning');
}

($rc) = $nats->run('usage.log', 'bogus');
is($rc, 2, 'an unknown command: 2');
($rc) = $nats->run('usage.log', 'forward', '--bogus');
is($rc, 2, 'an unknown option: 2');
($rc) = $nats->run('usage.log', 'forward', '--outbox', 'o', '--group', 'g', '--durable', 'd');
is($rc, 2, 'an option the command does not take: 2');
like($nats->log('usage.log'), qr/--durable is not an option of forward/, '... saying so in a line');
is(scalar(() = $nats->log('usage.log') =~ /\n/g), 4, 'each wrong command line is one or two lines, no usage dump');
($rc, $out) = $nats->run('usage.log', '--version');
my $version = EoTest::default_version();
is($rc . ' ' . ($out =~ /^eo_nats \(eo\) \Q$version\E,/ ? 'v' : $out), '0 v', '--version: eo\'s version, 0');
($rc, $out) = $nats->run('usage.log', 'apply', '--help');
like($out, qr/--search-path LIST/, 'apply --help: apply\'s options');
unlike($out, qr/--outbox/, '... not forward\'s');
($rc, $out) = $nats->run('usage.log', 'help', 'forward');
like($out, qr/--linger-ms/, 'help forward: forward\'s options');

# ---- an outage's log: a line per cause per 30 s ------------------------------

my $pid = $nats->spawn('outage.log', {}, @forward, '--ack-wait', '300');
$nats->wait_log('outage.log', qr/connected to PostgreSQL/, 10) or die 'no forwarder';
$nats->stop;
emit(10, 'outage');
usleep(6_000_000);
EoNats::stop_all($pid);
my $outage = $nats->log('outage.log');
my $lines = () = $outage =~ /was not delivered/g;
cmp_ok($lines, '<=', 2, "NATS away for 6 s with 10 events: a line per cause ($lines)");
like($outage, qr/([1-9]\d+) more lines like "not delivered: [^"]*" were left out/,
	'... and how many like it were left out');
$nats->start;
($rc) = $nats->run('after-outage.log', @forward, '--once');
is(backlog(), '0', 'NATS back: every event delivered');

# ---- streams and durables ---------------------------------------------------------

($rc) = $nats->run('stream.log', 'stream-add', @nats, '--stream', 'ORDERS', '--subjects', 'orders.>');
is($rc, 0, 'stream-add of a stream that exists as asked: 0');
like($nats->log('stream.log'), qr/exists as asked: nothing changed/, '... nothing changed');
($rc) = $nats->run('stream.log', 'stream-add', @nats, '--stream', 'ORDERS', '--subjects', 'orders.>',
	'--duplicate-window', '600');
is($rc, 1, 'stream-add with another duplicate window: 1');
like($nats->log('stream.log'), qr/duplicate window of 120 s, not 600 s.*stream-update/,
	'... saying what differs and what changes it');
($rc) = $nats->run('stream.log', 'stream-update', @nats, '--stream', 'ORDERS', '--duplicate-window', '600');
($rc, $out) = $nats->run('stream.log', 'stream-info', @nats, '--stream', 'ORDERS');
like($out, qr/duplicate_window_seconds: 600\n/, 'stream-update changed the window');
like($out, qr/subject: orders\.>\n/, '... and kept the subjects');

($rc) = $nats->run('ackwait.log', @apply, '--durable', 'first', '--sql', $ledger_sql, '--ack-wait', '2500',
	'--batch', '7');
like($nats->log('ackwait.log'), qr/durable "first": ack wait 1000 ms and max ack pending 200 become 2500 ms and 14/,
	'apply with another --ack-wait and --batch updates its durable');
($rc, $out) = $nats->run('admin.log', 'consumer-info', @nats, '--stream', 'ORDERS', '--durable', 'first');
like($out, qr/ack_wait_ms: 2500\nmax_ack_pending: 14\n/, '... as consumer-info shows');
($rc) = $nats->run('admin.log', 'consumer-delete', @nats, '--stream', 'ORDERS', '--durable', 'second');
is($rc, 0, 'consumer-delete deletes a durable');

($rc) = $nats->run('delete.log', 'stream-delete', @nats, '--stream', 'ORDERS');
is($rc, 2, 'stream-delete without --yes: 2');
like($nats->log('delete.log'), qr/holds \d+ messages: --yes deletes it/, '... saying what it would delete');

# ---- SIGTERM ----------------------------------------------------------------------

for my $cmd ([ 'forward', @forward ], [ 'apply', @apply[0 .. $#apply - 1], '--durable', 'first', '--sql', $ledger_sql ])
{
	my ($name, @args) = @$cmd;
	my $p = $nats->spawn("term-$name.log", {}, @args);
	$nats->wait_log("term-$name.log", qr/forwarding|applying/, 10) or die "no $name";
	usleep(1_500_000);    # asleep in eo_relay_wait, or in a fetch
	my $t0 = time;
	EoNats::stop_all($p);
	cmp_ok(time - $t0, '<', 1.5, "an idle $name stops within a second of SIGTERM (" . sprintf('%.2f', time - $t0) . ' s)');
}

($rc) = $nats->run('delete.log', 'stream-delete', @nats, '--stream', 'ORDERS', '--yes');
is($rc, 0, 'stream-delete --yes: 0');
($rc) = $nats->run('delete.log', 'stream-info', @nats, '--stream', 'ORDERS');
is($rc, 1, '... and the stream is gone');

$nats->stop;
$node->stop;
done_testing();
