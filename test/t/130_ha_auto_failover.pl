# Copyright: eo authors.  See README.
#
# Failover under a real HA manager (issue 36, item 4): pg_auto_failover,
# a monitor and two nodes on this machine, each run by `pg_autoctl run`;
# eo preloaded on both (eo.naptime = 1 s), CREATE EXTENSION on the
# primary (replicated).  Why pg_auto_failover rather than Patroni: Debian
# packages it for every major eo is tested on (15 on bookworm: 2.0; 17 on
# trixie and 18 on sid: 2.2), it needs no third service (Patroni needs
# etcd, another daemon and cluster to start and keep healthy here), and its
# monitor is a PostgreSQL database whose state a test reads with SQL.
#
# Under load, all the time (each client a psql loop through a multi-host
# connection string with target_session_attrs=read-write, as an
# application finds the primary; what each statement returned is recorded,
# so the test knows which commits a client saw):
# - claims in transaction mode on two sessions, each with a business change
#   and an event (eo_emit) in its transaction;
# - lease-mode claims (lease 2 s), two in three completed with their
#   token, one in three left open; every token seen recorded;
# - a relay of a third consumer group (eo_relay_fetch + eo_relay_ack_pages),
#   its page tokens recorded;
# - `eo_nats forward` of the outbox's groups plain and safe to a real
#   nats-server (streams PLAIN and SAFE), and `eo_nats apply` of each
#   stream into a table of a second database of the same formation (no
#   unique constraint: an event applied twice is two rows); all four with
#   --pg naming both nodes, target_session_attrs=read-write.
# Group safe waits for the standbys (eo_group_set_standby_slots, naming
# pg_auto_failover's replication slots on the primary); group plain does
# not.
#
# Four failovers: synchronous replication (pg_auto_failover's default, the
# standby in the replication quorum), then asynchronous (replication-quorum
# false on both nodes: synchronous_standby_names is empty); in each mode,
# one `pg_autoctl perform failover`, one forced: the primary's WAL sender
# held (SIGSTOP) for 1.5 s, then its pg_autoctl and its postmaster killed
# with SIGKILL (a machine dying; with its pg_autoctl alive, pg_autoctl
# only restarts the postmaster: no failover), and pg_autoctl run again on
# it once the other node is primary.  After each, on the new primary, with
# the load paused and both groups and both streams drained:
# - nothing applied twice downstream (per event id, in each stream's table);
# - no ghost event: every message in stream SAFE has its event in the new
#   primary's outbox (synchronous: in both streams);
# - every lease and relay token issued by the new primary is greater than
#   every token the load saw before it, and the holder of a lease claim
#   lost with the old primary is refused (55006);
# - the lease-mode keys left open at the failover are reclaimed by the new
#   primary's worker within 2 x eo.naptime (+ 1 s) of the later of their
#   expiry and the new primary taking writes (pg_auto_failover keeps it
#   read-only a while after the promotion; eo's worker waits for that);
# - eo's launcher runs on the new primary, no eo process on the standby;
#   eo_nats forward and apply went on there by themselves;
# - every event of the new primary's outbox is in both streams;
#   synchronous: no acknowledged claim lost, every message applied.
# Figures (failover times, reclaim delays, what asynchronous replication
# lost, ghosts, pages published again) are printed at the end.
#
# pg_auto_failover's monitor is tuned to act in seconds (health checks
# every second, a node unhealthy after 4 s, a demote timeout of 4 s: its
# defaults are 5 s, 20 s and 30 s); the order of its steps is its own.
# About 70 s on a 2-core machine.

use strict;
use warnings;

use POSIX ();
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoAutoFailover;
use EoNats;
use Time::HiRes qw(time usleep);

EoAutoFailover::require_pg_autoctl();
EoNats::require_nats();

my $NAPTIME     = 1;      # eo.naptime on both nodes, seconds
my $LEASE       = 2;      # the lease loader's lease, seconds
my $SLACK       = 1;      # see the reclaim check
my $test_start  = time;
my (@children, $nats);    # stopped at END, before the formation

# ---- the formation -------------------------------------------------------

