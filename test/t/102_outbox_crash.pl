# Copyright: eo authors.  See README.
#
# The relay under crashes: every committed event is delivered at least
# once, and no event of a rolled-back transaction ever is.
#
# 1. A relay fetches a page and is killed (SIGKILL, so the server goes
#    through crash recovery) before acknowledging it: the page's lease
#    survives the crash, expires, and another relay gets the same events.
# 2. Producers and a relay run, and the server is stopped with
#    stop('immediate') in the middle; after recovery a relay drains the
#    group.
# The relay writes what it receives to a sink table in the transaction of
# the fetch and acknowledges in the next one, so a crash between the two
# shows up as a duplicate in the sink, never as a gap.  Ground truth for
# "committed" is the outbox table after recovery.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(usleep);

my $node = EoTest::eo_node('outbox_crash', conf => "restart_after_crash = on", eo_in => []);
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('crashbox', slots => 4);
SELECT eo_group_create('crashbox', 'g');
CREATE TABLE sink (id uuid NOT NULL, token bigint NOT NULL, relay text NOT NULL);

-- i-th producer transaction: 1 to 3 events; every fifth one rolls back.
CREATE PROCEDURE produce(first int, n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN first .. first + n - 1 LOOP
        PERFORM eo_emit('crashbox', 'order', 'a' || (i % 50), 'Step',
                        jsonb_build_object('i', i, 'k', k))
        FROM generate_series(1, 1 + i % 3) k;
        IF i % 5 = 0 THEN ROLLBACK; ELSE COMMIT; END IF;
    END LOOP;
END $$;

-- One relay step: fetch a page into the sink (one transaction), then
-- acknowledge it (the next).  Returns the number of events fetched.
CREATE PROCEDURE relay_step(name text, INOUT got int) LANGUAGE plpgsql AS $$
DECLARE
    t bigint;
BEGIN
    WITH f AS (INSERT INTO sink SELECT id, lease_token, name
               FROM eo_relay_fetch('crashbox', 'g', 37, '2 seconds')
               RETURNING token)
    SELECT max(token), count(*) INTO t, got FROM f;
    COMMIT;
    IF t IS NOT NULL THEN
        BEGIN
            PERFORM eo_relay_ack('crashbox', 'g', t);
        EXCEPTION WHEN object_in_use THEN
            NULL;   -- stale: the page went to another relay meanwhile
        END;
        COMMIT;
    END IF;
END $$;

-- A relay that never stops.
CREATE PROCEDURE relay_forever(name text) LANGUAGE plpgsql AS $$
DECLARE
    got int;
BEGIN
    LOOP
        CALL relay_step(name, got);
        IF got = 0 THEN PERFORM pg_sleep(0.01); END IF;
    END LOOP;
END $$;

-- Drain until the group has no backlog and holds no lease.
CREATE PROCEDURE drain(name text) LANGUAGE plpgsql AS $$
DECLARE
    got int;
BEGIN
    LOOP
        CALL relay_step(name, got);
        EXIT WHEN got = 0 AND (SELECT backlog = 0 AND leased_slots = 0
                               FROM eo_outbox_status);
        IF got = 0 THEN PERFORM pg_sleep(0.05); END IF;
    END LOOP;
END $$;});

# What the sink says about the outbox.
sub check_delivery
{
	my ($what) = @_;
	my ($events, $missing, $foreign, $rolled_back) = split /\|/,
	  $node->safe_psql(
		'postgres', q{
SELECT (SELECT count(*) FROM crashbox),
       (SELECT count(*) FROM crashbox e WHERE NOT EXISTS
            (SELECT FROM sink s WHERE s.id = e.id)),
       (SELECT count(*) FROM sink s WHERE NOT EXISTS
            (SELECT FROM crashbox e WHERE e.id = s.id)),
       (SELECT count(*) FROM crashbox WHERE (payload->>'i')::int % 5 = 0)});
	ok($events > 0, "$what: $events committed events in the outbox");
	is($missing, 0, "$what: every committed event was delivered");
	is($foreign, 0, "$what: nothing delivered that is not a committed event");
	is($rolled_back, 0, "$what: no event of a rolled-back transaction exists");
}

# ---- 1. a relay killed between fetch and acknowledgement ----

$node->safe_psql('postgres', 'CALL produce(1, 200)');

my ($in, $out, $err) = ('', '', '');
my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
my $victim = IPC::Run::start(
	[ 'psql', '-XAtq', '-f', '-', '-d', $node->connstr('postgres') ],
	'<', \$in, '>', \$out, '2>', \$err, $timeout);
$in .= q{
SELECT 'pid=' || pg_backend_pid();
INSERT INTO sink SELECT id, lease_token, 'victim'
FROM eo_relay_fetch('crashbox', 'g', 37, '2 seconds');
SELECT 'fetched';
SELECT pg_sleep(600);
};
ok(pump_until($victim, $timeout, \$out, qr/^fetched$/m),
	'victim relay fetched a page')
  or diag("stdout: $out\nstderr: $err");
my ($pid) = $out =~ /^pid=(\d+)$/m;
my $victim_events =
  $node->safe_psql('postgres', q{SELECT count(*) FROM sink WHERE relay = 'victim'});
ok($victim_events > 0, "victim holds $victim_events events under a lease");

my $log_offset = -s $node->logfile;
is(kill('KILL', $pid), 1, 'victim relay killed with SIGKILL before its ack');
$victim->finish;
ok($node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset),
	'server went through crash recovery');
ok($node->poll_query_until('postgres', 'SELECT 1', '1'), 'server is back');

is( $node->safe_psql('postgres', 'SELECT leased_slots FROM eo_outbox_status'),
	'1', "the victim's lease survived the crash");
$node->safe_psql('postgres', q{CALL drain('after-kill')});
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM sink v WHERE v.relay = 'victim' AND NOT EXISTS
    (SELECT FROM sink s WHERE s.id = v.id AND s.relay = 'after-kill')}),
	'0', "every event of the victim's page was delivered again");
check_delivery('after a killed relay');

# ---- 2. stop('immediate') under load ----

my @bg;
for my $p (0 .. 1)
{
	my $first = 1000 + $p * 100000;
	push @bg,
	  IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'),
		  '-c', "CALL produce($first, 100000)" ],
		'>', \my $o1, '2>', \my $e1, IPC::Run::timeout(600));
}
push @bg,
  IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres'),
	  '-c', q{CALL relay_forever('under-load')} ],
	'>', \my $o2, '2>', \my $e2, IPC::Run::timeout(600));

# Let them work until the relay has delivered a good part of the load.
my $before = $node->safe_psql('postgres', 'SELECT count(*) FROM sink');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) > $before + 3000 FROM sink WHERE relay = 'under-load'"),
	'producers and relay are running');
$node->stop('immediate');
$_->finish for @bg;
$node->start;

my $backlog = $node->safe_psql('postgres', 'SELECT backlog FROM eo_outbox_status');
note("backlog after recovery: $backlog");
$node->safe_psql('postgres', q{CALL drain('after-crash')});
check_delivery('after stop(immediate) under load');
my ($deliveries, $distinct) = split /\|/,
  $node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT id) FROM sink');
note("$deliveries deliveries of $distinct events");
cmp_ok($deliveries, '>=', $distinct, 'at least once (duplicates allowed)');

$node->stop;
done_testing();
