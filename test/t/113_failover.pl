# Copyright: eo authors.  See README.
#
# Failover under load.  A primary with a synchronous streaming standby
# (synchronous_standby_names: an acknowledged commit is on both), eo
# preloaded on both, eo.naptime = 1 s.  While pgbench claims keys and
# emits events (commit mode) on two connections, the test itself, on
# connections of its own, claims keys in both modes and relays the outbox
# (fetch, then eo_relay_ack_pages), remembering what was acknowledged.
# Then the primary is stopped immediately (no shutdown checkpoint, no
# last WAL sent) and the standby promoted.  On the new primary:
# - every acknowledged claim is there and done, with its effect: the
#   accounts' total equals the done commit-mode keys (test's and
#   pgbench's), whatever pgbench had in flight;
# - every event of an acknowledged transaction is there;
# - the relay goes on from its position: each event in the outbox is
#   either acknowledged before the failover or delivered after it, none
#   acknowledged before comes again (the page left outstanding at the
#   failover comes back once, after its lease), and each aggregate's
#   events come in seq order;
# - the lease-mode keys claimed and not completed before the failover are
#   reclaimed ('failed', 'lease expired') by the new primary's worker
#   within 2 x eo.naptime of the later of their expiry and the promotion;
#   completed ones stay done.
# Before the failover, on the hot standby: eo_status answers, eo_claim
# and eo_emit fail with 25006 (read-only transaction).

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(time usleep);

