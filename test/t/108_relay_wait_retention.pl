# Copyright: eo authors.  See README.
#
# A relay asleep in eo_relay_wait holds no lock on its outbox, so retention
# can drop the outbox's expired partitions meanwhile (issue 35, item 3:
# the wait held ACCESS SHARE on the outbox table for its whole sleep, and
# eo_outbox_maintain, which waits at most 100 ms for the drop's ACCESS
# EXCLUSIVE, said "busy" for as long as a relay looped on it).  Each of
# the wait's sleeps is tried, each with an old, empty partition to drop:
# - eo_relay_wait(outbox, timeout), asleep on the doorbell;
# - with a group, asleep until a lease of the group can be taken over;
# - with a group and a linger, lingering after the bell rang;
# and each time the doorbell still wakes it (the first two), or a cancel
# ends it and leaves the session usable (the third).  A commit between
# the relay's look and its sleep still ends the wait at once.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Time::HiRes qw(usleep time);
use Test::More;
use lib 'test/perl';
use EoTest;

my $node = EoTest::eo_node('relay_wait_retention', conf => "eo.naptime = 3600", eo_in => []);
$node->safe_psql('postgres', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('o', slots => 1, premake => 1, retention => '1 day');
SELECT eo_group_create('o', 'g');
-- fetch and acknowledge until nothing is left (the last fetch empty)
CREATE FUNCTION drain() RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    n int;
    total int := 0;
BEGIN
    LOOP
        SELECT eo_relay_ack_pages('o', 'g', coalesce(array_agg(DISTINCT lease_token), '{}'))
        INTO n FROM eo_relay_fetch('o', 'g', 100, '1 hour');
        EXIT WHEN n = 0;
        total := total + n;
    END LOOP;
    RETURN total;
END $$;
});

my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);

# The relay: psql kept open, fed line by line.
my %relay = (in => '', out => '', err => '');
$relay{h} = IPC::Run::start(
	[ 'psql', '-XAtq', '-f', '-', '-d', $node->connstr('postgres') ],
	'<', \$relay{in}, '>', \$relay{out}, '2>', \$relay{err}, $timeout);

my $mark = 0;

# Run `$sql` in the relay session and wait until it is done.
sub relay_run
{
	my ($sql) = @_;
	$mark++;
	$relay{in} .= "$sql\nSELECT 'done-$mark';\n";
	ok(pump_until($relay{h}, $timeout, \$relay{out}, qr/^done-$mark$/m),
		"relay step $mark finished")
	  or diag("stdout: $relay{out}\nstderr: $relay{err}");
}

# Start `$sql` in the relay session; return once its backend is asleep in
# it (active, waiting on an extension's wait event).
sub relay_sleep_in
{
	my ($sql) = @_;
	$mark++;
	$relay{in} .= "$sql\nSELECT 'done-$mark';\n";
	my $asleep = 0;
	my $end = time + $PostgreSQL::Test::Utils::timeout_default;
	while (!$asleep && time < $end)
	{
		$relay{h}->pump_nb;		# psql reads its input only while pumped
		$asleep = $node->safe_psql('postgres', q{
SELECT EXISTS (SELECT FROM pg_stat_activity
               WHERE query LIKE '%eo_relay_wait%' AND pid <> pg_backend_pid()
               AND state = 'active' AND wait_event_type = 'Extension')}) eq 't';
		usleep(50_000) unless $asleep;
	}
	ok($asleep, "the relay sleeps in: $sql")
	  or diag("stdout: $relay{out}\nstderr: $relay{err}");
	return $mark;
}

sub relay_returned
{
	my ($m, $what) = @_;
	ok(pump_until($relay{h}, $timeout, \$relay{out}, qr/^done-$m$/m), "$what: the wait returned")
	  or diag("stdout: $relay{out}\nstderr: $relay{err}");
}

my $relay_pid;
relay_run(q{SELECT 'pid=' || pg_backend_pid();});
($relay_pid) = $relay{out} =~ /^pid=(\d+)$/m;

# An empty partition of 2020 + $n days, past the outbox's retention.
sub old_partition
{
	my ($n) = @_;
	$node->safe_psql('postgres', qq{
CREATE TABLE eo_internal.o_old$n PARTITION OF o
    FOR VALUES FROM ('2020-01-01 00:00+00'::timestamptz + $n * interval '1 day')
    TO ('2020-01-01 00:00+00'::timestamptz + ($n + 1) * interval '1 day');});
}

