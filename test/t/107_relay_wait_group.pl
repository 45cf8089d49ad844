# Copyright: eo authors.  See README.
#
# eo_relay_wait(outbox, timeout, consumer_group, linger), the doorbell with
# the group's leases in view:
# - a relay that found the rest of the group leased sleeps only until a
#   lease can be taken over (here: it expires after 2 s), not its timeout,
#   and the next fetch gets that page;
# - once the bell rang, it lingers as asked before it returns, so a page
#   can fill;
# - with nothing to wait for it returns false at its timeout, and bad
#   arguments get clean errors.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;

my $node = EoTest::eo_node('relay_wait_group', conf => "eo.naptime = 3600", eo_in => []);
$node->safe_psql('postgres', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('w', slots => 1);
SELECT eo_group_create('w', 'g');
SELECT eo_emit('w', 'order', '1', 'E', '{}');
});

# One session: lease the page for 2 s, find nothing more, wait.
my $out = $node->safe_psql('postgres', q{
SELECT count(*) AS leased FROM eo_relay_fetch('w', 'g', 100, '2 seconds');
SELECT count(*) AS more FROM eo_relay_fetch('w', 'g', 100, '2 seconds');
SELECT clock_timestamp() AS t0 \gset
SELECT eo_relay_wait('w', '30 seconds', 'g', '0') AS woke;
SELECT round(extract(epoch FROM clock_timestamp() - :'t0')) AS secs;
SELECT count(*) AS taken_over FROM eo_relay_fetch('w', 'g', 100, '30 seconds');
});
my ($leased, $more, $woke, $secs, $taken) = split /\n/, $out;
is($leased, 1, 'a relay leased the one event for 2 s');
is($more, 0, '... and found nothing more');
is($woke, 't', 'eo_relay_wait with the group woke (true) ...');
ok($secs >= 1 && $secs <= 5, "... when the lease expired, after ${secs} s, not at its 30 s timeout");
is($taken, 1, 'the next fetch takes the page over');

# Linger: the bell rang (a commit after the last fetch), the wait lingers.
$out = $node->safe_psql('postgres', q{
SELECT eo_relay_ack('w', 'g', max(lease_token)) >= 0 FROM eo_internal.eo_outbox_slots WHERE outbox = 'w';
SELECT count(*) AS empty FROM eo_relay_fetch('w', 'g', 100, '30 seconds');
SELECT eo_emit('w', 'order', '2', 'E', '{}') IS NOT NULL;
SELECT clock_timestamp() AS t0 \gset
SELECT eo_relay_wait('w', '30 seconds', 'g', '700 ms') AS woke;
SELECT extract(epoch FROM clock_timestamp() - :'t0') >= 0.7 AS lingered,
       extract(epoch FROM clock_timestamp() - :'t0') < 5 AS not_the_timeout;
});
like($out, qr/^t\n0\nt\nt\nt\|t$/, 'after the bell, it lingered 700 ms and returned true')
  or diag($out);

# Nothing to wait for: false at the timeout; a linger never outlasts it.
$out = $node->safe_psql('postgres', q{
SELECT count(*) FROM eo_relay_fetch('w', 'g', 100, '30 seconds');
SELECT eo_relay_ack('w', 'g', max(lease_token)) >= 0 FROM eo_internal.eo_outbox_slots WHERE outbox = 'w';
SELECT count(*) FROM eo_relay_fetch('w', 'g', 100, '30 seconds');
SELECT clock_timestamp() AS t0 \gset
SELECT eo_relay_wait('w', '300 ms', 'g', '10 seconds') AS woke;
SELECT extract(epoch FROM clock_timestamp() - :'t0') < 5 AS bounded;
});
like($out, qr/\nf\nt$/, 'nothing committed, no lease held: false at the timeout');

my ($rc, $o, $err) = $node->psql('postgres', q{SELECT eo_relay_wait('w', '1 s', 'g', NULL)});
like($err, qr/linger must not be null/, 'a NULL linger is refused');
($rc, $o, $err) = $node->psql('postgres', q{SELECT eo_relay_wait('w', '1 s', 'nope', '0')});
like($err, qr/consumer group "nope" of outbox "w" does not exist/, 'an unknown group is refused');

$node->stop;
done_testing();