my $f = EoAutoFailover->new(monitor_conf => q{
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 2000
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 4000
pgautofailover.primary_demote_timeout = 4000
});
my $dir = $f->dir;
$f->add_node('node1', conf => qq{
shared_preload_libraries = 'pg_stat_statements,eo'
eo.naptime = $NAPTIME
max_worker_processes = 16
});
$f->add_node('node2');
ok($f->wait_states({ node1 => 'primary', node2 => 'secondary' }, 60),
	'pg_auto_failover: node1 primary, node2 its standby')
  or diag($f->show_state);

$f->safe_psql('node1', 'postgres', "CREATE DATABASE shop;\nCREATE DATABASE inbox;");
$f->safe_psql('node1', 'shop', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('ev') IS NOT NULL;
SELECT eo_group_create('ev', g) FROM unnest('{plain,safe,probe}'::text[]) g;
CREATE TABLE accounts (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
INSERT INTO accounts (id) SELECT generate_series(0, 9);
-- one delivery of a message: its key, its change and its event together
CREATE FUNCTION ha_tx(k text, a int) RETURNS uuid LANGUAGE plpgsql AS $$
BEGIN
  IF (SELECT status FROM eo_claim(k)) <> 'claimed' THEN
    RETURN NULL;
  END IF;
  UPDATE accounts SET n = n + 1 WHERE id = a;
  RETURN eo_emit('ev', 'acct', a::text, 'Tx', jsonb_build_object('key', k));
END $$;
-- a lease holder completing its work: the SQLSTATE if refused
CREATE FUNCTION ha_try_complete(k text, t bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  PERFORM eo_complete(k, '{"late": true}', lease_token => t);
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;
END $$;
});
$f->safe_psql('node1', 'inbox', q{
CREATE EXTENSION eo;
SELECT eo_scope_create('plain');
SELECT eo_scope_create('safe');
-- no unique constraint: an event applied twice is two rows
CREATE TABLE applied (stream text NOT NULL, id uuid NOT NULL, subject text,
                      at timestamptz NOT NULL DEFAULT clock_timestamp());
});
like($f->safe_psql('node1', 'postgres', q{
SELECT current_setting('synchronous_standby_names') || ' ' || string_agg(sync_state, ',')
FROM pg_stat_replication}), qr/^ANY 1 \(pgautofailover_standby_2\) (quorum|sync)$/,
	'synchronous: the primary waits for its standby');

# The operator's step at the start and after each promotion: group safe
# waits for the standbys of pg_auto_failover's replication slots on the
# primary (eo_group_set_standby_slots, item 2).  A slot that does not
# exist holds the group back, and a node has no slot for itself: so the
# list names the slots the current primary has (pg_auto_failover keeps one
# on each standby for every other node, so the promoted node has its
# standby's from the start).
sub set_standby_slots
{
	my ($node) = @_;
	$f->safe_psql($node, 'shop', q{
SELECT eo_group_set_standby_slots('ev', 'safe', array_agg(slot_name ORDER BY slot_name))
FROM pg_replication_slots
WHERE slot_type = 'physical' AND slot_name LIKE 'pgautofailover_standby_%'});
}
set_standby_slots('node1');

# ---- nats-server, eo_nats forward and apply ----------------------------

$nats = EoNats->new(name => 'ha');
for my $g ('plain', 'safe')
{
	my ($rc) = $nats->run('admin.log', 'stream-add', @{ $nats->nats }, '--stream', uc $g,
		'--subjects', "$g.>");
	is($rc, 0, "stream \U$g\E made");
}
for my $g ('plain', 'safe')
{
	push @children, $nats->spawn("forward-$g.log", {}, @{ $nats->nats }, '--pg', $f->connstr('shop'),
		'forward', '--outbox', 'ev', '--group', $g, '--stream', uc $g, '--subject', "$g.{aggregatetype}",
		'--lease', '3', '--max-events', '200', '--verbose');
	push @children, $nats->spawn("apply-$g.log", {}, @{ $nats->nats }, '--pg', $f->connstr('inbox'),
		'apply', '--stream', uc $g, '--durable', $g, '--scope', $g, '--ack-wait', '2000',
		'--sql', "INSERT INTO public.applied (stream, id, subject) VALUES ('$g', \$1::uuid, \$2)");
}
for my $log (map { ("forward-$_.log", "apply-$_.log") } 'plain', 'safe')
{
	$nats->wait_log($log, qr/connected to PostgreSQL/, 30) or die "$log: " . $nats->log($log);
}

# ---- the load ------------------------------------------------------------

# A loader: a child that runs psql on batches of `make`'s statements
# through the multi-host connection string until told to stop, and starts
# psql again when it lost its server (exit 2) or found no primary.  What a
# statement returned is in $dir/$name.out, a line each (psql -A -t).
my %loader;
sub loader
{
	my ($name, $db, $batch, $make) = @_;
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		eval {
			open STDOUT, '>>', "$dir/$name.out" or die;
			open STDERR, '>>', "$dir/$name.err" or die;
			my $n = 0;
			while (!-e "$dir/stop" && getppid() != 1)
			{
				if (-e "$dir/pause")
				{
					open my $p, '>', "$dir/$name.paused";
					close $p;
					usleep(50_000);
					next;
				}
				open my $sql, '>', "$dir/$name.sql" or die;
				print $sql $make->($n++) for 1 .. $batch;
				close $sql;
				my $rc = system('psql', '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=0', '-d',
					$f->connstr($db), '-f', "$dir/$name.sql");
				usleep(200_000) if $rc != 0;
			}
		};
		POSIX::_exit(0);
	}
	$loader{$name} = $pid;
	push @children, $pid;
	return $pid;
}