my $primary = EoTest::eo_node('primary', init => {allows_streaming => 1}, conf => q{
eo.naptime = 1
synchronous_commit = on
});
$primary->safe_psql('postgres', q{
SELECT eo_outbox_create('ev');
SELECT eo_group_create('ev', 'g');
CREATE TABLE accounts (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
INSERT INTO accounts (id) SELECT generate_series(0, 9);
});
$primary->backup('backup');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->append_conf('postgresql.conf', "eo.naptime = 1\n");
$standby->start;
# Synchronous from here on (before, a commit would wait for no standby).
$primary->safe_psql('postgres', q{ALTER SYSTEM SET synchronous_standby_names = 'standby'});
$primary->reload;
$primary->poll_query_until('postgres',
	q{SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'}, 'sync')
  or die 'the standby did not become synchronous';

# ---- the hot standby: status yes, claims and emits no ----

$primary->safe_psql('postgres', q{BEGIN; SELECT eo_claim('before'); SELECT eo_complete('before', '{"ok": 1}'); COMMIT;});
$primary->wait_for_catchup($standby, 'replay');
is($standby->safe_psql('postgres', q{SELECT state, result FROM eo_status('before')}),
	'done|{"ok": 1}', 'the hot standby answers eo_status');
for my $call (q{eo_claim('on-standby')}, q{eo_emit('ev', 'acct', '1', 'T', '{}')})
{
	my ($ret, $out, $err) = $standby->psql('postgres', qq{
DO \$\$BEGIN PERFORM $call; EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'sqlstate % %', SQLSTATE, SQLERRM; END\$\$});
	like($err, qr/sqlstate 25006 .*read-only/, "the hot standby refuses $call with 25006")
	  or diag($err);
}

# ---- load: pgbench on two connections ----

# The change is made only when the claim is new, as an application would:
# two draws of r can meet (over the few thousand draws of a run, about a
# 1% chance), and a duplicate delivery must change nothing, or the effects
# would outnumber the keys below (a CI run on 17 met one: 5,695 against
# 5,694).
my $script = $primary->basedir . '/load.sql';
open my $fh, '>', $script or die;
print $fh <<'EOS';
\set r random(1, 1000000000)
BEGIN;
WITH c AS (SELECT status FROM eo_claim('load-' || :client_id || '-' || :r))
UPDATE accounts SET n = n + 1 WHERE id = :r % 10 AND (SELECT status FROM c) = 'claimed';
SELECT eo_emit('ev', 'acct', (:r % 10)::text, 'Load', jsonb_build_object('r', :r));
COMMIT;
EOS
close $fh;
my ($pgb_out, $pgb_err) = ('', '');
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '2', '-j', '2', '-T', '120', '-f', $script, $primary->connstr('postgres') ],
	'>', \$pgb_out, '2>', \$pgb_err);

# ---- the test's own work, each step acknowledged before the next ----

my (@done_keys, %event_of, %acked, @order_before);
my $relay_sql = sub {
	my ($lease, $max) = @_;
	$max //= 50;
	return qq{SELECT string_agg(lease_token || ':' || id || ':' || aggregateid || ':' || seq, ' ')
FROM eo_relay_fetch('ev', 'g', $max, '$lease', 8, false)};
};
# A relay round: fetch a page of every slot, acknowledge them all.
my $relay_round = sub {
	my $page = $primary->safe_psql('postgres', $relay_sql->('1 hour'));
	my @rows = map { [ split /:/ ] } grep { length } split / /, $page;
	return 0 unless @rows;
	my %tokens = map { $_->[0] => 1 } @rows;
	$primary->safe_psql('postgres',
		"SELECT eo_relay_ack_pages('ev', 'g', '{" . join(',', keys %tokens) . "}')");
	$acked{ $_->[1] } = 1 for @rows;
	return scalar @rows;
};

for my $i (1 .. 60)
{
	my $id = $primary->safe_psql('postgres', qq{
BEGIN;
SELECT status FROM eo_claim('c-$i') \\gset
UPDATE accounts SET n = n + 1 WHERE id = $i % 10;
SELECT eo_emit('ev', 'acct', ($i % 10)::text, 'Test', '{"i": $i}');
COMMIT;});
	push @done_keys, "c-$i";
	$event_of{"c-$i"} = $id;
	$relay_round->() if $i % 10 == 0;
}
# Lease mode: claimed with a 3 s lease; half completed.
my (@leased_done, @leased_open);
for my $i (1 .. 10)
{
	my $token = $primary->safe_psql('postgres',
		qq{SELECT lease_token FROM eo_claim('l-$i', lease => '3 s')});
	if ($i % 2)
	{
		$primary->safe_psql('postgres',
			qq{SELECT eo_complete('l-$i', '{"charged": $i}', lease_token => $token)});
		push @leased_done, "l-$i";
	}
	else
	{
		push @leased_open, "l-$i";
	}
}
my $leases_end = time + 3;
# A page fetched and not acknowledged when the primary goes: it must come
# back after its lease, not be lost.
my $outstanding = $primary->safe_psql('postgres', $relay_sql->('2 s'));
my @outstanding = map { (split /:/)[1] } grep { length } split / /, $outstanding;
ok(scalar(@outstanding) > 0, 'a page is outstanding at the failover')
  or diag('nothing to fetch: is pgbench emitting?');
like(
	$primary->safe_psql('postgres', q{SELECT count(*) FROM eo_keys() WHERE key LIKE 'load-%'}),
	qr/^[1-9]/, 'pgbench is claiming keys at the failover');

# ---- failover: the primary stops at once, the standby is promoted ----

$primary->stop('immediate');
$pgbench->finish;    # its connections are gone
my $promoted_at = time;
$standby->promote;
my $new = $standby;

# ---- the new primary ----

is( $new->safe_psql('postgres',
		q{SELECT count(*) FROM unnest(ARRAY['} . join(q{','}, @done_keys) . q{']) k,
                 eo_status(k) s WHERE s.state = 'done'}),
	scalar(@done_keys), 'every acknowledged commit-mode claim is there, done');
is( $new->safe_psql('postgres',
		q{SELECT count(*) FROM ev WHERE id::text = ANY (ARRAY['} . join(q{','}, values %event_of) . q{'])}),
	scalar(keys %event_of), 'every event of an acknowledged transaction is there');
is( $new->safe_psql('postgres', q{
SELECT (SELECT sum(n) FROM accounts)
     = (SELECT count(*) FROM eo_keys()
        WHERE state IN ('c', 'd') AND (key LIKE 'c-%' OR key LIKE 'load-%'))}),
	't', 'the effects and the done keys agree (each claim committed with its change)')
  or diag($new->safe_psql('postgres', q{
SELECT (SELECT sum(n) FROM accounts), state, count(*), count(*) FILTER (WHERE key LIKE 'c-%')
FROM eo_keys() GROUP BY state}));
is( $new->safe_psql('postgres',
		q{SELECT count(*) FROM unnest(ARRAY['} . join(q{','}, @leased_done) . q{']) k,
                 eo_status(k) s WHERE s.state = 'done'}),
	scalar(@leased_done), 'completed lease-mode keys are done');

# The worker of the new primary reclaims the open leases.
my $open = q{ARRAY['} . join(q{','}, @leased_open) . q{']};
ok( $new->poll_query_until('postgres', qq{
SELECT bool_and(s.state = 'failed' AND s.last_error = 'lease expired')
FROM unnest($open) k, eo_status(k) s}),
	'the open leases are reclaimed on the new primary');
my $late = time - ($leases_end > $promoted_at ? $leases_end : $promoted_at);
cmp_ok($late, '<=', 2 + 2,
	sprintf('... %.1f s after their expiry or the promotion, whichever came later'
		  . ' (2 x naptime, + 2 s for the promotion and the polling)', $late));

# The relay goes on: drain the group on the new primary.
my (%after, %seq_of_after);
my @after_order;
# (until caught up: pgbench may have emitted tens of thousands of events)
for (1 .. 5000)
{
	my $page = $new->safe_psql('postgres', $relay_sql->('1 hour', 1000));
	my @rows = map { [ split /:/ ] } grep { length } split / /, $page;
	if (!@rows)
	{
		# caught up, unless the outstanding page is still leased
		last
		  if $new->safe_psql('postgres',
			q{SELECT coalesce(sum(backlog), 0) FROM eo_relay_status('ev', 'g')}) eq '0';
		usleep(200_000);
		next;
	}
	my %tokens = map { $_->[0] => 1 } @rows;
	$new->safe_psql('postgres',
		"SELECT eo_relay_ack_pages('ev', 'g', '{" . join(',', keys %tokens) . "}')");
	for my $r (@rows)
	{
		$after{ $r->[1] }++;
		push @after_order, $r;
	}
}
my %in_outbox = map { $_ => 1 } split /\n/,
  $new->safe_psql('postgres', q{SELECT id FROM ev});
my @lost = grep { !$acked{$_} && !$after{$_} } keys %in_outbox;
is(scalar(@lost), 0, 'no event in the outbox was skipped (each acknowledged before or delivered after)')
  or diag("lost: @lost[0 .. ($#lost < 5 ? $#lost : 4)]");
my @again = grep { $acked{$_} } keys %after;
is(scalar(@again), 0, 'none acknowledged before the failover came again');
my @twice = grep { $after{$_} > 1 } keys %after;
is(scalar(@twice), 0, 'none came twice after it');
is(scalar(grep { $after{$_} } @outstanding), scalar(@outstanding),
	'the page outstanding at the failover came back');
my (%last_seq, $disorder);
for my $r (@after_order)
{
	my ($agg, $seq) = ($r->[2], $r->[3]);
	$disorder++ if defined $last_seq{$agg} && $seq <= $last_seq{$agg};
	$last_seq{$agg} = $seq;
}
ok(!$disorder, 'each aggregate in seq order after the failover');
ok(keys(%after) > 0, sprintf('%d events delivered after the failover, %d before',
		scalar(keys %after), scalar(keys %acked)));

# New work on the new primary.
is($new->safe_psql('postgres', q{SELECT status FROM eo_claim('after')}),
	'claimed', 'the new primary claims new keys');

$new->stop;
done_testing();
