# Copyright: eo authors.  See README.
#
# EoTest: set-up shared by eo's TAP tests (test/t/*.pl load it with
# `use lib 'test/perl'`).
#
#   my $inst = EoTest::private_install();      # a copy of the PostgreSQL
#                                               # installation to build into
#   EoTest::install_eo($inst, $src, 'eo-0.2.0');  # make && make install there
#   my $node = EoTest::node($inst, 'name');     # a cluster running from it
#   my $node = EoTest::eo_node('name', conf => "eo.naptime = 1");
#                                               # a started node with eo
#   my $pid = EoTest::launcher_pid($node);      # eo's launcher, once it runs
#
# A private copy lets a test install an old eo, start a server on it, and
# install the new one over it, without touching the system installation
# that the other tests use (PostgreSQL finds its lib and share directories
# relative to its binaries).
package EoTest;

use strict;
use warnings;

use File::Path qw(make_path);
use File::Temp qw(tempdir);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

sub pg_config { return $ENV{PG_CONFIG} // 'pg_config'; }

# The major version of the PostgreSQL the tests run against.
sub pg_major
{
	my ($major) = `${\ pg_config()} --version` =~ /PostgreSQL (\d+)/;
	return $major;
}

sub private_install
{
	my $root = tempdir(CLEANUP => 1);
	my %dir = map { $_ => `${\ pg_config()} --$_` } qw(bindir pkglibdir sharedir);
	chomp %dir;
	for my $d (values %dir)
	{
		(my $parent = "$root$d") =~ s{/[^/]+$}{};
		make_path($parent);
		system('cp', '-a', $d, "$parent/") == 0 or die "copying $d failed";
	}
	return { root => $root, bindir => $dir{bindir} };
}

sub install_eo
{
	my ($inst, $src, $what) = @_;
	my $log = "$inst->{root}/$what.log";
	my $pgc = pg_config();
	system("make -C '$src' PG_CONFIG='$pgc' >'$log' 2>&1") == 0
	  && system("make -C '$src' PG_CONFIG='$pgc' DESTDIR='$inst->{root}' install >>'$log' 2>&1") == 0
	  or die "building $what failed: " . slurp_file($log);
	return;
}

sub node
{
	my ($inst, $name) = @_;
	return PostgreSQL::Test::Cluster->new($name,
		install_path => "$inst->{root}$inst->{bindir}/..");
}

# A node of the system installation, started, with eo in
# shared_preload_libraries (unless preload => 0), `conf` appended to
# postgresql.conf (later lines win, so it can override), `init` passed to
# init(), and CREATE EXTENSION eo run in each database of `eo_in`
# (default: postgres; [] for none, when the test makes it itself).
sub eo_node
{
	my ($name, %o) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $o{init} // {} });
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'eo'\n")
	  if $o{preload} // 1;
	$node->append_conf('postgresql.conf', $o{conf}) if defined $o{conf};
	$node->start;
	$node->safe_psql($_, 'CREATE EXTENSION eo') for @{ $o{eo_in} // ['postgres'] };
	return $node;
}

# The pid of eo's launcher, once exactly one runs (dies if none comes).
sub launcher_pid
{
	my ($node) = @_;
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'eo launcher'})
	  or die 'no eo launcher';
	return $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'eo launcher'});
}

# eo.control's default_version: what CREATE EXTENSION eo installs.
sub default_version
{
	my ($v) = slurp_file('eo.control') =~ /^default_version\s*=\s*'([^']+)'/m;
	return $v;
}

1;
