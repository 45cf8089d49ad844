# Copyright: eo authors.  See README.
#
# The SQL examples of README.md and docs/*.md, run as they are, so that they cannot rot
# (README, "Testing", "The README's examples"):
# - every ```sql block carries a marker on the line before it:
#   <!-- test: NAME --> (run it), <!-- test: NAME fails SQLSTATE --> (run
#   it; it must stop at an ERROR with that SQLSTATE, in its last
#   statement), or <!-- not run: REASON -->; an unmarked block, a marker
#   without a block, or a name used twice fails;
# - the marked blocks run in README order, in one database of a fresh
#   server with shared_preload_libraries = 'eo', each in a psql session
#   of its own, as a superuser;
# - where the README states a block's results in its comments (the second
#   claim is a duplicate, the balance is 900, ...), the block's output is
#   compared with them (%expect below).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# ---- the blocks -----------------------------------------------------------

# README.md's ```sql blocks: { name, fails, sql, line, last } in order,
# where line is the README line of the block's first SQL line and last the
# line (within the block, from 1) where its last statement ends.
sub read_blocks
{
	my ($path) = @_;
	open my $fh, '<', $path or die "cannot read $path: $!";
	my @lines = <$fh>;
	close $fh;
	chomp @lines;

	my (@blocks, %seen, @problems);
	my $marker;    # the marker seen on the previous non-blank line, if any
	for (my $i = 0; $i < @lines; $i++)
	{
		my $line = $lines[$i];
		if ($line =~ /^\s*<!-- (test|not run):(.*)-->\s*$/)
		{
			push @problems, "line " . ($i + 1) . ": a marker not followed by a ```sql block"
			  if defined $marker;
			$marker = { kind => $1, text => $2, line => $i + 1 };
			next;
		}
		if ($line =~ /^(\s*)```(\S*)\s*$/)
		{
			my ($indent, $lang) = (length $1, $2);
			my $start = $i + 1;
			my @body;
			for ($i++; $i < @lines && $lines[$i] !~ /^\s*```\s*$/; $i++)
			{
				push @body, substr($lines[$i], $indent <= length($lines[$i]) ? $indent : 0);
			}
			if ($lang ne 'sql')
			{
				push @problems, "line $marker->{line}: a marker before a ```$lang block"
				  if defined $marker;
				undef $marker;
				next;
			}
			if (!defined $marker)
			{
				push @problems, "line $start: a ```sql block without a marker";
				next;
			}
			my $m = $marker;
			undef $marker;
			next if $m->{kind} eq 'not run';
			if ($m->{text} !~ /^\s*([\w-]+)(?:\s+fails\s+([0-9A-Z]{5}))?\s*$/)
			{
				push @problems, "line $m->{line}: cannot read marker \"$m->{text}\"";
				next;
			}
			my ($name, $fails) = ($1, $2);
			push @problems, "line $m->{line}: block name \"$name\" used twice"
			  if $seen{$name}++;
			my $last = 0;
			for my $n (0 .. $#body)
			{
				(my $code = $body[$n]) =~ s/--.*$//;
				$last = $n + 1 if $code =~ /;/;
			}
			push @blocks,
			  {
				name  => $name,
				fails => $fails,
				sql   => join("\n", @body) . "\n",
				line  => $start + 1,
				last  => $last
			  };
			next;
		}
		if (defined $marker && $line =~ /\S/)
		{
			push @problems, "line $marker->{line}: a marker not followed by a ```sql block";
			undef $marker;
		}
	}
	push @problems, "line $marker->{line}: a marker not followed by a ```sql block"
	  if defined $marker;
	return (\@blocks, \@problems);
}

