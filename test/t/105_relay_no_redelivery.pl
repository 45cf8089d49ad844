# Copyright: eo authors.  See README.
#
# Acknowledged events are never handed out again: producers
# committing one event per transaction while three relays of one group
# share the default 8 slots, fetching pages of 100 and acknowledging every
# page, with a lease (30 s) that never expires.  Every event must reach
# the group exactly once.  (A fetch that visited several slots used to take
# its snapshot before locking the later ones; a slot another relay had
# acknowledged meanwhile could have its position moved back to that older
# snapshot, and the events between were handed out again.)

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('relay_no_redelivery');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'eo'
eo.naptime = 3600
max_connections = 40
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('rr', notify => false);
SELECT eo_group_create('rr', 'g');
-- pages handed out, and those acknowledged (an event in two acknowledged
-- pages was handed out again after its acknowledgement)
CREATE TABLE pending (id uuid, seq int8, token int8);
CREATE TABLE got (id uuid, seq int8, token int8);
});

my $dir = PostgreSQL::Test::Utils::tempdir;
open my $p, '>', "$dir/produce.sql" or die;
print $p q{SELECT eo_emit('rr', 'order', (random() * 500)::int::text, 'E', NULL);
};
close $p;
open my $r, '>', "$dir/relay.sql" or die;
print $r q{WITH f AS (SELECT * FROM eo_relay_fetch('rr', 'g', 100, '30 seconds')),
     i AS (INSERT INTO pending SELECT id, seq, lease_token FROM f)
SELECT coalesce(max(lease_token), 0) AS t FROM f \gset
WITH a AS (SELECT eo_relay_ack('rr', 'g', :t) AS n WHERE :t > 0)
INSERT INTO got SELECT id, seq, token FROM pending
WHERE token = :t AND EXISTS (SELECT FROM a WHERE n > 0);
};
close $r;

my $secs = 15;
my @producers = ('pgbench', '-n', '-c', '5', '-j', '5', '-R', '400', '-T', $secs, '-f', "$dir/produce.sql",
	'-d', $node->connstr('postgres'));
my @relays = ('pgbench', '-n', '-c', '3', '-j', '3', '-T', $secs, '-f', "$dir/relay.sql",
	'-d', $node->connstr('postgres'));
my ($pout, $perr, $rout, $rerr) = ('', '', '', '');
my $ph = IPC::Run::start(\@producers, '>', \$pout, '2>', \$perr);
my $rh = IPC::Run::start(\@relays, '>', \$rout, '2>', \$rerr);
$ph->finish;
$rh->finish;
like($pout, qr/processed: \d+/, 'producers ran')
  or diag($perr);
like($rout, qr/processed: \d+/, 'relays ran') or diag($rerr);

# Drain what is left: pages a relay did not get to acknowledge are given
# back, then everything is fetched and acknowledged.
$node->safe_psql('postgres', q{
SELECT eo_relay_release('rr', 'g', lease_token) FROM eo_internal.eo_outbox_slots
WHERE outbox = 'rr' AND page_state = 'o'});
for (1 .. 500)
{
	my $t = $node->safe_psql('postgres', q{
WITH f AS (SELECT * FROM eo_relay_fetch('rr', 'g', 1000, '30 seconds')),
     i AS (INSERT INTO pending SELECT id, seq, lease_token FROM f)
SELECT coalesce(max(lease_token), 0) FROM f});
	last if $t eq '0';
	$node->safe_psql('postgres', qq{
WITH a AS (SELECT eo_relay_ack('rr', 'g', $t) AS n)
INSERT INTO got SELECT id, seq, token FROM pending
WHERE token = $t AND EXISTS (SELECT FROM a WHERE n > 0)});
}

my $events = $node->safe_psql('postgres', 'SELECT count(*) FROM rr');
cmp_ok($events, '>', 100, "producers wrote $events events");
is($node->safe_psql('postgres', 'SELECT count(DISTINCT id) FROM got'),
	$events, 'every event was acknowledged');
is($node->safe_psql('postgres', q{SELECT sum(backlog) FROM eo_outbox_status}),
	'0', 'nothing left');
is($node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT id FROM got GROUP BY id HAVING count(*) > 1) d}),
	'0', 'no acknowledged event was handed out again');

$node->stop;
done_testing();
