# Copyright: eo authors.  See README.
#
# eo_status while the claiming transaction's COMMIT is still running: a
# client that lost its connection during a slow COMMIT asks
# eo_status what happened.  The COMMIT is made slow by a deferred
# constraint trigger that sleeps.  eo_status must not answer before the
# outcome is known:
# - a new key, claimed and completed: "done" with the result, not "no row";
# - a failed key claimed again and completed: "done", not "failed";
# - a new key whose COMMIT fails (the trigger raises after its sleep): no
#   row - but only once the transaction has ended.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(time);

my $node = EoTest::eo_node('status_in_flight', preload => 0, eo_in => []);
$node->safe_psql('postgres', q{
CREATE EXTENSION eo;
CREATE TABLE slow (fail bool);
CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(2);
    IF NEW.fail THEN RAISE EXCEPTION 'commit failed'; END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON slow
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();
BEGIN;
SELECT eo_claim('retried');
SELECT eo_fail('retried', 'first try');
COMMIT;
});

# Claims `key`, completes it, and commits slowly (failing if $fail) in a
# session of its own; returns once that COMMIT is under way.
sub slow_commit_of
{
	my ($key, $fail) = @_;
	my $in = qq{BEGIN;
SELECT status FROM eo_claim('$key');
SELECT eo_complete('$key', '{"r": 1}');
INSERT INTO slow VALUES ($fail);
SELECT 'committing';
COMMIT;
};
	my $out = '';
	my $h = IPC::Run::start([ 'psql', '-XAtq', '-f', '-', '-d', $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \my $err);
	$h->pump until $out =~ /committing/;
	# the COMMIT is now running its deferred trigger (2 s)
	$node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity WHERE query = 'COMMIT;' AND state = 'active'})
	  or die "the COMMIT did not start";
	return $h;
}

# eo_status of `key` in another session, and how long it took.
sub status_of
{
	my ($key) = @_;
	my $start = time;
	my $st = $node->safe_psql('postgres', qq{SELECT state, result FROM eo_status('$key')});
	return ($st, time - $start);
}

my $h = slow_commit_of('fresh', 'false');
my ($st, $took) = status_of('fresh');
is($st, 'done|{"r": 1}', 'a new key whose COMMIT is running: eo_status waits and says done');
cmp_ok($took, '>', 0.5, '... after waiting for the COMMIT');
$h->finish;

$h = slow_commit_of('retried', 'false');
($st, $took) = status_of('retried');
is($st, 'done|{"r": 1}', 'a failed key claimed again, COMMIT running: done, not failed');
$h->finish;

$h = slow_commit_of('doomed', 'true');
($st, $took) = status_of('doomed');
is($st, '', 'a COMMIT that fails: no row ...');
cmp_ok($took, '>', 0.5, '... said only once the transaction has ended');
$h->finish;

$node->stop;
done_testing();