# What the README says the blocks print: every non-empty output line
# (psql -A -t), in order; a string must be equal, a qr// must match.
my $uuid = qr/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
my %expect = (
	'install'              => [],
	'quick-start'          => [ 'claimed|', 'duplicate|{"charge": "ch_1"}', '900' ],
	'quick-start-rollback' => [ 'claimed', 'claimed', '850' ],
	'outbox'               => [ 'billing_outbox', $uuid ],
	'relay'                => [ '1', '0', qr/^[tf]$/ ],
	'key-stages'           => [ 'claimed', 'duplicate', 'claimed' ],
	'key-consumers'        => [ 'claimed', 'claimed', 'claimed' ],
	'scopes-guide'         => [ 'claimed', 'claimed' ],
	'outcomes'             => [ 'claimed', 'rejected' ],
	'outcomes-plpgsql'     => ['rejected|23514'],
	'key-fingerprint'      => [ 'claimed', 'claimed' ],
	'retention'            => ['t'],
	'claim-first'          => [ 'claimed', 'duplicate' ],
	'lease'                => [ 'busy', 'duplicate|{"refund": "re_1"}' ],
	'lease-fencing'        => [],
	'replay'               => [ 't', '1' ],
	'inbox' => [ 'claimed', 'duplicate', 'claimed', 'claimed', 'done', '2' ],
	'dead'  => [
		'retry', 'retry', 'retry', 'retry', 'dead', 'dead|5',
		'export:batch-17|5|S3 upload: 403 Forbidden',
		'dead|5|S3 upload: 403 Forbidden'
	],
	'dead-redrive' => [ 't', 'claimed|6', '0' ],
	'steps-resume' => [ 'claimed 2 ride_created {"ride_id": 1}', '1' ],
	'http'         => [ 'claimed|', '201|{"id": 1}', '1', '422' ],
	'maintain'     => [qr/^\d+\|\d+\|\d+\|\d+\|\d+$/],
	'grant-ops'    => [],
	'grant-app'    => [],
	'grant-outbox' => []);

# README.md, then the pages of docs/ in the order a reader meets them (the
# order of the README before it was cut into pages: later blocks use what
# earlier ones made).
my @pages = ('README.md',
	map { "docs/$_.md" } qw(concepts guides nats python node reference operations performance internals security testing));
is(join(' ', sort glob('docs/*.md')), join(' ', sort grep { m{^docs/} } @pages),
	'every page of docs/ is one whose examples this test runs');
my (@all, @problems, %seen);
for my $page (@pages)
{
	my ($blocks, $problems) = read_blocks($page);
	push @problems, map { "$page: $_" } @$problems;
	for my $b (@$blocks)
	{
		$b->{page} = $page;
		push @problems, "$page: block name \"$b->{name}\" also in $seen{$b->{name}}"
		  if $seen{ $b->{name} };
		$seen{ $b->{name} } //= $page;
		push @all, $b;
	}
}
my $blocks = \@all;
is_deeply(\@problems, [], 'every ```sql block of README.md and docs/ is marked, and every marker has one')
  or diag join("\n", @problems);
ok(scalar(grep { $_->{fails} } @$blocks) > 0 && @$blocks > 10,
	'README.md and docs/ have examples to run, some that must fail');
my %names = map { $_->{name} => 1 } @$blocks;
for my $name (sort keys %expect)
{
	ok($names{$name}, "the README or docs/ still have block \"$name\", whose results this test checks");
}

# ---- run them -------------------------------------------------------------

my $node = PostgreSQL::Test::Cluster->new('readme');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'eo'\n");
$node->start;

sub matches
{
	my ($got, $want) = @_;
	return 0 if @$got != @$want;
	for my $n (0 .. $#$want)
	{
		my $w = $want->[$n];
		return 0 unless ref $w ? $got->[$n] =~ $w : $got->[$n] eq $w;
	}
	return 1;
}

for my $b (@$blocks)
{
	my $what = "$b->{page} block \"$b->{name}\" (line $b->{line})";
	my ($ret, $stdout, $stderr) = $node->psql(
		'postgres', $b->{sql},
		on_error_stop => 1,
		extra_params  => [ '-v', 'VERBOSITY=verbose' ]);
	my @errors = $stderr =~ /^psql:<stdin>:(\d+): ERROR:  ([0-9A-Z]{5}):/mg;
	if ($b->{fails})
	{
		ok( $ret != 0 && @errors == 2
			  && $errors[1] eq $b->{fails}
			  && $errors[0] == $b->{last},
			"$what stops at $b->{fails} in its last statement (line $b->{last})")
		  or diag "exit $ret; stderr:\n$stderr";
	}
	else
	{
		ok($ret == 0 && $stderr !~ /\berror\b/i, "$what runs without an error")
		  or diag "exit $ret; stderr:\n$stderr";
	}
	note "$b->{name}: $stderr" if $stderr ne '' && !$b->{fails};

	next unless exists $expect{ $b->{name} };
	my @got = grep { $_ ne '' } split /\n/, $stdout;
	ok(matches(\@got, $expect{ $b->{name} }), "$what prints what the README says")
	  or diag "got:\n" . join("\n", @got);
}

$node->stop;
done_testing();