# What the asleep relay holds on the outbox, its partitions and eo's
# tables; then one retention pass, and what it did to partition o_old$n.
sub retention_while_asleep
{
	my ($n, $what) = @_;
	my $held = $node->safe_psql('postgres', qq{
SELECT coalesce(string_agg(l.relation::regclass::text || ' ' || l.mode, ', '), 'nothing')
FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = $relay_pid
  AND (c.relnamespace = 'eo_internal'::regnamespace OR c.oid = 'o'::regclass)});
	is($held, 'nothing', "$what: the sleeping relay holds no lock on the outbox or eo's tables");
	my $done = $node->safe_psql('postgres', qq{
SELECT coalesce(string_agg(action, ','), 'none') FROM eo_outbox_maintain()
WHERE partition = 'eo_internal.o_old$n'});
	is($done, 'dropped', "$what: retention dropped the expired partition meanwhile");
	is($node->safe_psql('postgres',
			qq{SELECT count(*) FROM pg_class WHERE relname = 'o_old$n'}),
		'0', "$what: ... and it is gone");
	is($node->safe_psql('postgres', qq{
SELECT state || ' ' || wait_event_type FROM pg_stat_activity WHERE pid = $relay_pid}),
		'active Extension', "$what: ... while the relay still sleeps");
}

sub emit
{
	my ($id) = @_;
	$node->safe_psql('postgres', qq{SELECT eo_emit('o', 'order', '$id', 'E', '{}');});
}

# Each partition is made before the relay's last fetch: a change of the
# outbox table makes the next wait answer "fetch now" (the entry eo
# caches, with what the last fetch left, is read again).

# 1. eo_relay_wait(outbox, timeout), asleep on the doorbell.
old_partition(1);
relay_run(q{SELECT 'fetched=' || count(*) FROM eo_relay_fetch('o', 'g');});
like($relay{out}, qr/^fetched=0$/m, 'caught up before the first wait');
$relay{out} = '';
my $m = relay_sleep_in(q{SELECT 'woke=' || eo_relay_wait('o', '1 hour');});
retention_while_asleep(1, 'asleep on the doorbell');
emit('a');
relay_returned($m, 'a commit');
like($relay{out}, qr/^woke=true$/m, 'the commit still rang the doorbell: true');

# 2. With the group, asleep until another relay's lease can be taken over.
my $token = $node->safe_psql('postgres',
	q{SELECT max(lease_token) FROM eo_relay_fetch('o', 'g', 100, '1 hour')});
ok($token > 0, 'another relay leased the page for an hour');
old_partition(2);
relay_run(q{SELECT 'fetched=' || count(*) FROM eo_relay_fetch('o', 'g', 100, '1 hour');});
like($relay{out}, qr/^fetched=0$/m, 'the rest of the group is leased elsewhere');
$relay{out} = '';
$m = relay_sleep_in(q{SELECT 'woke=' || eo_relay_wait('o', '1 hour', 'g', '0');});
retention_while_asleep(2, 'asleep until a lease can be taken over');
$node->safe_psql('postgres', qq{SELECT eo_relay_release('o', 'g', $token);});
emit('b');
relay_returned($m, 'a commit');
like($relay{out}, qr/^woke=true$/m, 'the commit rang: true');
$relay{out} = '';
relay_run(q{SELECT 'drained=' || drain();});
like($relay{out}, qr/^drained=2$/m, 'the relay got the released page and the new event');

# 3. Lingering after the bell rang; a cancel ends it, the session goes on.
old_partition(3);
relay_run(q{SELECT 'fetched=' || count(*) FROM eo_relay_fetch('o', 'g');});
$relay{out} = '';
$m = relay_sleep_in(q{SELECT 'woke=' || eo_relay_wait('o', '1 hour', 'g', '1 minute');});
emit('e');
usleep(500_000);
$relay{h}->pump_nb;
ok($relay{out} !~ /done-$m/, 'the bell rang: the relay lingers');
retention_while_asleep(3, 'lingering');
$node->safe_psql('postgres', qq{SELECT pg_cancel_backend($relay_pid);});
relay_returned($m, 'a cancel');
like($relay{err}, qr/canceling statement due to user request/, 'the cancel ended the linger');
$relay{out} = '';
relay_run(q{SELECT 'fetched=' || count(*) FROM eo_relay_fetch('o', 'g', 100, '1 hour');});
like($relay{out}, qr/^fetched=1$/m, 'the session fetches after the cancel');

# An event committed after the fetch, before the wait looks: no sleep.
relay_run(q{SELECT drain();});
emit('f');
$relay{out} = '';
my $t0 = time;
relay_run(q{SELECT 'woke=' || eo_relay_wait('o', '1 hour', 'g', '0');});
like($relay{out}, qr/^woke=true$/m, 'committed before the wait: true at once');
cmp_ok(time - $t0, '<', 60, '... without sleeping');

$relay{in} .= "\\q\n";
$relay{h}->finish;
$node->stop;
done_testing();
