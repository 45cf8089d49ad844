# Copyright: eo authors.  See README.
#
# An error other than a lock timeout while the worker waits for a lock
# (locks.c's bounded wait: a deadlock with the holder, as a database
# owner's REINDEX DATABASE CONCURRENTLY made one, or a cancel) ends that
# pass with the error and nothing more: the pass's subtransaction is
# rolled back before the error goes on.  It used to be left open, and the
# worker died with FATAL "BeginInternalSubTransaction: unexpected state
# SUBABORT" at its next step (8 times in 10 s here before the fix).
#
# A claim left open holds the key store's registry, so every pass's
# switch waits for it (eo.partition_interval = 1 s); meanwhile the waiting
# worker is cancelled again and again.  Then the holder commits and the
# passes switch again.  A cancel (or statement timeout) is obeyed, not
# reported as one step's failure: eo_maintain() by hand ends with it.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(time usleep);

my $node = EoTest::eo_node('worker_lock_wait_error', conf => q{
eo.naptime = 1
eo.partition_interval = 1
max_worker_processes = 16
});
$node->safe_psql('postgres', q{SELECT count(*) FROM eo_claim('warm')});

my ($in, $out) = ("BEGIN;\nSELECT count(*) FROM eo_claim('held');\n\\echo __ready__\n", '');
my $holder = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
	'<', \$in, '>', \$out, '2>', \$out);
$holder->pump until $out =~ /__ready__/;

# eo_maintain() by hand obeys a statement timeout that fires while its
# switch waits (it used to turn it into a WARNING and run the other steps
# on, without a timeout).
my ($ret, $mout, $merr) = $node->psql('postgres', q{
SET eo.partition_interval = 1;
SELECT pg_sleep(1.1);
SET statement_timeout = '50ms';
SELECT * FROM eo_maintain();});
like($merr, qr/ERROR:  canceling statement due to statement timeout/,
	'eo_maintain() ends with the statement timeout');
unlike($merr, qr/WARNING/, 'not as a WARNING, with the other steps run on');

my $log_start = -s $node->logfile;
my $cancelled = 0;
my $until = time + 10;
while (time < $until)
{
	$cancelled += $node->safe_psql('postgres', q{
SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity
WHERE backend_type = 'eo worker' AND wait_event_type = 'Lock'});
	usleep(20_000);
}
$in .= "COMMIT;\n\\q\n";
$holder->finish;

my $log = slurp_file($node->logfile, $log_start);
ok($cancelled > 0, "the worker was cancelled while it waited for the lock ($cancelled times)");
like($log, qr/canceling statement due to user request/, 'the cancel ended the pass with its error');
unlike($log, qr/unexpected state|FATAL:  (?!terminating)/, 'no worker died of it');

my $gen = $node->safe_psql('postgres', q{SELECT max(gen) FROM eo_internal.eo_generations});
ok( $node->poll_query_until('postgres',
		qq{SELECT max(gen) > $gen + 1 FROM eo_internal.eo_generations}),
	'the passes switch generations again once the holder is gone');

$node->stop;
done_testing();
