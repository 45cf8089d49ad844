# Copyright: eo authors.  See README.
#
# The C files are layers: no call cycle between them.  A file calls only
# files below it (docs/internals.md draws the map), so that each can be
# read, tested and changed knowing only what is under it.  Read from the
# built objects (nm): an edge A -> B is a global symbol B defines that A
# uses.  Fails naming the cycle it found, or a file the map in
# docs/internals.md leaves out or puts below one it calls.  The same, but
# for the map, for eo_nats's files (src/nats/).

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

my @objs = glob('src/*.o');
plan skip_all => 'eo is not built in this directory (src/*.o)' unless @objs;

# The call graph of the objects `glob` matches: (file -> files it calls,
# file -> symbols it uses, symbol -> file defining it).
sub call_graph
{
	my ($glob) = @_;
	my (%defined_in, %uses, %calls);
	for my $o (glob($glob))
	{
		my ($file) = $o =~ m{/(\w+)\.o$};
		for (split /\n/, `nm -g --defined-only '$o'`)
		{
			$defined_in{$1} = $file if /^\S*\s+[A-Za-z]\s+(\S+)$/;
		}
		for (split /\n/, `nm -u '$o'`)
		{
			push @{ $uses{$file} }, $1 if /^\s+U\s+(\S+)$/;
		}
	}
	for my $file (keys %uses)
	{
		for my $sym (@{ $uses{$file} })
		{
			my $to = $defined_in{$sym};
			$calls{$file}{$to} = 1 if defined $to && $to ne $file;
		}
	}
	return (\%calls, \%uses, \%defined_in);
}

# A cycle of %$calls as "a -> b -> a", or undef: depth-first search, where a
# file met again while still on the path closes a cycle.
sub find_cycle
{
	my ($calls) = @_;
	my (%state, @path, $cycle);
	my $visit;
	$visit = sub {
		my ($f) = @_;
		$state{$f} = 'open';
		push @path, $f;
		for my $to (sort keys %{ $calls->{$f} // {} })
		{
			last if $cycle;
			if (($state{$to} // '') eq 'open')
			{
				my ($at) = grep { $path[$_] eq $to } 0 .. $#path;
				$cycle = join(' -> ', @path[ $at .. $#path ], $to);
			}
			elsif (!$state{$to})
			{
				$visit->($to);
			}
		}
		pop @path;
		$state{$f} = 'done';
	};
	for my $f (sort keys %$calls)
	{
		$visit->($f) unless $state{$f} || $cycle;
	}
	return $cycle;
}

my @unbuilt = grep { my $o = $_; $o =~ s/\.c$/.o/; !-f $o } glob('src/*.c');
is("@unbuilt", '', 'every C file of src/ is built (in OBJS)');
my ($calls, $uses, $defined_in) = call_graph('src/*.o');
my %calls = %$calls;
my %uses = %$uses;
ok(scalar(keys %$defined_in) > 50, 'nm lists the symbols eo defines ('
	  . scalar(keys %$defined_in) . ')');
ok(exists $calls{claim}{keystore}, 'the graph has the edges it must (claim -> keystore)');
is(find_cycle(\%calls), undef, 'no call cycle between the C files');

# eo_nats (src/nats/, built where libnats is): its shared pieces are below
# the commands, so no cycle either.
SKIP:
{
	skip 'eo_nats is not built (no libnats)', 2 unless glob('src/nats/*.o');
	my ($nats_calls) = call_graph('src/nats/*.o');
	ok(exists $nats_calls->{forward}{pgconn}, 'eo_nats\'s graph has its edges (forward -> pgconn)');
	is(find_cycle($nats_calls), undef, 'no call cycle between the C files of src/nats');
}

# docs/internals.md lists the files top down: every file, each call downwards.
my @map = slurp_file('docs/internals.md') =~ /^\| `(\w+)\.c` \|/mg;
my %pos = map { $map[$_] => $_ } 0 .. $#map;
my @unlisted = grep { !exists $pos{$_} } sort keys %uses;
is("@unlisted", '', "docs/internals.md's map lists every file of src/");
my @upward;
for my $f (sort keys %calls)
{
	push @upward, map { "$f -> $_" }
	  grep { exists $pos{$f} && exists $pos{$_} && $pos{$_} < $pos{$f} }
	  sort keys %{ $calls{$f} };
}
is("@upward", '', "no file calls one above it in docs/internals.md's map");

done_testing();
