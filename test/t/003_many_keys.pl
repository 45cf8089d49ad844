# Copyright: eo authors.  See README.
#
# A batch consumer claims 100,000 keys in one transaction with default
# server settings, with and without shared_preload_libraries = 'eo'.
# After COMMIT every key is a duplicate and done.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(time);

my $nkeys = 100_000;

sub many_keys
{
	my ($node, $label) = @_;

	my $t0 = time;
	is( $node->safe_psql(
			'postgres', qq{
BEGIN;
SELECT count(*) FROM generate_series(1, $nkeys) g,
       LATERAL eo_claim('bulk:' || g) c
WHERE c.status = 'claimed';
COMMIT;}),
		$nkeys,
		"$label: one transaction claimed $nkeys distinct keys");
	note sprintf("%s: claiming %d keys took %.1f s", $label, $nkeys, time - $t0);

	$t0 = time;
	is( $node->safe_psql(
			'postgres', qq{
SELECT count(*) FROM generate_series(1, $nkeys) g,
       LATERAL eo_claim('bulk:' || g) c
WHERE c.status = 'duplicate' AND c.result IS NULL AND c.attempts = 1}),
		$nkeys,
		"$label: all $nkeys keys are duplicates after COMMIT");
	note sprintf("%s: re-claiming %d keys took %.1f s", $label, $nkeys, time - $t0);

	# A sample across the whole range, both ends included.
	is( $node->safe_psql(
			'postgres', qq{
SELECT count(*), string_agg(DISTINCT s.state, ','),
       bool_and(s.result IS NULL AND s.attempts = 1 AND s.lease_token IS NULL
                AND s.lease_expires_at IS NULL)
FROM (SELECT g FROM generate_series(1, $nkeys, 997) g
      UNION SELECT $nkeys) keys,
     LATERAL eo_status('bulk:' || keys.g) s}),
		'102|done|t',
		"$label: eo_status of a sample of the keys: done, no result, one attempt");
	is( $node->safe_psql(
			'postgres',
			qq{SELECT count(*) FROM eo_status('bulk:' || ($nkeys + 1))}),
		'0',
		"$label: a key outside the batch is unknown");
	return;
}

# With the preload.
my $node = EoTest::eo_node('many_keys');
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'eo', 'node with eo preloaded');
many_keys($node, 'preloaded');
$node->stop;

# Without the preload: the library is loaded on first use.
my $plain = EoTest::eo_node('many_keys_no_preload', preload => 0);
is($plain->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'', 'node without shared_preload_libraries');
many_keys($plain, 'not preloaded');
$plain->stop;

done_testing();
