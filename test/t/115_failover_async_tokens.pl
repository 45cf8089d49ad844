# Copyright: eo authors.  See README.
#
# Fencing across an asynchronous failover.  A primary and a streaming
# standby without synchronous replication; the standby is stopped, so
# that what the primary does next never reaches it: lease claims (one of
# a key the standby knows, taken over after its lease expired, one of a
# key it never saw, and a hundred more, past the 32 values a sequence
# logs ahead) and relay fetches.  Then the primary is stopped at once and
# the standby started and promoted: the failover lost all of that.
#
# On the new primary (timeline 2):
# - every lease token and relay token it issues is above every token the
#   old primary issued, also those it never heard of, and below 2^53;
# - the holders whose claims were lost are refused with 55006 (stale):
#   the holder of the unknown key and the one whose takeover was lost,
#   before and after the key is claimed again here; a relay's lost token
#   too;
# - a token sequence pushed ahead of the timeline's epoch (as pg_upgrade
#   or a restore into a new cluster leave it, at timeline 1 again) goes
#   on increasing, and eo_maintain() moves the next tokens to a new epoch
#   above it.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;

my $primary = EoTest::eo_node('primary', init => {allows_streaming => 1}, conf => "eo.naptime = 1\n");
$primary->safe_psql('postgres', q{
SELECT eo_outbox_create('ev');
SELECT eo_group_create('ev', 'g');
});
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->append_conf('postgresql.conf', "eo.naptime = 1\n");
$standby->start;

my $lease_token = sub {
	my ($node, $key, $lease) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT lease_token FROM eo_claim('$key', lease => '$lease')});
};
# One page of each slot with events; their tokens, and the events seen.
my $fetch = sub {
	my ($node) = @_;
	return split /\n/, $node->safe_psql('postgres',
		q{SELECT DISTINCT lease_token FROM eo_relay_fetch('ev', 'g', 100, '1 s', 8, false)});
};
my $emit = sub {
	my ($node, $n) = @_;
	$node->safe_psql('postgres',
		qq{SELECT eo_emit('ev', 'acct', (i % 4)::text, 'T', '{}') FROM generate_series(1, $n) i});
};

# ---- known to both: a key under a short lease, a page fetched ----

my $t_shared = $lease_token->($primary, 'shared', '1 s');
$emit->($primary, 20);
my @relay_shared = $fetch->($primary);
ok(@relay_shared > 0, 'the relay fetched pages before the failover');
$primary->wait_for_catchup($standby, 'replay');
$standby->stop('fast');

# ---- what only the old primary saw ----

sleep 2;    # the lease of 'shared' expires
my $t_takeover = $lease_token->($primary, 'shared', '1 hour');
ok($t_takeover > $t_shared, 'the old primary took over the expired lease with a newer token');
my $t_lost = $lease_token->($primary, 'lost', '1 hour');
my @old_lease = ($t_shared, $t_takeover, $t_lost);
push @old_lease, $lease_token->($primary, "more-$_", '1 hour') for 1 .. 100;
$emit->($primary, 20);
sleep 2;    # the relay's leases expire: every slot is served again
my @old_relay = (@relay_shared, $fetch->($primary));
ok(@old_relay > @relay_shared, 'the old primary issued relay tokens the standby never had');
$primary->stop('immediate');

# ---- the failover ----

$standby->start;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby was not promoted';
my $new = $standby;

my $max = sub { my $m = 0; $_ > $m and $m = $_ for @_; return $m; };
my $min = sub { my $m = $_[0]; $_ < $m and $m = $_ for @_; return $m; };

# ---- lease tokens ----

my @new_lease = map { $lease_token->($new, "new-$_", '1 hour') } 1 .. 20;
cmp_ok($min->(@new_lease), '>', $max->(@old_lease),
	'every lease token issued after the promotion is above every one issued before it');
cmp_ok($max->(@new_lease), '<', 2**53, 'lease tokens stay below 2^53');

my $refusal = sub {
	my ($sql) = @_;
	my ($ret, $out, $err) = $new->psql('postgres', qq{
DO \$\$BEGIN PERFORM $sql; EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'sqlstate % %', SQLSTATE, SQLERRM; END\$\$});
	return $err;
};
like($refusal->(qq{eo_complete('lost', '{}', lease_token => $t_lost)}),
	qr/sqlstate 55006 .*is stale/,
	'the holder of a claim the failover lost is refused as stale (55006)');
like($refusal->(qq{eo_complete('shared', '{}', lease_token => $t_takeover)}),
	qr/sqlstate 55006 .*is stale/,
	'the holder of a takeover the failover lost is refused as stale, before the key is claimed again');
like($refusal->(qq{eo_extend('shared', $t_takeover, '1 hour')}),
	qr/sqlstate 55006 .*is stale/, 'and so is its eo_extend');
sleep 1;    # the lease of 'shared' (1 s, known here) has expired
my $t_here = $lease_token->($new, 'shared', '1 hour');
cmp_ok($t_here, '>', $t_takeover, 'the key claimed again on the new primary gets a newer token');
like($refusal->(qq{eo_complete('shared', '{}', lease_token => $t_takeover)}),
	qr/sqlstate 55006 .*is stale/, 'the lost holder stays refused once the key is claimed again');
is($new->safe_psql('postgres', qq{SELECT eo_complete('shared', '{"ok": 1}', lease_token => $t_here)}),
	'', 'the new holder completes');

# ---- relay tokens ----

sleep 2;    # the replicated leases of the relay expire
my @new_relay = $fetch->($new);
ok(@new_relay > 0, 'the relay fetches on the new primary');
cmp_ok($min->(@new_relay), '>', $max->(@old_relay),
	'every relay token issued after the promotion is above every one issued before it');
cmp_ok($max->(@new_relay), '<', 2**53, 'relay tokens stay below 2^53');
my $lost_relay = $max->(@old_relay);
like($refusal->(qq{eo_relay_ack('ev', 'g', $lost_relay)}),
	qr/sqlstate 55006 .*is stale/, 'a relay token the failover lost is refused as stale (55006)');

# ---- a sequence ahead of the timeline's epoch (pg_upgrade, restore) ----

$new->safe_psql('postgres', 'CHECKPOINT');
my $tli = $new->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()');
cmp_ok($tli, '>=', 2, 'the new primary is on a later timeline');
my $ahead = ($tli + 5) * 2**40;
$new->safe_psql('postgres', "SELECT setval('eo_internal.eo_lease_token_seq', $ahead)");
my $t_ahead = $lease_token->($new, 'ahead-1', '1 hour');
# the next value, or, if the worker's pass (eo.naptime = 1) came between
# the setval and the claim, the first of the epoch it starts above it
ok($t_ahead == $ahead + 1 || $t_ahead == ($tli + 6) * 2**40 + 1,
	'tokens go on from a sequence ahead of the epoch, still increasing')
  or diag("got $t_ahead after $ahead");
$new->safe_psql('postgres', 'SELECT eo_maintain()');
is( $new->safe_psql('postgres',
		q{SELECT base FROM eo_internal.eo_token_epochs WHERE sequence = 'eo_internal.eo_lease_token_seq'::regclass}),
	6, 'a pass raises the base of the sequence that was ahead');
my $t_next = $lease_token->($new, 'ahead-2', '1 hour');
is($t_next >> 40, $tli + 6, 'the next token starts a new epoch above the sequence');

done_testing();
