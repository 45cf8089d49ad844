# Copyright: eo authors.  See README.
#
# Tombstones compare the bytes a key and a fingerprint have in the
# database, whatever its encoding:
# - SQL_ASCII, a key and a fingerprint with a byte that has no UTF-8 form
#   (0xff): the generation still retires, its keys are buried, and a
#   redelivery is answered 'duplicate' from the tombstone (a different
#   fingerprint is still 22000);
# - EUC_JP, two different keys whose UTF-8 forms are the same (0xa2e8 and
#   0xadfa are both U+2235): both buried in one go, each answered from its
#   own tombstone, and Bob's claim of a new key is not refused because of
#   Alice's key of the same UTF-8 form.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;

my $node = EoTest::eo_node('tombstone_encodings', preload => 0, eo_in => []);
$node->safe_psql('postgres', q{CREATE ROLE alice; CREATE ROLE bob;});

# Claims as `role`, then completes, each key given as hex bytes.
sub done_as
{
	my ($db, $enc, $role, @keys) = @_;
	for my $k (@keys)
	{
		my ($key, $fp) = @$k;
		$node->safe_psql($db, qq{
SET ROLE $role;
BEGIN;
SELECT eo_claim(convert_from(decode('$key', 'hex'), '$enc'),
                convert_from(decode('$fp', 'hex'), '$enc'));
SELECT eo_complete(convert_from(decode('$key', 'hex'), '$enc'), '{"ok": true}');
COMMIT;});
	}
}

# Switch twice and retire: the keys' generation goes, its keys are buried.
# Returns what eo_maintain printed on stderr (warnings), and 'retired'.
sub retire
{
	my ($db) = @_;
	my ($ret, $out, $err) = $node->psql($db, q{
SET eo.partition_interval = 1;
SELECT pg_sleep(1.1);
SELECT switched FROM eo_maintain();
SELECT pg_sleep(1.1);
SELECT switched FROM eo_maintain();
SET eo.retention = 1;
SELECT pg_sleep(1.1);
SELECT 'retired=' || retired FROM eo_maintain();});
	return ($err, $out =~ /retired=([0-9]+)/ ? $1 : 'none');
}

# What a claim of the key (hex) answers, as `role`, or its SQLSTATE.
sub claim_as
{
	my ($db, $enc, $role, $key, $fp) = @_;
	my ($ret, $out, $err) = $node->psql($db, qq{
\\set VERBOSITY sqlstate
SET ROLE $role;
SELECT status || ' ' || result_expired FROM eo_claim(
    convert_from(decode('$key', 'hex'), '$enc'), convert_from(decode('$fp', 'hex'), '$enc'));});
	return $ret == 0 ? $out : ($err =~ /ERROR:  (\w{5})/ ? $1 : $err);
}

for my $db ('ascii', 'eucjp')
{
	my $enc = $db eq 'ascii' ? 'SQL_ASCII' : 'EUC_JP';
	$node->safe_psql('postgres',
		"CREATE DATABASE $db ENCODING '$enc' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
	$node->safe_psql($db, q{
CREATE EXTENSION eo;
GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text), eo_complete(text, jsonb, bigint, text)
    TO alice, bob;});
	$node->safe_psql('postgres', "ALTER DATABASE $db SET eo.tombstone_retention = '90d'");
}

# ---- SQL_ASCII: bytes without a UTF-8 form ------------------------------

done_as('ascii', 'SQL_ASCII', 'alice', [ '6bff', '66ff' ], [ '706c61696e', '6670' ]);
my ($warnings, $retired) = retire('ascii');
is($warnings, '', 'SQL_ASCII: retiring keys with byte 0xff gives no warning');
cmp_ok($retired, '>', 0, '... and the generation retires');
is($node->safe_psql('ascii', 'SELECT count(*) FROM eo_internal.eo_tombstones_1'),
	'2', '... its two keys are buried');
is(claim_as('ascii', 'SQL_ASCII', 'alice', '6bff', '66ff'),
	'duplicate true', 'a redelivery of the 0xff key is a duplicate, from its tombstone');
is(claim_as('ascii', 'SQL_ASCII', 'alice', '6bff', '66fe'),
	'22000', '... with another fingerprint it is refused (22000)');
is(claim_as('ascii', 'SQL_ASCII', 'alice', '6bfe', '66ff'),
	'claimed false', '... and a key one byte away is new');

# ---- EUC_JP: two keys with one UTF-8 form -------------------------------

done_as('eucjp', 'EUC_JP', 'alice', [ '6ba2e8', '6670' ]);
done_as('eucjp', 'EUC_JP', 'bob',   [ '6ca2e8', '6670' ], [ '6cadfa', '6670' ]);
($warnings, $retired) = retire('eucjp');
is($warnings, '', 'EUC_JP: burying two keys with one UTF-8 form gives no warning');
cmp_ok($retired, '>', 0, '... and the generation retires');
is($node->safe_psql('eucjp', 'SELECT count(*) FROM eo_internal.eo_tombstones_1'),
	'3', '... all three keys are buried');
is(claim_as('eucjp', 'EUC_JP', 'alice', '6ba2e8', '6670'),
	'duplicate true', "Alice's key is a duplicate for Alice");
is(claim_as('eucjp', 'EUC_JP', 'bob', '6cadfa', '6670'),
	'duplicate true', "Bob's key, of the same UTF-8 form, is a duplicate for Bob");
is(claim_as('eucjp', 'EUC_JP', 'bob', '6badfa', '6670'),
	'claimed false', "Bob's new key, of the same UTF-8 form as Alice's, is his to claim");

$node->stop;
done_testing();
