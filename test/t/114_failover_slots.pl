# Copyright: eo authors.  See README.
#
# A WAL-mode outbox read through a logical slot (as Debezium reads it)
# across a promotion, with PostgreSQL 17's failover slots.  The primary
# has wal_level = logical, a physical slot for its standby and
# synchronized_standby_slots naming it; the consumer's slot is made with
# failover => true.  The standby streams through that physical slot with
# sync_replication_slots = on, hot_standby_feedback = on and a dbname in
# primary_conninfo, so its slot-sync worker keeps a copy of the slot.
#
# Before the first event the consumer, having nothing to read, confirms
# the end of the slot until the standby's copy is usable (synced, not
# temporary: the standby keeps it temporary until the primary's slot has
# passed a standby snapshot logged after the copy was made).
# Events are emitted in transactions of two; the consumer reads the slot
# on the primary (peek, then pg_replication_slot_advance to the commit of
# the last transaction it keeps, as a consumer confirms) and remembers
# what it confirmed.  A second slot without failover (the "local" slot)
# reads everything the primary committed, as a witness with each
# transaction's commit LSN.
# - While the standby is down, the primary hands the consumer nothing
#   the standby lacks: the SQL functions wait (here until their statement
#   timeout), pg_recvlogical (a walsender, Debezium's path) gets nothing
#   past the standby's position, though the local slot shows the
#   transactions committed.
# - Once the standby's synced slot has the consumer's confirmed position,
#   the standby's WAL receiver is cut, one more transaction commits on the
#   primary only (it is not handed out either), the primary is stopped
#   immediately and the standby promoted.
# - On the new primary the slot is there (the local one is not), and
#   reading it gives exactly the transactions the consumer had not
#   confirmed and the standby had: together with what was consumed before,
#   every event once, in commit order; nothing the consumer confirmed comes
#   again, none of a rolled-back transaction, and the transaction the
#   standby never had was never handed out (no ghost event).  The slot goes
#   on with new events.
# Before PostgreSQL 17 logical slots are not kept on standbys: skipped
# (docs/operations.md, "Failover", says what to do there).

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(time usleep);

plan skip_all => 'failover slots (sync_replication_slots, synchronized_standby_slots) '
  . 'came in PostgreSQL 17; before it no logical slot survives a promotion'
  if EoTest::pg_major() < 17;

# An LSN as a number, to compare.
sub lsn
{
	my ($hi, $lo) = split m{/}, shift;
	return hex($hi) * 2**32 + hex($lo);
}

my $primary = EoTest::eo_node('primary', init => {allows_streaming => 'logical'});
$primary->safe_psql('postgres', q{
SELECT eo_outbox_create('walbox', mode => 'wal');
SELECT pg_create_physical_replication_slot('sb1', true);
});
$primary->backup('backup');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
my $primary_conninfo = sprintf 'host=%s port=%d dbname=postgres application_name=standby',
  $primary->host, $primary->port;
$standby->append_conf('postgresql.conf', qq{
primary_slot_name = 'sb1'
primary_conninfo = '$primary_conninfo'
hot_standby_feedback = on
sync_replication_slots = on
});
$standby->start;
$primary->safe_psql('postgres', q{ALTER SYSTEM SET synchronized_standby_slots = 'sb1'});
$primary->reload;
$primary->wait_for_replay_catchup($standby);

$primary->safe_psql('postgres', q{
SELECT pg_create_logical_replication_slot('eo_cdc', 'test_decoding', failover => true);
SELECT pg_create_logical_replication_slot('eo_local', 'test_decoding');
});
is( $primary->safe_psql('postgres',
		q{SELECT string_agg(slot_name || ':' || failover, ' ' ORDER BY slot_name) FROM pg_replication_slots
		  WHERE slot_type = 'logical'}),
	'eo_cdc:true eo_local:false', 'the consumer slot is a failover slot, the local one is not');

# ---- events, and reading them ----

my (%id_of, @txns);    # event n -> eo_emit's id; committed transactions [n...]
my $next_n = 1;
# One transaction of two events on $node; commits unless $rollback.
sub emit_txn
{
	my ($node, $rollback) = @_;
	my @n = ($next_n, $next_n + 1);
	$next_n += 2;
	my $ids = $node->safe_psql('postgres',
		"BEGIN;\n"
		  . join('', map { "SELECT eo_emit('walbox', 'order', 'o$_', 'Created', '{\"n\": $_}');\n" } @n)
		  . ($rollback ? "ROLLBACK;" : "COMMIT;"));
	return if $rollback;
	@id_of{@n} = split /\n/, $ids;
	push @txns, [@n];
	return;
}

