# Copyright: eo authors.  See README.
#
# Acknowledged events are never handed out again: producers
# committing one event per transaction while three relays of one group
# share the default 8 slots, fetching pages of 100 and acknowledging every
# page, with a lease (30 s) that never expires.  Every event must reach
# the group exactly once.  Run twice: fetching one slot per call, and
# fetching every free slot per call (eo_relay_fetch's `slots`), each
# slot's part acknowledged by its own token.  (A fetch that visited
# several slots used to take
# its snapshot before locking the later ones; a slot another relay had
# acknowledged meanwhile could have its position moved back to that older
# snapshot, and the events between were handed out again.)

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;

my $node = EoTest::eo_node('relay_no_redelivery', conf => q{
eo.naptime = 3600
max_connections = 40
});
my $dir = PostgreSQL::Test::Utils::tempdir;

# A relay's fetch and its acknowledgement of each token of the page:
# pages handed out go into `pending`, the events of pages acknowledged
# into `got` (an event in two acknowledged pages was handed out again
# after its acknowledgement).
sub fetch_sql
{
	my ($slots, $page) = @_;
	my $extra = $slots > 1 ? ", $slots, true" : '';
	return qq{WITH f AS (SELECT * FROM eo_relay_fetch('rr', 'g', $page, '30 seconds'$extra)),
     i AS (INSERT INTO pending SELECT id, seq, lease_token FROM f)
SELECT coalesce(string_agg(DISTINCT lease_token::text, ','), '0') AS ts FROM f};
}
my $ack_sql = q{WITH a AS (SELECT t, eo_relay_ack('rr', 'g', t) AS n
           FROM unnest(string_to_array(:'ts', ',')::int8[]) t WHERE t > 0)
INSERT INTO got SELECT p.id, p.seq, p.token FROM pending p JOIN a ON p.token = a.t AND a.n > 0;
};

sub run_case
{
	my ($slots) = @_;
	my $what = $slots > 1 ? "$slots slots per fetch" : 'one slot per fetch';

	$node->safe_psql('postgres', q{
SELECT eo_outbox_drop('rr') FROM eo_internal.eo_outboxes WHERE name = 'rr';
DROP TABLE IF EXISTS pending, got;
SELECT eo_outbox_create('rr', notify => false);
SELECT eo_group_create('rr', 'g');
CREATE TABLE pending (id uuid, seq int8, token int8);
CREATE TABLE got (id uuid, seq int8, token int8);
});
	open my $p, '>', "$dir/produce.sql" or die;
	print $p q{SELECT eo_emit('rr', 'order', (random() * 500)::int::text, 'E', NULL);
};
	close $p;
	open my $r, '>', "$dir/relay.sql" or die;
	print $r fetch_sql($slots, 100) . " \\gset\n" . $ack_sql;
	close $r;

	my $secs = 15;
	my @producers = ('pgbench', '-n', '-c', '5', '-j', '5', '-R', '400', '-T', $secs, '-f',
		"$dir/produce.sql", '-d', $node->connstr('postgres'));
	my @relays = ('pgbench', '-n', '-c', '3', '-j', '3', '-T', $secs, '-f', "$dir/relay.sql",
		'-d', $node->connstr('postgres'));
	my ($pout, $perr, $rout, $rerr) = ('', '', '', '');
	my $ph = IPC::Run::start(\@producers, '>', \$pout, '2>', \$perr);
	my $rh = IPC::Run::start(\@relays, '>', \$rout, '2>', \$rerr);
	$ph->finish;
	$rh->finish;
	like($pout, qr/processed: \d+/, "$what: producers ran")
	  or diag($perr);
	like($rout, qr/processed: \d+/, "$what: relays ran") or diag($rerr);

	# Drain what is left: pages a relay did not get to acknowledge are
	# given back, then everything is fetched and acknowledged.
	$node->safe_psql('postgres', q{
SELECT eo_relay_release('rr', 'g', lease_token) FROM eo_internal.eo_outbox_slots
WHERE outbox = 'rr' AND page_state = 'o'});
	for (1 .. 500)
	{
		my $ts = $node->safe_psql('postgres', fetch_sql($slots, 1000));
		last if $ts eq '0';
		$node->safe_psql('postgres', "\\set ts '$ts'\n" . $ack_sql);
	}

	my $events = $node->safe_psql('postgres', 'SELECT count(*) FROM rr');
	cmp_ok($events, '>', 100, "$what: producers wrote $events events");
	is($node->safe_psql('postgres', 'SELECT count(DISTINCT id) FROM got'),
		$events, "$what: every event was acknowledged");
	is($node->safe_psql('postgres', q{SELECT sum(backlog) FROM eo_outbox_status}),
		'0', "$what: nothing left");
	is($node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT id FROM got GROUP BY id HAVING count(*) > 1) d}),
		'0', "$what: no acknowledged event was handed out again");
}

run_case(1);
run_case(8);

$node->stop;
done_testing();
