# Copyright: eo authors.  See README.
#
# eo_nats through a failover (issue 36).  A primary with a synchronous
# streaming standby (an acknowledged commit is on both), eo in two of its
# databases: shop (an outbox, a consumer group) and inbox (a table apply
# writes into, with no unique constraint, so an event applied twice is two
# rows).  `eo_nats forward` and `eo_nats apply` are given --pg naming both
# servers, the first as a key/value string, the second as a URI.
# - before the load: with the standby first and no target_session_attrs,
#   forward goes to the primary on its own (read-write is its default);
#   with target_session_attrs=any it warns at start, lands on the standby,
#   says so with the fix, and gives up with --once with exit 1, not 3; a
#   session that cannot write (default_transaction_read_only, 25006) is
#   said with the fix and replaced, exit 1 with --once, not 3, for forward
#   and for apply (whose check of its scope at start waits it out);
# - under load (a producer committing one event at a time, forward
#   publishing, apply applying), the primary is stopped immediately and
#   the standby promoted 1.5 s later.  Both programs find the new primary
#   by themselves and go on (still running, the log shows the loss, the
#   refusals of the read-only standby meanwhile, and the new connection to
#   the promoted server); a second producer then commits on it.
# Checked on the new primary: every event acknowledged to a producer is in
# the outbox and in the stream (by Nats-Msg-Id); every message in the
# stream is an event the new primary has (no ghost: synchronous); apply
# applied every event exactly once (one row per event id in a table
# without a unique constraint); the stream may hold an event twice (at
# least once), which is counted, not failed.

use strict;
use warnings;

use IPC::Run;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoNats;
use EoTest;
use Time::HiRes qw(time usleep);
use Time::Local qw(timegm);

EoNats::require_nats();

my $primary = EoTest::eo_node('primary', init => { allows_streaming => 1 },
	conf => "eo.naptime = 1\nsynchronous_commit = on", eo_in => []);
