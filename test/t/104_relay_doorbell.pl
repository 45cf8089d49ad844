# Copyright: eo authors.  See README.
#
# eo_relay_wait(): a relay whose fetch came back empty sleeps until a
# transaction that wrote events into the outbox commits (outbox_doorbell.c,
# shared memory, needs the preload), not until its timeout:
# - a commit of eo_emit, or of a plain INSERT, wakes it at once;
# - a rolled-back emit does not wake it;
# - an outbox made with notify => false (no NOTIFY) still rings;
# - with nothing committed it returns false at its timeout;
# - events committed between the fetch and the wait are not slept through
#   (the wait returns at once and the next fetch gets them).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Time::HiRes qw(usleep time);
use Test::More;
use lib 'test/perl';
use EoTest;

my $node = EoTest::eo_node('relay_doorbell', conf => "eo.naptime = 3600", eo_in => []);
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('bell');
SELECT eo_outbox_create('quiet', notify => false);
SELECT eo_group_create('bell', 'g');
SELECT eo_group_create('quiet', 'g');
});

my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);

# A relay session: psql kept open, fed line by line.
my %relay = (in => '', out => '', err => '');
$relay{h} = IPC::Run::start(
	[ 'psql', '-XAtq', '-f', '-', '-d', $node->connstr('postgres') ],
	'<', \$relay{in}, '>', \$relay{out}, '2>', \$relay{err}, $timeout);

# Run `$sql` in the relay session and wait for the line matching `$re`.
my $mark = 0;
sub relay_run
{
	my ($sql) = @_;
	$mark++;
	$relay{in} .= "$sql\nSELECT 'done-$mark';\n";
	ok(pump_until($relay{h}, $timeout, \$relay{out}, qr/^done-$mark$/m),
		"relay step $mark finished")
	  or diag("stdout: $relay{out}\nstderr: $relay{err}");
}

# Start `$sql` in the relay session without waiting for it.
sub relay_start
{
	my ($sql) = @_;
	$mark++;
	$relay{in} .= "$sql\nSELECT 'done-$mark';\n";
	$relay{h}->pump_nb;
	return $mark;
}

sub relay_finished
{
	my ($m) = @_;
	$relay{h}->pump_nb;
	return $relay{out} =~ /^done-$m$/m;
}

# Is the relay's backend waiting right now (active, not returned)?
sub relay_waits_for
{
	my ($m, $secs) = @_;
	my $end = time + $secs;
	while (time < $end)
	{
		return 0 if relay_finished($m);
		usleep(50_000);
	}
	return 1;
}

sub wait_returned
{
	my ($m, $what) = @_;
	my $t0 = time;
	ok(pump_until($relay{h}, $timeout, \$relay{out}, qr/^done-$m$/m),
		"$what: the wait returned")
	  or diag("stdout: $relay{out}\nstderr: $relay{err}");
	return time - $t0;
}

for my $outbox ('bell', 'quiet')
{
	# Drain, so that the next fetch is empty and the bell's value is read.
	relay_run(qq{SELECT 'fetched=' || count(*) FROM eo_relay_fetch('$outbox', 'g');});
	like($relay{out}, qr/^fetched=0$/m, "$outbox: nothing to fetch");

	# Nothing committed: the wait times out and says so.
	$relay{out} = '';
	my $t0 = time;
	relay_run(qq{SELECT 'woke=' || eo_relay_wait('$outbox', '300 ms');});
	like($relay{out}, qr/^woke=false$/m, "$outbox: nothing committed, wait returns false");
	cmp_ok(time - $t0, '>=', 0.25, "$outbox: ... after its timeout");

	# A rolled-back emit does not wake the relay; a committed one does.
	$relay{out} = '';
	my $m = relay_start(qq{SELECT 'woke=' || eo_relay_wait('$outbox', '60 s');});
	ok(relay_waits_for($m, 1.0), "$outbox: the relay sleeps in eo_relay_wait");
	$node->safe_psql('postgres',
		qq{BEGIN; SELECT eo_emit('$outbox', 'order', '1', 'Created', '{}'); ROLLBACK;});
	ok(relay_waits_for($m, 1.0), "$outbox: a rolled-back emit does not wake it");
	$node->safe_psql('postgres',
		qq{BEGIN; SELECT eo_emit('$outbox', 'order', '1', 'Created', '{}'); COMMIT;});
	my $took = wait_returned($m, "$outbox: committed emit");
	like($relay{out}, qr/^woke=true$/m, "$outbox: the committed emit woke the relay");
	cmp_ok($took, '<', 30, "$outbox: ... long before the 60 s timeout");
	relay_run(qq{SELECT 'fetched=' || count(*) FROM eo_relay_fetch('$outbox', 'g', 1000, '1 ms');});
	like($relay{out}, qr/^fetched=1$/m, "$outbox: the next fetch gets the event");

	# A plain INSERT rings too.  (The first fetch may get the event above
	# again: its 1 ms lease has run out.  A fetch that hands out the rest
	# of an earlier batch makes the next wait return at once, so the page
	# is acknowledged and a last, empty fetch reads the bell.)
	relay_run(qq{SELECT count(eo_relay_ack('$outbox', 'g', t))
FROM (SELECT DISTINCT lease_token t FROM eo_relay_fetch('$outbox', 'g', 1000, '1 minute')) x;
SELECT 'fetched=' || count(*) FROM eo_relay_fetch('$outbox', 'g', 1000, '1 minute');});
	like($relay{out}, qr/^fetched=0$/m, "$outbox: caught up before the wait");
	$relay{out} = '';
	$m = relay_start(qq{SELECT 'woke=' || eo_relay_wait('$outbox', '60 s');});
	ok(relay_waits_for($m, 0.5), "$outbox: the relay sleeps again");
	$node->safe_psql('postgres',
		qq{INSERT INTO $outbox (aggregatetype, aggregateid, type) VALUES ('order', '2', 'Paid');});
	wait_returned($m, "$outbox: committed INSERT");
	like($relay{out}, qr/^woke=true$/m, "$outbox: a plain INSERT woke the relay");

	# Committed between the fetch and the wait: no sleep at all.
	relay_run(qq{SELECT 'fetched=' || count(*) FROM eo_relay_fetch('$outbox', 'g', 1000, '1 ms');});
	$node->safe_psql('postgres',
		qq{SELECT eo_emit('$outbox', 'order', '3', 'Shipped', '{}');});
	$relay{out} = '';
	$t0 = time;
	relay_run(qq{SELECT 'woke=' || eo_relay_wait('$outbox', '60 s');});
	like($relay{out}, qr/^woke=true$/m,
		"$outbox: an event committed after the fetch's snapshot: the wait returns at once");
	cmp_ok(time - $t0, '<', 30, "$outbox: ... without sleeping");
}

$relay{in} .= "\\q\n";
$relay{h}->finish;
$node->stop;
done_testing();