# Transaction mode, two sessions: claim, change, event, one transaction;
# 'T|port|key|event id|epoch'.
my @TX = ('tx1', 'tx2');
for my $tx (@TX)
{
	loader($tx, 'shop', 20, sub {
		my ($n) = @_;
		return qq{SELECT 'T', inet_server_port(), '$tx-$n', ha_tx('$tx-$n', $n % 10), extract(epoch FROM clock_timestamp());
SELECT pg_sleep(0.03) \\g /dev/null
};
	});
}
# Lease mode: 'L|port|key|token|expiry', and 'C|key' once completed.
loader('lease', 'shop', 10, sub {
	my ($n) = @_;
	my $complete = $n % 3
	  ? qq{SELECT 'C', 'ls-$n' FROM eo_complete('ls-$n', '{"ok": true}', lease_token => :t);\n}
	  : '';
	return qq{SELECT inet_server_port() AS p, lease_token AS t, extract(epoch FROM lease_expires_at) AS x
FROM eo_claim('ls-$n', lease => '$LEASE s') \\gset
\\if :ERROR
\\else
SELECT 'L', :p, 'ls-$n', :t, :x;
$complete\\endif
SELECT pg_sleep(0.1) \\g /dev/null
};
});
# A relay: 'R|port|page tokens|pages acknowledged'.
loader('probe', 'shop', 10, sub {
	return qq{SELECT 'R', inet_server_port(), string_agg(DISTINCT lease_token::text, ','),
       CASE WHEN count(*) > 0 THEN eo_relay_ack_pages('ev', 'probe', array_agg(DISTINCT lease_token)) END
FROM eo_relay_fetch('ev', 'probe', 500, '5 s', 8, false);
SELECT pg_sleep(0.3) \\g /dev/null
};
});

# The records of a loader: [fields] per line (the last line only once complete).
sub records
{
	my ($name) = @_;
	my $text = -e "$dir/$name.out" ? slurp_file("$dir/$name.out") : '';
	$text =~ s/[^\n]*\z//;
	return [ map { [ split /\|/ ] } grep { length } split /\n/, $text ];
}

sub pause_load
{
	unlink "$dir/$_.paused" for keys %loader;
	open my $p, '>', "$dir/pause" or die;
	close $p;
	my $until = time + 60;
	until (!grep { !-e "$dir/$_.paused" } keys %loader)
	{
		die 'the loaders did not pause' if time > $until;
		usleep(50_000);
	}
}

