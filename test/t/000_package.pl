# Copyright: eo authors.  See README.
#
# The package's metadata agree: META.json's version is eo.control's
# default_version and so is debian/changelog's (less its Debian
# revision), META.json provides the script that installs it, the
# install and update scripts form a chain from eo--0.1.0.sql to it, every
# one of them is in the Makefile's DATA, CHANGELOG.md has a section for
# it, and LICENSE is there (META.json says "postgresql").  Released
# versions (tools/releases) are frozen: every SQL script of a release is in
# the tree byte for byte as it was released (with the releases' sources in
# EO_RELEASED, as tools/test.sh sets it), and has a dated CHANGELOG.md
# section.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

my $control = slurp_file('eo.control');
my ($default) = $control =~ /^default_version\s*=\s*'([^']+)'/m;
ok(defined $default, 'eo.control has a default_version');

my $meta = slurp_file('META.json');
my ($version) = $meta =~ /^   "version": "([^"]+)"/m;
my ($provided) = $meta =~ /"provides".*?"version": "([^"]+)"/s;
my ($file) = $meta =~ /"provides".*?"file": "([^"]+)"/s;
is($version, $default, "META.json's version is eo.control's default_version ($default)");
is($provided, $default, '... and so is the version it provides');
ok(-f $file, "the file META.json names ($file) exists");
like($meta, qr/"license": "postgresql"/, 'META.json says the PostgreSQL licence');
like(slurp_file('LICENSE'), qr/Permission to use, copy, modify, and distribute this software/,
	'LICENSE holds the PostgreSQL licence');

# The chain of scripts CREATE EXTENSION runs, from 0.1.0 to the default.
my $makefile = slurp_file('Makefile');
my ($data) = $makefile =~ /^DATA\s*=\s*(.*)$/m;
my %data = map { $_ => 1 } split ' ', $data;
ok($data{'eo--0.1.0.sql'}, 'the install script of 0.1.0 is in DATA');
my $at = '0.1.0';
my $steps = 0;
while ($at ne $default && $steps++ < 20)
{
	my ($next) = map { /^eo--\Q$at\E--(.+)\.sql$/ ? $1 : () } keys %data;
	last unless defined $next;
	$at = $next;
}
is($at, $default, "the update scripts in DATA lead from 0.1.0 to $default");
like(slurp_file('CHANGELOG.md'), qr/^## \Q$default\E\b/m, "CHANGELOG.md has a section for $default");

# The Debian packages carry the same version: debian/changelog's newest
# entry is <default_version>-<revision>, and control.in names the
# per-version package pg_buildext expands.
my ($debian) = slurp_file('debian/changelog') =~ /\Aeo \(([^)]+)\)/;
ok(defined $debian, "debian/changelog's first line names a version of eo");
like($debian // '', qr/^\Q$default\E-\d+$/, "... $default with a Debian revision ("
	  . ($debian // 'none') . ')');
like(slurp_file('debian/control.in'), qr/^Package: postgresql-PGVERSION-eo$/m,
	'debian/control.in names postgresql-PGVERSION-eo');


# Released scripts are never edited.
my @released = map { /^(\d+\.\d+\.\d+)\s+[0-9a-f]+/ ? $1 : () } split /\n/, slurp_file('tools/releases');
ok(@released > 0, 'tools/releases names the released versions (' . join(', ', @released) . ')');
for my $v (@released)
{
	like(slurp_file('CHANGELOG.md'), qr/^## \Q$v\E \(\d{4}-\d\d-\d\d\)/m,
		"CHANGELOG.md dates the release of $v");
  SKIP:
	{
		my $dir = defined $ENV{EO_RELEASED} ? "$ENV{EO_RELEASED}/eo-$v" : undef;
		skip "the source of $v is not at hand (EO_RELEASED)", 1 unless defined $dir && -d $dir;
		# 0.1.0 assembled its install script at build time (DATA_built)
		system("make -s -C '$dir' PG_CONFIG='" . ($ENV{PG_CONFIG} // 'pg_config')
			  . "' eo--$v.sql >/dev/null 2>&1")
		  unless -f "$dir/eo--$v.sql";
		my @scripts = map { s{.*/}{}r } glob("$dir/eo--*.sql");
		my @changed = grep { !-f $_ || slurp_file($_) ne slurp_file("$dir/$_") } @scripts;
		ok(@scripts > 0 && !@changed,
			"the " . scalar(@scripts) . " SQL scripts released in $v are unchanged"
			  . (@changed ? ' (changed: ' . join(', ', @changed) . ')' : ''));
	}
}

done_testing();