for my $db ('shop', 'inbox')
{
	$primary->safe_psql('postgres', "CREATE DATABASE $db");
	$primary->safe_psql($db, 'CREATE EXTENSION eo');
}
$primary->safe_psql('shop', q{
SELECT eo_outbox_create('billing', slots => 4) IS NOT NULL;
SELECT eo_group_create('billing', 'nats');
});
$primary->safe_psql('inbox', q{
CREATE TABLE effects (id uuid NOT NULL, n int NOT NULL);   -- no unique constraint: on purpose
SELECT eo_scope_create('billing-consumer');
});
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;
# Synchronous from here on (set after the backup: the promoted standby
# must not wait for a standby of its own).
$primary->safe_psql('postgres', q{ALTER SYSTEM SET synchronous_standby_names = 'standby'});
$primary->reload;
$primary->poll_query_until('postgres',
	q{SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'}, 'sync')
  or die 'the standby did not become synchronous';

my $nats = EoNats->new;
my $dir  = $nats->dir;
my @nats = @{ $nats->nats };
my ($rc) = $nats->run('admin.log', 'stream-add', @nats, '--stream', 'BILLING', '--subjects', 'billing.>',
	'--duplicate-window', '300');
is($rc, 0, 'stream BILLING made');

my ($p_host, $p_port, $s_host, $s_port) = ($primary->host, $primary->port, $standby->host, $standby->port);
my %acked;    # event ids whose commit a producer was told about

sub emit
{
	my ($node, $n, $tag) = @_;
	$acked{$_} = 1 for split /\n/, $node->safe_psql('shop', qq{
SELECT eo_emit('billing', 'order', 'agg-' || (g % 10), '$tag', jsonb_build_object('n', g))
FROM generate_series(1, $n) g});
}

my @forward = ('forward', '--outbox', 'billing', '--group', 'nats', '--stream', 'BILLING');

# ---- which host: the default and a wrong target_session_attrs ------------

emit($primary, 10, 'first');
($rc) = $nats->run('first.log', @nats, '--pg', "host=$s_host,$p_host port=$s_port,$p_port dbname=shop",
	@forward, '--once');
my $log = $nats->log('first.log');
is($rc, 0, 'the standby named first, no target_session_attrs: forward delivers and exits 0');
like($log, qr/connected to PostgreSQL database "shop" as "\w+" at "\Q$p_host\E", port $p_port/,
	'... connected to the primary (read-write is its default)');
unlike($log, qr/several hosts/, '... with no warning');

($rc) = $nats->run('any.log', @nats,
	'--pg', "host=$s_host,$p_host port=$s_port,$p_port dbname=shop target_session_attrs=any",
	@forward, '--once');
$log = $nats->log('any.log');
is($rc, 1, 'target_session_attrs=any, the standby first: forward gives up with --once, exit 1 (not 3)');
like($log, qr/--pg names several hosts .*target_session_attrs=any/,
	'... warning at start that the hosts come with target_session_attrs=any');
like($log, qr/"\Q$s_host\E", port $s_port is a standby\b.*target_session_attrs=read-write/,
	'... and saying it landed on a standby, with the fix');

# A session that cannot write (default_transaction_read_only, which libpq's
# read-write test is told to ignore): 25006 at the first fetch, said with
# the fix, and the session dropped for a new one at each retry.
($rc) = $nats->run('ro.log', @nats, '--pg', "host=$p_host port=$p_port dbname=shop"
	  . " target_session_attrs=any options='-c default_transaction_read_only=on'", @forward, '--once');
$log = $nats->log('ro.log');
is($rc, 1, 'a session that cannot write: forward gives up with --once, exit 1 (not 3)');
like($log, qr/port $p_port refused a write as read-only .*target_session_attrs=read-write/,
	'... saying so, with the fix');
cmp_ok(scalar(() = $log =~ /connected to PostgreSQL/g), '>', 1, '... and it tried new sessions');
# apply the same: its transactions begin READ COMMITTED, not READ WRITE, so
# that a server fenced this way refuses its claims too
($rc) = $nats->run('ro-apply.log', @nats, '--pg', "host=$p_host port=$p_port dbname=inbox"
	  . " target_session_attrs=any options='-c default_transaction_read_only=on'", 'apply',
	'--stream', 'BILLING', '--durable', 'fenced', '--scope', 'billing-consumer', '--once',
	'--sql', q{INSERT INTO public.effects (id, n) SELECT $1::uuid, ($3->>'n')::int});
is($rc, 1, 'apply in a session that cannot write: gives up with --once, exit 1');
like($nats->log('ro-apply.log'), qr/refused a write as read-only/, '... saying so');
is($primary->safe_psql('inbox', 'SELECT count(*) FROM public.effects'), '0', '... having applied nothing');

# ---- under load: the primary stops, the standby is promoted ---------------

(my $enc_p = $p_host) =~ s{([^A-Za-z0-9._~-])}{sprintf('%%%02X', ord $1)}ge;
(my $enc_s = $s_host) =~ s{([^A-Za-z0-9._~-])}{sprintf('%%%02X', ord $1)}ge;
my $pg_forward = "host=$p_host,$s_host port=$p_port,$s_port dbname=shop target_session_attrs=read-write";
my $pg_apply   = "postgresql://$enc_p:$p_port,$enc_s:$s_port/inbox?target_session_attrs=read-write";

my $fw = $nats->spawn('forward.log', {}, @nats, '--pg', $pg_forward, @forward, '--lease', '5');
my $ap = $nats->spawn('apply.log', {}, @nats, '--pg', $pg_apply, 'apply', '--stream', 'BILLING',
	'--durable', 'inbox', '--scope', 'billing-consumer', '--ack-wait', '2000', '--sql',
	q{INSERT INTO public.effects (id, n) SELECT $1::uuid, ($3->>'n')::int FROM pg_catalog.pg_sleep(0.005)});
ok($nats->wait_log("$_.log", qr/connected to PostgreSQL/, 30), "$_ is connected") for 'forward', 'apply';

# A producer committing one event per statement: psql prints an id only
# once its commit came back, that is once the standby has it.  (apply's
# --sql sleeps 5 ms a message, longer than the producer takes for one, so
# that apply, behind, is inside a batch's transaction when the stop comes.)
sub producer
{
	my ($node, $name, $n) = @_;
	my $script = "$dir/$name.sql";
	open my $fh, '>', $script or die;
	printf $fh "SELECT eo_emit('billing', 'order', 'agg-%d', 'Load', '{\"n\": %d}') FROM pg_sleep(0.001);\n",
	  $_ % 10, $_
	  for 1 .. $n;
	close $fh;
	return IPC::Run::start([ 'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('shop'),
		'-f', $script ], '<', \undef, '>', "$dir/$name.ids", '2>', "$dir/$name.err");
}

sub ids_of
{
	my ($name) = @_;
	return grep { /^[0-9a-f-]{36}$/ } split /\n/, slurp_file("$dir/$name.ids");
}

my $load = producer($primary, 'load', 50000);
# under way on every side: events committed, forwarded and applied
ok( $primary->poll_query_until('inbox', q{SELECT count(*) >= 200 FROM effects}),
	'under load: events are emitted, forwarded and applied');
$primary->stop('immediate');
my $stopped_at = time;
$load->finish;    # its connection is gone: psql stops
my @load = ids_of('load');
$acked{$_} = 1 for @load;
cmp_ok(scalar(@load), '>', 200, scalar(@load) . ' events acknowledged to the producer before the stop');
usleep(1_500_000);    # neither server takes writes meanwhile
$standby->promote;
my $promoted_at = time;
my $new = $standby;

my $after = producer($new, 'after', 300);
$after->finish;
my @after = ids_of('after');
$acked{$_} = 1 for @after;
is(scalar(@after), 300, 'a producer commits 300 more events on the new primary');

# ---- both go on, on their own ---------------------------------------------

sub caught_up
{
	my ($secs) = @_;
	my $until = time + $secs;
	while (time < $until)
	{
		return 1 if $new->safe_psql('shop',
			q{SELECT coalesce(sum(backlog), 0) FROM eo_outbox_status WHERE outbox = 'billing'}) eq '0'
		  && $new->safe_psql('inbox', q{SELECT count(DISTINCT id) FROM effects})
		  eq $new->safe_psql('shop', q{SELECT count(*) FROM billing});
		usleep(250_000);
	}
	return 0;
}
ok(caught_up(90), 'forward and apply catch up on the new primary');
is(waitpid($_->[1], WNOHANG), 0, "$_->[0] is still running") for [ 'forward', $fw ], [ 'apply', $ap ];

# When the log says it connected again, in seconds after the promotion.
sub reconnected_after
{
	my ($name) = @_;
	my ($when) = $nats->log("$name.log") =~
	  /.*^(\S+)Z eo_nats info: connected to PostgreSQL database "\w+" as "\w+" at "\Q$s_host\E", port $s_port/ms;
	return undef unless $when;
	my ($y, $mo, $d, $h, $mi, $s) = $when =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):([\d.]+)$/;
	return timegm(0, $mi, $h, $d, $mo - 1, $y) + $s - $promoted_at;
}
for my $name ('forward', 'apply')
{
	my $text = $nats->log("$name.log");
	like($text, qr/lost the connection to PostgreSQL|failed: .*(closed the connection|terminating)/,
		"$name: the log shows the connection lost");
	like($text, qr/cannot connect to PostgreSQL: .*$s_port\W* failed: (session is read-only|server is in hot standby mode).*; trying again/,
		"$name: ... the read-only standby refused while it was not promoted, and it tried again");
	my $took = reconnected_after($name);
	ok(defined $took, sprintf("$name: ... and connected to the promoted server %.1f s after the promotion"
			. ' (%.1f s after the stop)', $took // -1, ($took // -1) + $promoted_at - $stopped_at));
	unlike($text, qr/stopping/, "$name: ... without stopping");
	my ($hit) = $text =~ /immediate shutdown command.*\n.*eo_nats error: (.*?) failed/;
	# (apply's batch fails quietly, and its messages are then tried one by one)
	note("$name: the first statement logged as failed at the stop: " . ($hit // 'none'));
}

# ---- nothing lost, nothing applied twice ----------------------------------

my %in_outbox = map { $_ => 1 } split /\n/, $new->safe_psql('shop', q{SELECT id FROM billing});
my @lost = grep { !$in_outbox{$_} } keys %acked;
is(scalar(@lost), 0, scalar(keys %acked) . ' events acknowledged to producers: all in the new primary\'s outbox')
  or diag("missing: @lost[0 .. ($#lost < 4 ? $#lost : 4)]");
my %in_stream;
$in_stream{ EoNats::field($_, 'Nats-Msg-Id') }++ for @{ $nats->dump('BILLING') };
@lost = grep { !$in_stream{$_} } keys %acked;
is(scalar(@lost), 0, '... all in the stream')
  or diag("missing: @lost[0 .. ($#lost < 4 ? $#lost : 4)]");
my @ghosts = grep { !$in_outbox{$_} } keys %in_stream;
is(scalar(@ghosts), 0, 'every message in the stream is an event the new primary has (no ghost)');
my $twice = grep { $in_stream{$_} > 1 } keys %in_stream;
note("the stream holds $twice events more than once (at least once allows it)");

my %applied;
$applied{$_}++ for split /\n/, $new->safe_psql('inbox', q{SELECT id FROM effects});
my @again = grep { $applied{$_} > 1 } keys %applied;
is(scalar(@again), 0, scalar(keys %applied) . ' events applied, none twice')
  or diag('applied twice: ' . join(' ', map { "$_ x$applied{$_}" } @again[0 .. ($#again < 4 ? $#again : 4)]));
my @unapplied = grep { !$applied{$_} } keys %in_stream;
is(scalar(@unapplied), 0, 'every event in the stream was applied');
is($new->safe_psql('inbox', q{SELECT count(*) FROM effects e
  WHERE NOT EXISTS (SELECT FROM eo_status(e.id::text, 'billing-consumer') s WHERE s.state = 'done')}),
	'0', '... each under a done key in apply\'s scope');

EoNats::stop_all($fw, $ap);
like($nats->log('forward.log'), qr/stopping: [1-9]\d* events delivered/, 'forward stops when asked');
like($nats->log('apply.log'), qr/stopping: [1-9]\d* applied/, 'apply stops when asked');
$nats->stop;
$new->stop;
done_testing();
