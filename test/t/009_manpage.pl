# Copyright: eo authors.  See README.
#
# eo_nats's man page (docs/eo_nats.1, shipped by the eo-nats package)
# cannot drift from its command line: it names every command of
# src/nats/cli.c's table and every long option any command takes (and
# --help, --version), as the roff "\-\-name"; and man(1) formats it without
# a warning, as lintian checks it.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

my $cli = slurp_file('src/nats/cli.c');
my $man = slurp_file('docs/eo_nats.1');

# {"forward", "pg " NATS_OPTS " outbox group ...", ...}: a command and its options
my ($nats_opts) = $cli =~ /^#define NATS_OPTS "([^"]+)"/m;
ok(defined $nats_opts, 'cli.c defines NATS_OPTS');
my %options;
my @commands;
while ($cli =~ /^\t\{"([a-z-]+)", ((?:"[^"]*"|NATS_OPTS|\s)+),\n/mg)
{
	my ($command, $expr) = ($1, $2);
	$expr =~ s/NATS_OPTS/"$nats_opts"/g;
	my $list = join '', $expr =~ /"([^"]*)"/g;
	push @commands, $command;
	push @{ $options{$_} }, $command for split ' ', $list;
}
ok(@commands >= 9, 'cli.c has a table of commands (' . join(' ', @commands) . ')');

# Every long option getopt knows is one a command takes, or --help/--version.
my @long = $cli =~ /^\t\{"([a-z-]+)", (?:no|required)_argument,/mg;
is(join(' ', grep { !$options{$_} && $_ ne 'help' && $_ ne 'version' } @long), '',
	'every long option of cli.c is taken by a command (' . scalar(@long) . ' options)');

(my $roff = $man) =~ s/\\-/-/g;
my ($options_section) = $roff =~ /^\.SH OPTIONS\n(.*?)^\.SH /ms;
ok(defined $options_section, 'it has an OPTIONS section');
$options_section //= '';
for my $command (@commands)
{
	like($roff, qr/^\.B eo_nats \Q$command\E$/m, "the SYNOPSIS has eo_nats $command");
	like($roff, qr/^\.B \Q$command\E\n/m, "COMMANDS describes $command");
}
for my $option (sort(keys %options), 'help', 'version')
{
	like($options_section, qr/^\.(?:B|BI|BR) [^\n]*--\Q$option\E(?![\w-])/m,
		"OPTIONS describes --$option" . ($options{$option} ? " (" . join(', ', @{ $options{$option} }) . ')' : ''));
}
for my $section ('NAME', 'SYNOPSIS', 'DESCRIPTION', 'COMMANDS', 'OPTIONS', 'ENVIRONMENT',
	'FILES', 'EXIT STATUS', 'EXAMPLES', 'SEE ALSO')
{
	like($man, qr/^\.SH \Q$section\E$/m, "it has the section $section");
}
for my $variable ('NATS_PASSWORD', 'NATS_TOKEN', 'PGPASSFILE')
{
	like($man, qr/^\.B \Q$variable\E$/m, "ENVIRONMENT names $variable");
}
like($man, qr/^\.B \Q$_\E\n/m, "EXIT STATUS lists code $_") for 0 .. 3;

SKIP:
{
	skip 'man(1) is not installed', 1
	  unless system('command -v man >/dev/null 2>&1') == 0;
	my $warnings = `LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z docs/eo_nats.1 2>&1 >/dev/null`;
	is($warnings, '', 'man --warnings formats it without a warning');
}

done_testing();