sub resume_load { unlink "$dir/pause"; }

# Wait until a transaction-mode loader has `count` records from `port`
# after its record `from`.
sub wait_records
{
	my ($port, $from, $count, $secs) = @_;
	my $until = time + $secs;
	while (time < $until)
	{
		my $r = records('tx1');
		return 1 if (grep { $_->[1] eq $port } @{$r}[ $from .. $#$r ]) >= $count;
		usleep(200_000);
	}
	return 0;
}

# ---- helpers for the checks ---------------------------------------------

sub sql_list { return "ARRAY[" . join(',', map { "'$_'" } @_) . "]::text[]"; }

# Are both groups' backlogs 0 on `node`, and has each durable acknowledged
# every message, within `secs`?
sub drained
{
	my ($node, $secs) = @_;
	my $until = time + $secs;
	while (time < $until)
	{
		my ($rc, $backlog) = $f->psql($node, 'shop', q{
SELECT coalesce(sum(backlog), 0) FROM eo_outbox_status
WHERE outbox = 'ev' AND consumer_group IN ('plain', 'safe')});
		if ($rc == 0 && $backlog eq '0')
		{
			my $pending = 0;
			for my $g ('plain', 'safe')
			{
				my ($rc2, $info) = $nats->run('admin.log', 'consumer-info', @{ $nats->nats },
					'--stream', uc $g, '--durable', $g);
				$pending++ if $rc2 != 0 || $info !~ /^pending: 0$/m || $info !~ /^ack_pending: 0$/m;
			}
			return 1 if !$pending;
		}
		usleep(300_000);
	}
	return 0;
}

# The ids in a stream: { id => copies }.
sub stream_ids
{
	my ($stream) = @_;
	my %ids;
	$ids{ EoNats::field($_, 'Nats-Msg-Id') // '?' }++ for @{ $nats->dump($stream) };
	return \%ids;
}

my (%ghosts_seen, %figures, @figure_rows);

# ---- one failover --------------------------------------------------------

sub failover_round
{
	my ($label, $mode, $how) = @_;
	my $old = $f->primary or die 'no primary: ' . $f->show_state;
	my ($new) = grep { $_ ne $old } $f->nodes;
	my ($old_port, $new_port) = ($f->port($old), $f->port($new));
	my %mark = map { $_ => scalar @{ records($_) } } keys %loader;
	my %logmark = map { $_ => length $nats->log("forward-$_.log") } 'plain', 'safe';
	my %fig = (round => $label);

	# the load runs on the primary for a while
	ok(wait_records($old_port, $mark{tx1}, 30, 60), "$label: the load commits on $old")
	  or diag(slurp_file("$dir/tx1.err"));

	like($f->safe_psql($old, 'postgres', q{
SELECT current_setting('synchronous_standby_names') <> '' AND current_setting('synchronous_commit') = 'on',
       string_agg(sync_state, ',') FROM pg_stat_replication}),
		$mode eq 'sync' ? qr/^t\|(quorum|sync)$/ : qr/^f\|async$/, "$label: replication is $mode at the failover");

	my ($t0, $perform);
	if ($how eq 'kill')
	{
		# The standby gets nothing of the primary's last 1.5 s: its WAL
		# sender is stopped (asynchronous: the primary commits on; synchronous:
		# its commits wait for the standby).
		my $walsender = $f->safe_psql($old, 'postgres', q{SELECT pid FROM pg_stat_replication});
		kill 'STOP', $walsender;
		usleep(1_500_000);
		$t0 = $f->kill_node($old);
	}
	else
	{
		$t0 = time;
		$perform = $f->autoctl_start('failover.log', 'perform', 'failover', '--pgdata',
			$f->pgdata('monitor'), '--wait', '60');
	}

	# the new primary: out of recovery, then writable (pg_auto_failover
	# keeps a promoted node read-only until the old primary is known gone)
	my $until = time + 90;
	my ($promoted, $rw);
	while (time < $until)
	{
		my ($rc, $out) = $f->psql($new, 'postgres',
			q{SELECT NOT pg_is_in_recovery(), current_setting('transaction_read_only') = 'off'},
			timeout => 5);
		$promoted //= time if $rc == 0 && $out =~ /^t\|/;
		if ($rc == 0 && $out eq 't|t')
		{
			$rw = time;
			last;
		}
		usleep(100_000);
	}
	ok(defined $rw, "$label: $new is promoted and takes writes") or diag($f->show_state);
	ok($f->autoctl_finish($perform), "$label: pg_autoctl perform failover succeeds")
	  or diag($f->log('failover.log'))
	  if $perform;
	$fig{promoted} = defined $promoted ? $promoted - $t0 : undef;
	$fig{rw} = defined $rw ? $rw - $t0 : undef;

	# the old node comes back as a standby
	$f->run_node($old) if $how eq 'kill';
	ok($f->wait_states({ $new => 'primary', $old => 'secondary' }, 90),
		"$label: pg_auto_failover has $new primary, $old its standby again")
	  or diag($f->show_state . $f->log("$old.log"));
	$fig{rejoined} = time - $t0;
	set_standby_slots($new);

	# ---- leases open at the failover: reclaimed by the new primary's worker
	# The promotion: the start of the new primary's eo launcher (it starts
	# when recovery ends), or when the test saw it out of recovery, if that
	# was earlier (the launcher may start late: that counts against eo).
	my $launcher = $f->safe_psql($new, 'postgres', q{
SELECT extract(epoch FROM min(backend_start)) FROM pg_stat_activity WHERE backend_type = 'eo launcher'});
	$fig{launcher_after} = $launcher && $promoted ? $launcher - $promoted : undef;
	$launcher = $promoted if $promoted && (!$launcher || $promoted < $launcher);
	# pg_auto_failover keeps the promoted node read-only (its configuration's
	# default_transaction_read_only) until it knows the old primary is gone,
	# and eo's worker runs no pass meanwhile: the bound counts from when the
	# node took writes.
	$launcher = $rw if $rw && $launcher && $rw > $launcher;
	my $lrec = records('lease');
	my (%expiry, %token, %completed);
	for my $r (@{$lrec}[ $mark{lease} .. $#$lrec ])
	{
		($expiry{ $r->[2] }, $token{ $r->[2] }) = @{$r}[ 4, 3 ] if $r->[0] eq 'L' && $r->[1] eq $old_port;
		$completed{ $r->[1] } = 1 if $r->[0] eq 'C';
	}
	my @open = grep { !$completed{$_} } sort keys %expiry;
	my $bound = 2 * $NAPTIME + $SLACK;
	my %status;
	# (until none is processing, or a bound past the last of them)
	my $latest = (sort { $b <=> $a } map { $expiry{$_} } @open)[0] // 0;
	$latest = $launcher if $launcher && $launcher > $latest;
	$until = $latest + $bound + 5;
	while (@open)
	{
		%status = map { my @c = split /\|/; ($c[0] => [ @c[ 1 .. 3 ] ]) } split /\n/,
		  $f->safe_psql($new, 'shop', 'SELECT k, s.state, s.last_error, extract(epoch FROM s.updated_at)
FROM unnest(' . sql_list(@open) . ') k, eo_status(k) s');
		last unless grep { $_->[0] eq 'processing' } values %status;
		last if time > $until;
		usleep(200_000);
	}
	my (@late, @delays);
	my $reclaimed = 0;
	for my $k (grep { $status{$_} } @open)
	{
		my ($state, $err, $at) = @{ $status{$k} };
		if ($state eq 'processing')
		{
			push @late, "$k still processing";
			next;
		}
		next unless $err eq 'lease expired' && $at >= $launcher - 0.001;    # else the old primary's
		my $delay = $at - ($expiry{$k} > $launcher ? $expiry{$k} : $launcher);
		push @delays, $delay;
		$reclaimed++;
		push @late, sprintf('%s after %.2f s', $k, $delay) if $delay > $bound;
	}
	# 2 x eo.naptime is the contract; 1 s of slack for what is not eo's pass:
	# the launcher starting a worker process for the database (a fork and a
	# connection on a loaded machine) and the pass reaching the key.
	is(join(', ', @late), '', sprintf(
		'%s: the %d leases left open at the failover are reclaimed by %s within 2 x eo.naptime + %d s'
		  . ' of their expiry or the new primary taking writes (%d by the new primary, the longest after %.2f s)',
		$label, scalar(@open), $new, $SLACK, $reclaimed, (sort { $b <=> $a } @delays)[0] // 0));
	$fig{lease_open} = scalar @open;
	$fig{lease_reclaimed_new} = $reclaimed;
	$fig{reclaim_max} = (sort { $b <=> $a } @delays)[0];
	$fig{lease_lost_open} = scalar(grep { !$status{$_} } @open);

	# let the load run on the new primary, then stop it there and drain
	ok(wait_records($new_port, $mark{tx1}, 20, 60), "$label: the load commits on $new")
	  or diag(slurp_file("$dir/tx1.err"));
	pause_load();
	ok(drained($new, 60), "$label: eo_nats forward and apply find $new and drain both groups")
	  or diag(join '', map { $nats->log($_) } map { ("forward-$_.log", "apply-$_.log") } 'plain', 'safe');

	# ---- tokens: every one from the new primary above every one seen before
	for my $t (['lease', 'L', 3], ['probe', 'R', 2])
	{
		my ($name, $tag, $col) = @$t;
		my $recs = records($name);
		my (@before, @after);
		my $switched = 0;
		for my $i (0 .. $#$recs)
		{
			my $r = $recs->[$i];
			next unless $r->[0] eq $tag && defined $r->[$col] && length $r->[$col];
			my @tokens = split /,/, $r->[$col];
			$switched = 1 if $i >= $mark{$name} && $r->[1] eq $new_port;
			push @{ $switched ? \@after : \@before }, @tokens;
		}
		my $max_before = (sort { $b <=> $a } @before)[0];
		my $min_after  = (sort { $a <=> $b } @after)[0];
		ok(@before && @after && $min_after > $max_before,
			sprintf('%s: %s tokens from %s (%d, the least %s) above every one seen before (%d, the greatest %s)',
				$label, $name eq 'lease' ? 'lease' : 'relay', $new, scalar @after, $min_after // '-',
				scalar @before, $max_before // '-'));
	}

	# ---- acknowledged commits on the old primary, on the new one
	my (%acked, @t);
	for my $tx (@TX)
	{
		my $trec = records($tx);
		$acked{ $_->[2] } = $_->[3]
		  for grep { $_->[0] eq 'T' && $_->[1] eq $old_port && length $_->[3] }
		  @{$trec}[ $mark{$tx} .. $#$trec ];
		push @t, grep { $_->[0] eq 'T' } @$trec;
	}
	@t = sort { $a->[4] <=> $b->[4] } @t;
	my $lost_tx = @{[ keys %acked ]}
	  ? $f->safe_psql($new, 'shop', 'SELECT count(*) FROM unnest(' . sql_list(keys %acked) . ') k
WHERE NOT EXISTS (SELECT 1 FROM eo_status(k) s WHERE s.state = \'done\')')
	  : 0;
	my @lost_leases = %expiry
	  ? split(/\n/, $f->safe_psql($new, 'shop', 'SELECT k FROM unnest(' . sql_list(keys %expiry) . ') k
WHERE NOT EXISTS (SELECT 1 FROM eo_status(k))'))
	  : ();
	my $lost_leases = scalar @lost_leases;
	# the holder of a lease claim lost with the old primary (open, or its
	# completion lost too) is refused by the new one, not taken for a holder
	if (@lost_leases)
	{
		is($f->safe_psql($new, 'shop', q{SELECT string_agg(DISTINCT ha_try_complete(k, t), ',') FROM (VALUES }
			  . join(',', map { "('$_', $token{$_})" } @lost_leases) . ') v(k, t)'),
			'55006', "$label: the holders of the $lost_leases lease claims lost with $old are refused by $new (55006)");
	}
	my ($first_new) = grep { $_->[1] eq $new_port && $_->[4] > $t0 } @t;
	my ($last_old) = reverse grep { $_->[1] eq $old_port && (!$first_new || $_->[4] < $first_new->[4]) } @t;
	$fig{write_gap} = $first_new && $last_old ? $first_new->[4] - $last_old->[4] : undef;
	$fig{acked_tx} = scalar keys %acked;
	$fig{lost_tx} = $lost_tx;
	$fig{acked_leases} = scalar keys %expiry;
	$fig{lost_leases} = $lost_leases;

	# ---- downstream
	my %outbox = map { $_ => 1 } split /\n/, $f->safe_psql($new, 'shop', 'SELECT id FROM ev');
	my %applied;
	for (split /\n/, $f->safe_psql($new, 'inbox', 'SELECT stream, id, count(*) FROM applied GROUP BY 1, 2'))
	{
		my ($s, $id, $c) = split /\|/;
		$applied{$s}{$id} = $c;
	}
	for my $g ('plain', 'safe')
	{
		my $ids = stream_ids(uc $g);
		my @ghosts = grep { !$outbox{$_} } keys %$ids;
		my @new_ghosts = grep { !$ghosts_seen{$g}{$_}++ } @ghosts;
		my @twice = grep { $applied{$g}{$_} > 1 } keys %{ $applied{$g} };
		my @unsent = grep { !$ids->{$_} } keys %outbox;
		my @unapplied = grep { $outbox{$_} && !$applied{$g}{$_} } keys %$ids;
		$fig{"${g}_ghosts"} = scalar @new_ghosts;
		$fig{"${g}_stream_dups"} = scalar(grep { $ids->{$_} > 1 } keys %$ids);
		$fig{"${g}_unapplied"} = scalar @unapplied;
		$fig{"${g}_messages"} = scalar keys %$ids;
		# ghosts a consumer acted on: applied on the new primary itself
		$fig{"${g}_ghosts_applied"} = scalar(grep { !$outbox{$_} } keys %{ $applied{$g} });
		# pages the forwarder published again (a lost acknowledgement, a
		# page back after its lease): JetStream dropped them by Nats-Msg-Id
		my $log = substr($nats->log("forward-$g.log"), $logmark{$g});
		$fig{"${g}_republished"} = 0;
		$fig{"${g}_republished"} += $1 while $log =~ /\((\d+) already in JetStream\)/g;

		is(scalar @twice, 0, "$label: nothing applied twice from stream \U$g\E ("
			  . scalar(keys %{ $applied{$g} }) . ' events applied)')
		  or diag("applied twice: @twice[0 .. ($#twice < 4 ? $#twice : 4)]");
		is(scalar @unsent, 0, "$label: every event of the new primary's outbox is in stream \U$g\E");
		# (group plain, asynchronous: counted, not checked; it may have ghosts)
		if ($g eq 'safe' || $mode eq 'sync')
		{
			is(scalar @new_ghosts, 0,
				"$label: no ghost in stream \U$g\E (every message's event is in ${new}'s outbox)")
			  or diag("ghosts: @new_ghosts[0 .. ($#new_ghosts < 4 ? $#new_ghosts : 4)]");
		}
		if ($mode eq 'sync')
		{
			is(scalar @unapplied, 0, "$label: every message of \U$g\E applied (synchronous)");
		}
	}
	if ($mode eq 'sync')
	{
		is("$lost_tx $lost_leases", '0 0',
			"$label: no acknowledged claim lost (synchronous; $fig{acked_tx} transaction-mode,"
			  . " $fig{acked_leases} lease-mode claims acknowledged by $old)");
	}

	# ---- eo's worker: on the new primary only
	my ($launchers_new, $on_standby) = (0, 0);
	for (1 .. 3)
	{
		$launchers_new = $f->safe_psql($new, 'postgres',
			q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'eo launcher'});
		$on_standby += $f->safe_psql($old, 'postgres', q{
SELECT count(*) FROM pg_stat_activity WHERE backend_type IN ('eo launcher', 'eo worker')
   OR application_name = 'eo_nats'});
		usleep(500_000);
	}
	is("$launchers_new $on_standby", '1 0',
		"$label: eo's launcher runs on $new, nothing of eo or eo_nats on the standby $old");
	ok(!grep({ waitpid($_, POSIX::WNOHANG()) != 0 } @children),
		"$label: eo_nats forward, apply and the loaders still run");

	push @figure_rows, \%fig;
	resume_load();
	return $new;
}

# ---- the rounds ----------------------------------------------------------

failover_round('synchronous, pg_autoctl perform failover', 'sync', 'perform');
my $primary = failover_round('synchronous, kill -9 of the primary', 'sync', 'kill');

# Asynchronous: neither node in the replication quorum.
$f->autoctl('settings.log', 'set', 'node', 'replication-quorum', 'false', '--pgdata', $f->pgdata($_))
  for $f->nodes;
my $async;
for (1 .. 100)
{
	$async = $f->safe_psql($primary, 'postgres', q{
SELECT current_setting('synchronous_standby_names') = '' AND bool_and(sync_state = 'async')
FROM pg_stat_replication});
	last if $async eq 't';
	usleep(200_000);
}
is($async, 't', 'asynchronous: replication-quorum false on both nodes, synchronous_standby_names empty')
  or diag($f->log('settings.log'));
ok($f->wait_states({ $primary => 'primary' }, 30), "... and $primary is primary again (applied the setting)")
  or diag($f->show_state);

failover_round('asynchronous, pg_autoctl perform failover', 'async', 'perform');
failover_round('asynchronous, kill -9 of the primary', 'async', 'kill');

# ---- figures -------------------------------------------------------------

sub fmt { my ($v, $f) = @_; return defined $v ? sprintf($f // '%s', $v) : '-'; }
for my $r (@figure_rows)
{
	diag(sprintf(
		"%s: promoted after %s s, writable after %s s, rejoined after %s s, the load's write gap %s s; "
		  . "eo launcher %s s after the promotion was seen; leases open %d, reclaimed by the new primary %d, "
		  . "longest %s s after expiry/writable; acknowledged and lost: %d/%d transaction-mode, %d/%d lease-mode "
		  . "(%d of them open); ghosts plain %d safe %d (applied on the new primary: %d, %d); published again (dropped by JetStream) plain %d safe %d, "
		  . "in stream twice plain %d safe %d; not applied plain %d safe %d (of %d and %d messages)",
		$r->{round}, fmt($r->{promoted}, '%.1f'), fmt($r->{rw}, '%.1f'), fmt($r->{rejoined}, '%.1f'),
		fmt($r->{write_gap}, '%.1f'), fmt($r->{launcher_after}, '%.2f'),
		$r->{lease_open}, $r->{lease_reclaimed_new}, fmt($r->{reclaim_max}, '%.2f'),
		$r->{lost_tx}, $r->{acked_tx}, $r->{lost_leases}, $r->{acked_leases}, $r->{lease_lost_open},
		$r->{plain_ghosts}, $r->{safe_ghosts}, $r->{plain_ghosts_applied}, $r->{safe_ghosts_applied},
		$r->{plain_republished}, $r->{safe_republished},
		$r->{plain_stream_dups}, $r->{safe_stream_dups},
		$r->{plain_unapplied}, $r->{safe_unapplied}, $r->{plain_messages}, $r->{safe_messages}));
}
diag(sprintf('test ran %.0f s', time - $test_start));

# ---- the end ---------------------------------------------------------------

sub stop_children
{
	open my $s, '>', "$dir/stop";
	close $s;
	# the loaders end after their batch, the others on SIGTERM
	waitpid $_, 0 for values %loader;
	my %l = map { $_ => 1 } values %loader;
	EoNats::stop_all(grep { !$l{$_} } @children);
	@children = ();
	$nats->stop if $nats;
	undef $nats;
}
stop_children();
$f->stop;
done_testing();

END
{
	my $rc = $?;
	if (@children)
	{
		kill 'KILL', @children;
		waitpid $_, 0 for @children;
	}
	$nats->stop if $nats;
	$? = $rc;
}
