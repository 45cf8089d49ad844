# Copyright: eo authors.  See README.
#
# Effectively-once end to end.  A producer database writes payments with
# eo_emit in its business transactions; a relay (the Perl loop below)
# carries them to a consumer database, which applies each one in a
# transaction that claims the event id with eo_claim; the relay then
# acknowledges the page.  Along the way relays die after fetching, after
# applying and before acknowledging, a consumer transaction is killed
# before COMMIT, and both servers are stopped with stop('immediate').  At
# the end every committed payment has been applied exactly once: balances
# match the producer's events, no event applied twice, none missing, and
# nothing of a rolled-back producer transaction.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;
use Time::HiRes qw(usleep);

my $producer = PostgreSQL::Test::Cluster->new('producer');
my $consumer = PostgreSQL::Test::Cluster->new('consumer');
for my $node ($producer, $consumer)
{
	$node->init;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'eo'");
	$node->append_conf('postgresql.conf', "restart_after_crash = on");
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION eo');
}

$producer->safe_psql(
	'postgres', q{
SELECT eo_outbox_create('payments', slots => 4);
SELECT eo_group_create('payments', 'ledger');
CREATE TABLE orders (id serial PRIMARY KEY, account text, amount int);
-- A business transaction: an order and its event, committed together;
-- every seventh batch is rolled back.
CREATE PROCEDURE sell(first int, n int) LANGUAGE plpgsql AS $$
DECLARE
    acct text;
BEGIN
    FOR i IN first .. first + n - 1 LOOP
        acct := 'acct' || (i % 13);
        INSERT INTO orders (account, amount) VALUES (acct, i);
        PERFORM eo_emit('payments', 'account', acct, 'Credited',
                        jsonb_build_object('amount', i));
        IF i % 7 = 0 THEN ROLLBACK; ELSE COMMIT; END IF;
    END LOOP;
END $$;});