# The transactions with eo:walbox messages among test_decoding's rows
# ("lsn|data" lines): [commit LSN, [n...], [id...]] each, in commit order.
sub parse_txns
{
	my ($rows) = @_;
	my (@out, $cur);
	for my $row (split /\n/, $rows)
	{
		my ($lsn, $data) = split /\|/, $row, 2;
		if ($data =~ /^BEGIN/)
		{
			$cur = [ undef, [], [] ];
		}
		elsif ($data =~ /^message: transactional: 1 prefix: eo:walbox, sz: \d+ content:(.*)$/)
		{
			my $content = $1;
			my ($id) = $content =~ /"id":"([^"]+)"/;
			my ($n)  = $content =~ /"payload":\{"n": (\d+)\}/;
			push @{ $cur->[1] }, $n;
			push @{ $cur->[2] }, $id;
		}
		elsif ($data =~ /^COMMIT/)
		{
			$cur->[0] = $lsn;
			push @out, $cur if @{ $cur->[1] };
			undef $cur;
		}
	}
	return @out;
}

sub read_slot
{
	my ($node, $fn, $slot) = @_;
	return parse_txns($node->safe_psql('postgres',
		"SELECT lsn, data FROM pg_logical_slot_${fn}_changes('$slot', NULL, NULL)"));
}

sub events_of { return map { @{ $_->[1] } } @_; }

# The commit LSN of every committed transaction, from the local slot.
my %commit_lsn;
sub witness
{
	my @t = read_slot($primary, 'peek', 'eo_local');
	$commit_lsn{ $_->[1][0] } = $_->[0] for @t;
	return @t;
}

# What the consumer has confirmed (the events it has, in the order it got
# them), and every event it was ever handed, confirmed or not.
my (@consumed, %received);
my $confirmed = '0/0';
# The consumer reads the slot on the primary and confirms its first $keep transactions.
sub consume
{
	my ($keep) = @_;
	my @got = read_slot($primary, 'peek', 'eo_cdc');
	$received{$_} = 1 for events_of(@got);
	return @got unless $keep > 0;
	push @consumed, events_of(@got[ 0 .. $keep - 1 ]);
	$confirmed = $got[ $keep - 1 ][0];
	$primary->safe_psql('postgres', "SELECT pg_replication_slot_advance('eo_cdc', '$confirmed')");
	return @got;
}

# Until the standby's copy of eo_cdc is a persistent synced slot at the
# primary's confirmed position (the slot-sync worker naps up to 30 s when
# nothing changes).  With $idle, the consumer has nothing to read yet and
# confirms the end of the slot meanwhile, as a streaming consumer does:
# the standby keeps its copy temporary until the primary's slot has passed
# a point where the standby is sure to have the catalog rows it needs (a
# standby snapshot logged after the copy was made).
sub wait_synced
{
	my ($idle) = @_;
	my $deadline = time + 120;
	while (time < $deadline)
	{
		if ($idle)
		{
			$primary->safe_psql('postgres', 'SELECT pg_log_standby_snapshot()');
			my @got = read_slot($primary, 'get', 'eo_cdc');
			die 'events before the first emit?' if @got;
		}
		my $want = $primary->safe_psql('postgres',
			q{SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'eo_cdc'});
		return 1
		  if $standby->safe_psql('postgres', qq{
SELECT count(*) FROM pg_replication_slots
WHERE slot_name = 'eo_cdc' AND synced AND NOT temporary AND confirmed_flush_lsn = '$want'}) eq '1';
		usleep(500_000);
	}
	diag('the standby has: ' . $standby->safe_psql('postgres',
		q{SELECT slot_name, synced, temporary, confirmed_flush_lsn FROM pg_replication_slots}) . '; the primary: '
		  . $primary->safe_psql('postgres', q{SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'eo_cdc'}));
	return 0;
}

# ---- a consumer on the primary, the standby following ----

ok(wait_synced('idle'), 'the standby has a synced copy of the slot');
emit_txn($primary) for 1 .. 6;
my @got = consume(3);
is(join(' ', events_of(@got)), join(' ', 1 .. 12),
	'the consumer reads the six transactions in order');
is(join(' ', map { @{ $_->[2] } } @got), join(' ', map { $id_of{$_} } 1 .. 12),
	'... each message with the id eo_emit returned');
ok(wait_synced(), "the standby's copy follows the consumer's confirmed position");

# ---- the standby down: events it lacks are not handed out ----

$standby->stop('fast');
my $standby_has = $primary->safe_psql('postgres',
	q{SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'sb1'});
emit_txn($primary) for 7 .. 9;
witness();
my @beyond = grep { lsn($commit_lsn{ $_->[0] }) > lsn($standby_has) } @txns;
is(join(' ', map { $_->[0] } @beyond), '13 15 17',
	"the primary committed three transactions past the standby's position $standby_has");

my ($ret, $out, $err) = $primary->psql('postgres',
	q{SET statement_timeout = '3s'; SELECT lsn, data FROM pg_logical_slot_peek_changes('eo_cdc', NULL, NULL)});
$received{$_} = 1 for events_of(parse_txns($out));
is($out, '', 'the SQL interface hands out nothing while the standby is down ...');
like($err, qr/canceling statement due to statement timeout/, '... it waits (here until its timeout)');
like($err, qr/"sb1".*synchronized_standby_slots/s, '... and says for which standby slot');

