# Copyright: eo authors.  See README.
#
# eo_nats forward against an eo of 0.4.0 and one of 0.3.0: with 0.4.0 it
# formats an event's own headers with eo_relay_header_lines, with 0.3.0 in
# its fetch statement (a subquery per event).  The same events, with
# headers of every kind (reserved names, names NATS cannot carry, numbers,
# objects, strings with CR or LF, quotes, non-ASCII), reach JetStream with
# the same headers either way; which form was used is read from the
# server's log.

use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoNats;
use EoTest;

EoNats::require_nats();

my $node = EoTest::eo_node('versions', conf => "eo.naptime = 1", eo_in => []);
my %headers = (
	1 => '{"trace": "abc", "x-user": "u1"}',
	2 => '{"Nats-Msg-Id": "x", "nats-expected": "y", "X-NATS-foo": "z", "eo-created": "w", "ok-eo-": "keep"}',
	3 => '{"a b": 1, "a:b": 2, "tab\tkey": 3, "\u00fc": 4, "": 5, "~!": 6}',
	4 => '{"n": 1.50, "t": true, "z": null, "o": {"x": [1, "two"]}, "arr": [1, 2]}',
	5 => '{"crlf": "line1\nline2", "cr": "a\rb", "tab": "a\tb", "quote": "say \"hi\"", "uni": "caf\u00e9"}',
	6 => '{}',
	7 => '[1, 2]',
	8 => '{"B": 1, "a": 2, "A": 3, "b": 4}');

for my $v ('0.4.0', '0.3.0')
{
	(my $db = "shop_$v") =~ s/\.//g;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
CREATE EXTENSION eo VERSION '$v';
SELECT eo_outbox_create('hdr', slots => 1) IS NOT NULL;
SELECT eo_group_create('hdr', 'nats');
ALTER ROLE CURRENT_USER IN DATABASE $db SET log_statement = 'all';
});
	for my $n (sort keys %headers)
	{
		my $h = $headers{$n} =~ s/'/''/gr;
		$node->safe_psql($db, "SELECT eo_emit('hdr', 'order', 'agg', 'h$n', '{}', '$h'::jsonb)");
	}
}
is($node->safe_psql('shop_030', q{SELECT extversion FROM pg_extension WHERE extname = 'eo'}), '0.3.0',
	'one database has eo 0.3.0');

my $nats = EoNats->new;
my @nats = @{ $nats->nats };
my %stream;
for my $v ('0.4.0', '0.3.0')
{
	(my $db = "shop_$v") =~ s/\.//g;
	my $s = uc $db;
	$nats->run("admin-$db.log", 'stream-add', @nats, '--stream', $s, '--subjects', "$db.>");
	my $log_from = -s $node->logfile;
	my ($rc) = $nats->run("forward-$db.log", @nats, '--pg', $node->connstr($db), 'forward',
		'--outbox', 'hdr', '--group', 'nats', '--stream', $s, '--subject', "$db.{type}", '--once');
	is($rc, 0, "8 events forwarded from eo $v");
	my $log = slurp_file($node->logfile, $log_from);
	if ($v eq '0.4.0')
	{
		like($log, qr/eo_relay_header_lines\(headers\)/, '... their headers formatted by eo_relay_header_lines');
	}
	else
	{
		like($log, qr/jsonb_each\(headers\)/, '... their headers formatted in the fetch statement');
	}
	for my $line (@{ $nats->dump($s) })
	{
		my $m = decode_json($line);
		my %h = %{ $m->{headers} };
		delete @h{qw(Nats-Msg-Id Nats-Expected-Stream Eo-Created-At)};	# the event's, the stream's
		$stream{$v}{ $h{'Eo-Type'} } = \%h;
	}
}
is(scalar(keys %{ $stream{'0.4.0'} }), 8, 'the 8 events in the stream fed by eo 0.4.0');
is_deeply($stream{'0.4.0'}, $stream{'0.3.0'},
	'every event carries the same headers, whichever eo formatted them');
is($stream{'0.4.0'}{h1}{trace} . '|' . $stream{'0.4.0'}{h5}{quote} . '|' . $stream{'0.4.0'}{h5}{crlf},
	'abc|say "hi"|"line1\nline2"', '... their values as strings, or as JSON text with CR or LF');
ok(!exists $stream{'0.4.0'}{h2}{'Nats-expected'} && !exists $stream{'0.4.0'}{h2}{'eo-created'}
	  && $stream{'0.4.0'}{h2}{'ok-eo-'} eq 'keep', '... reserved names left out, the rest kept');

$nats->stop;
$node->stop;
done_testing();