$consumer->safe_psql(
	'postgres', q{
CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
CREATE TABLE applied (event_id uuid NOT NULL, account text NOT NULL, amount bigint NOT NULL);
-- The inbox: apply an event only if its id is claimed now.
CREATE FUNCTION apply_event(event uuid, acct text, amount bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    SELECT status INTO st FROM eo_claim('payments:' || event);
    IF st = 'claimed' THEN
        INSERT INTO accounts VALUES (acct, amount)
        ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + EXCLUDED.balance;
        INSERT INTO applied VALUES (event, acct, amount);
    END IF;
    RETURN st;
END $$;});

my %seen = (claimed => 0, duplicate => 0);
my %faults;

sub wait_up
{
	my ($node) = @_;
	$node->poll_query_until('postgres', 'SELECT 1', '1')
	  or die 'server did not come back';
}

# The SQL that applies a page on the consumer, in one transaction.
sub apply_sql
{
	my (@events) = @_;
	my $calls = join ",\n",
	  map { "('$_->{id}'::uuid, '$_->{acct}', $_->{amount})" } @events;
	return "SELECT apply_event(e, a, m) FROM (VALUES $calls) v(e, a, m);";
}

# Kill a consumer transaction after it applied the page, before COMMIT.
sub apply_and_kill
{
	my (@events) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $t = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-f', '-', '-d', $consumer->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err, $t);
	$in .= "BEGIN;\nSELECT 'pid=' || pg_backend_pid();\n" . apply_sql(@events)
	  . "\nSELECT 'applied';\nSELECT pg_sleep(600);\n";
	pump_until($h, $t, \$out, qr/^applied$/m) or die "consumer: $err";
	my ($pid) = $out =~ /^pid=(\d+)$/m;
	kill 'KILL', $pid;
	$h->finish;
	wait_up($consumer);
}

# Which fault strikes the n-th page a relay gets (none for the others).
my %schedule = (
	2 => 'relay died after fetch',
	4 => 'consumer transaction killed before COMMIT',
	5 => 'relay died after apply, before ack',
	7 => 'consumer stopped immediately before ack',
	9 => 'producer stopped immediately before ack',
	11 => 'relay died after fetch',
	13 => 'relay died after apply, before ack',
	16 => 'consumer transaction killed before COMMIT',
	18 => 'relay died after apply, before ack');
my $pages = 0;

# One relay step; returns the number of events it fetched.
sub relay_step
{
	my $rows = $producer->safe_psql(
		'postgres', q{
SELECT lease_token, id, aggregateid, payload->>'amount'
FROM eo_relay_fetch('payments', 'ledger', 40, '1 second') ORDER BY seq});
	return 0 if $rows eq '';
	my (@events, $token);
	for my $line (split /\n/, $rows)
	{
		my ($t, $id, $acct, $amount) = split /\|/, $line;
		$token = $t;
		push @events, { id => $id, acct => $acct, amount => $amount };
	}

	my $fault = $schedule{ ++$pages } // '';
	$faults{$fault}++ if $fault;
	# a dead relay's lease simply expires
	return scalar @events if $fault eq 'relay died after fetch';
	if ($fault eq 'consumer transaction killed before COMMIT')
	{
		apply_and_kill(@events);
		return scalar @events;
	}

	my $statuses = $consumer->safe_psql('postgres', apply_sql(@events));
	$seen{$_}++ for split /\n/, $statuses;

	return scalar @events if $fault eq 'relay died after apply, before ack';
	if ($fault eq 'consumer stopped immediately before ack')
	{
		$consumer->stop('immediate');
		$consumer->start;
		return scalar @events;
	}
	if ($fault eq 'producer stopped immediately before ack')
	{
		$producer->stop('immediate');
		$producer->start;
		return scalar @events;
	}
	my ($ret, $out, $err) = $producer->psql('postgres',
		"SELECT eo_relay_ack('payments', 'ledger', $token)");
	$faults{'stale ack refused'}++ if $err =~ /is stale/;
	return scalar @events;
}

# Producers write while the relay runs.
my $next = 1;
for my $round (1 .. 12)
{
	$producer->safe_psql('postgres', "CALL sell($next, 60)");
	$next += 60;
	relay_step() for 1 .. 3;
}
# Drain: until the group has no backlog and no lease.
for (my $i = 0;; $i++)
{
	die 'relay does not finish' if $i > 2000;
	next if relay_step() > 0;
	last
	  if $producer->safe_psql('postgres',
		'SELECT backlog = 0 AND leased_slots = 0 FROM eo_outbox_status') eq 't';
	usleep(100_000);
}
note("fault $_: $faults{$_}") for sort keys %faults;
note("claims: $seen{claimed} claimed, $seen{duplicate} duplicate");
is(scalar(keys %faults) - ($faults{'stale ack refused'} ? 1 : 0), 5,
	'every kind of fault struck');
ok($seen{duplicate} > 0, 'redelivered events reached the consumer as duplicates');

# What the producer committed, and what the consumer applied.
my $events = $producer->safe_psql('postgres',
	q{SELECT string_agg(id || ':' || aggregateid || ':' || (payload->>'amount'), ',' ORDER BY id)
	  FROM payments});
my $orders = $producer->safe_psql('postgres',
	q{SELECT count(*), sum(amount) FROM orders});
my ($n_events) = $producer->safe_psql('postgres', 'SELECT count(*) FROM payments');
is($orders, $producer->safe_psql('postgres',
		q{SELECT count(*), sum((payload->>'amount')::int) FROM payments}),
	'producer: one event per committed order');
ok($n_events > 500, "producer committed $n_events events");

is( $consumer->safe_psql('postgres',
		q{SELECT string_agg(event_id || ':' || account || ':' || amount, ',' ORDER BY event_id)
		  FROM applied}),
	$events, 'consumer applied exactly the committed events, each once');
is( $consumer->safe_psql('postgres',
		'SELECT count(*) - count(DISTINCT event_id) FROM applied'),
	'0', 'no event applied twice');
is( $consumer->safe_psql('postgres',
		q{SELECT string_agg(id || '=' || balance, ',' ORDER BY id) FROM accounts}),
	$producer->safe_psql('postgres',
		q{SELECT string_agg(aggregateid || '=' || s, ',' ORDER BY aggregateid)
		  FROM (SELECT aggregateid, sum((payload->>'amount')::bigint) s
		        FROM payments GROUP BY 1) x}),
	'balances equal the sums of the committed events');
is( $producer->safe_psql('postgres',
		q{SELECT count(*) FROM payments WHERE (payload->>'amount')::int % 7 = 0}),
	'0', 'no event of a rolled-back producer transaction');

$_->stop for ($producer, $consumer);
done_testing();