# A walsender (pg_recvlogical, as Debezium connects): nothing past the standby.
my $recv_file = $primary->basedir . '/recvlogical.out';
my ($recv_out, $recv_err) = ('', '');
my $recv = IPC::Run::start(
	[ 'pg_recvlogical', '-d', $primary->connstr('postgres'), '-S', 'eo_cdc', '--start',
		'--no-loop', '-f', $recv_file, '-F', '1', '-s', '1' ],
	'>', \$recv_out, '2>', \$recv_err);
sleep 3;
$recv->signal('INT');
$recv->finish;
my @streamed = -e $recv_file ? parse_txns(join "\n",
	map { "x|$_" } split /\n/, slurp_file($recv_file)) : ();
$received{$_} = 1 for events_of(@streamed);
my @early = grep { my $n = $_; grep { $n == $_->[0] } @beyond } map { $_->[1][0] } @streamed;
is(scalar(@early), 0,
	sprintf('the walsender hands out nothing the standby lacks (%d transactions streamed)',
		scalar(@streamed)))
  or diag("streamed: @early; $recv_err");
# What the walsender confirmed counts as consumed.
my $after_recv = $primary->safe_psql('postgres',
	q{SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'eo_cdc'});
cmp_ok(lsn($after_recv), '<=', lsn($standby_has), 'the slot has not moved past the standby');
for my $t (@txns)
{
	my $c = lsn($commit_lsn{ $t->[0] });
	push @consumed, @$t if $c > lsn($confirmed) && $c <= lsn($after_recv);
}
$confirmed = $after_recv if lsn($after_recv) > lsn($confirmed);

# ---- the standby back: the consumer goes on ----

$standby->start;
$primary->wait_for_replay_catchup($standby);
@got = consume(0);
my %had_before = map { $_ => 1 } @consumed;
my @left = grep { !$had_before{$_} } map { @$_ } @txns;
is(join(' ', events_of(@got)), join(' ', @left),
	'with the standby back the consumer gets the rest, the held-back transactions too');
consume(@got - 2);    # all but the last two (if there are more)
emit_txn($primary) for 10 .. 12;
emit_txn($primary, 'rollback');
$primary->wait_for_replay_catchup($standby);
ok(wait_synced(), "the standby's synced slot catches up with the consumer");

# ---- the standby cut off; one more commit on the primary only ----

$standby->append_conf('postgresql.conf', "primary_conninfo = ''\n");
$standby->reload;
$standby->poll_query_until('postgres', 'SELECT count(*) = 0 FROM pg_stat_wal_receiver')
  or die 'the WAL receiver did not stop';
$primary->poll_query_until('postgres',
	q{SELECT NOT active FROM pg_replication_slots WHERE slot_name = 'sb1'})
  or die 'the standby slot stayed active';
emit_txn($primary);
my $lost = $txns[-1];
($ret, $out, $err) = $primary->psql('postgres',
	q{SET statement_timeout = '3s'; SELECT lsn, data FROM pg_logical_slot_peek_changes('eo_cdc', NULL, NULL)});
like($err, qr/statement timeout/,
	'a transaction the standby lacks is held back from the consumer at the failover too');
$received{$_} = 1 for events_of(parse_txns($out));
is($out, '', '... with nothing handed out');

# ---- failover ----

$primary->stop('immediate');
$standby->promote;
my $new = $standby;

is( $new->safe_psql('postgres',
		q{SELECT string_agg(slot_name, ' ' ORDER BY slot_name) FROM pg_replication_slots WHERE slot_type = 'logical'}),
	'eo_cdc', 'on the new primary the failover slot is there, the local one is not');
my $have_slot = $new->safe_psql('postgres',
	q{SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'eo_cdc'});
my @after = $have_slot ? read_slot($new, 'get', 'eo_cdc') : ();
my %seen;
$seen{$_}++ for @consumed, events_of(@after);
my @had = grep { $_ != $lost->[0] && $_ != $lost->[1] } map { @$_ } @txns;
is(join(' ', grep { !$seen{$_} } @had), '', 'nothing the standby had is lost');
is(join(' ', grep { $seen{$_} > 1 } sort { $a <=> $b } keys %seen), '',
	'nothing comes twice: what the consumer confirmed does not come again');
is(join(' ', @consumed, events_of(@after)), join(' ', @had),
	'consumed before and read after: every event once, in commit order');
is(join(' ', map { @{ $_->[2] } } @after), join(' ', map { $id_of{$_} } events_of(@after)),
	'... with their ids');
ok(!$seen{ $lost->[0] } && !$seen{ $lost->[1] } && !$received{ $lost->[0] } && !$received{ $lost->[1] },
	'the transaction the new primary lacks was never handed out, before or after (no ghost event)');
ok(scalar(@after) >= 3, sprintf('%d transactions read after the promotion, %d events consumed before',
		scalar(@after), scalar(@consumed)));

emit_txn($new);
is(join(' ', $have_slot ? events_of(read_slot($new, 'get', 'eo_cdc')) : ()), join(' ', @{ $txns[-1] }),
	'the slot goes on with events emitted on the new primary');

$new->stop;
done_testing();
