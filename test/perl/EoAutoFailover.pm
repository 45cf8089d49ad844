# Copyright: eo authors.  See README.
#
# EoAutoFailover: a pg_auto_failover formation on this machine for the HA
# tests (test/t/13*_ha_*.pl): a monitor and data nodes, each node run by
# its own `pg_autoctl run`, as an operator runs them (not
# PostgreSQL::Test::Cluster: the manager starts, stops, promotes, rewinds
# and reconfigures the servers itself).
#
#   EoAutoFailover::require_pg_autoctl();   # skip (or die under EO_REQUIRE_AUTO_FAILOVER)
#   my $f = EoAutoFailover->new(monitor_conf => "...");  # monitor made and running
#   $f->add_node('node1', conf => "...");   # initdb, conf, create postgres, run
#   $f->add_node('node2', conf => "...");   # (its own postgresql.conf is node1's,
#                                           #  copied by pg_basebackup)
#   $f->wait_states({ node1 => 'primary', node2 => 'secondary' }, $secs);
#   $f->primary;                            # the node the monitor has as primary
#   $f->port('node1');
#   my ($rc, $out, $err) = $f->psql('node1', $db, $sql);
#   $f->safe_psql('node1', $db, $sql);      # dies on an error
#   $f->connstr($db);                       # every node, target_session_attrs=read-write
#   $f->autoctl('log', @args);              # pg_autoctl, waited for; output in log
#   my $h = $f->autoctl_start('log', @args); $f->autoctl_finish($h);
#   $f->kill_node('node1');                 # SIGKILL its pg_autoctl, then its postmaster
#   $f->run_node('node1');                  # pg_autoctl run again
#   $f->stop;                               # everything stopped (also at END)
#
# Every server listens on 127.0.0.1 and on a Unix socket in a short
# directory of its own; the pg_autoctl processes get their own XDG
# directories (configuration, state, pid files) under the test's, so
# nothing of the user's home is read or written.
package EoAutoFailover;

use strict;
use warnings;

use File::Path qw(make_path);
use IPC::Run;
use POSIX qw(setsid WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my @formations;    # stopped at END

sub pg_config { return $ENV{PG_CONFIG} // 'pg_config'; }

sub pg_dir
{
	my ($what) = @_;
	my $d = `${\ pg_config()} --$what`;
	chomp $d;
	return $d;
}

# pg_autoctl (Debian's pg-auto-failover-cli, one for every major) and the
# monitor's extension for this major (postgresql-N-auto-failover).
sub require_pg_autoctl
{
	my @missing;
	push @missing, 'pg_autoctl'
	  if system('sh', '-c', 'command -v pg_autoctl >/dev/null') != 0;
	push @missing, 'the pgautofailover extension for ' . pg_dir('version')
	  unless -f pg_dir('sharedir') . '/extension/pgautofailover.control';
	return unless @missing;
	my $what = join(' and ', @missing) . ' (Debian: pg-auto-failover-cli, postgresql-N-auto-failover)';
	die "missing: $what (EO_REQUIRE_AUTO_FAILOVER is set)" if $ENV{EO_REQUIRE_AUTO_FAILOVER};
	plan skip_all => "not installed: $what";
}

sub new
{
	my ($class, %o) = @_;
	my $dir = "${PostgreSQL::Test::Utils::tmp_check}/" . ($o{name} // 'ha');
	my $self = bless {
		dir    => $dir,
		sock   => PostgreSQL::Test::Utils::tempdir_short(),
		bindir => pg_dir('bindir'),
		nodes  => {},
		order  => [],
	}, $class;
	make_path("$dir/xdg/config", "$dir/xdg/data", "$dir/xdg/run", "$dir/log");
	chmod 0700, "$dir/xdg/run";
	push @formations, $self;

	# The monitor: a data directory of ours (its socket where we say), made
	# a monitor by pg_autoctl, then run.
	my $mon = $self->_server('monitor', $o{monitor_conf});
	$self->autoctl('monitor.create.log', 'create', 'monitor', '--pgdata', $mon->{pgdata},
		'--pgport', $mon->{port}, '--hostname', '127.0.0.1', '--auth', 'trust', '--no-ssl',
		'--pgctl', "$self->{bindir}/pg_ctl")
	  or die 'pg_autoctl create monitor failed: ' . $self->log('monitor.create.log');
	# (pg_autoctl run passes listen_addresses on the command line: its own
	# default for a monitor is '*')
	$self->autoctl('monitor.create.log', 'config', 'set', '--pgdata', $mon->{pgdata},
		'postgresql.listen_addresses', '127.0.0.1')
	  or die 'pg_autoctl config set failed: ' . $self->log('monitor.create.log');
	$self->{monitor_uri} = "postgres://autoctl_node\@127.0.0.1:$mon->{port}/pg_auto_failover?sslmode=disable";
	$self->_run('monitor');
	$self->_wait_ready('monitor', 'pg_auto_failover', 60)
	  or die 'the monitor did not start: ' . $self->log('monitor.log');
	return $self;
}

sub dir     { return $_[0]{dir}; }
sub port    { return $_[0]{nodes}{ $_[1] }{port}; }
sub pgdata  { return $_[0]{nodes}{ $_[1] }{pgdata}; }
sub nodes   { return grep { $_ ne 'monitor' } @{ $_[0]{order} }; }

sub log
{
	my ($self, $log) = @_;
	my $f = "$self->{dir}/log/$log";
	return -e $f ? slurp_file($f) : '';
}

# A server's data directory and port (initdb'd by us for the monitor and
# the first node; a standby's comes from pg_basebackup).
sub _server
{
	my ($self, $name, $conf, %o) = @_;
	my $n = $self->{nodes}{$name} = {
		name   => $name,
		port   => PostgreSQL::Test::Cluster::get_free_port(),
		pgdata => "$self->{dir}/$name",
	};
	push @{ $self->{order} }, $name;
	return $n if $o{no_initdb};
	system("$self->{bindir}/initdb -D '$n->{pgdata}' -A trust -U postgres --locale=C -E UTF8"
		  . " >'$self->{dir}/log/$name.initdb.log' 2>&1") == 0
	  or die "initdb $name failed: " . $self->log("$name.initdb.log");
	# pg_autoctl puts its include at the top of postgresql.conf: what is
	# appended here comes later and wins.
	open my $fh, '>>', "$n->{pgdata}/postgresql.conf" or die;
	print $fh "unix_socket_directories = '$self->{sock}'\n";
	print $fh "shared_buffers = 32MB\n";
	print $fh "fsync = off\n";    # test data; nothing here crashes the OS
	print $fh "$conf\n" if defined $conf;
	close $fh;
	return $n;
}

# The environment of every pg_autoctl (and its postgres): our XDG
# directories, our socket directory.
sub _env
{
	my ($self) = @_;
	return (
		XDG_CONFIG_HOME => "$self->{dir}/xdg/config",
		XDG_DATA_HOME   => "$self->{dir}/xdg/data",
		XDG_RUNTIME_DIR => "$self->{dir}/xdg/run",
		PGHOST          => $self->{sock},
		PATH            => "$self->{bindir}:$ENV{PATH}");
}

# pg_autoctl with `args`, waited for (120 s at most); its output appended
# to `log`.  True if it exited 0.
sub autoctl
{
	my ($self, $log, @args) = @_;
	local %ENV = (%ENV, $self->_env);
	my $h = IPC::Run::start([ 'pg_autoctl', @args ], '<', \undef,
		'>>', "$self->{dir}/log/$log", '2>&1', IPC::Run::timeout(120));
	if (!eval { $h->finish; 1 })
	{
		$h->kill_kill;
		return 0;
	}
	return $h->result(0) == 0;
}

# The same, in the background: returns a handle for autoctl_finish.
sub autoctl_start
{
	my ($self, $log, @args) = @_;
	local %ENV = (%ENV, $self->_env);
	return IPC::Run::start([ 'pg_autoctl', @args ], '<', \undef,
		'>>', "$self->{dir}/log/$log", '2>&1', IPC::Run::timeout(120));
}

sub autoctl_finish
{
	my ($self, $h) = @_;
	if (!eval { $h->finish; 1 })
	{
		$h->kill_kill;
		return 0;
	}
	return $h->result(0) == 0;
}

# `pg_autoctl run` for a server, in a session of its own (a signal to the
# test's process group does not reach it).
sub _run
{
	my ($self, $name) = @_;
	my $n   = $self->{nodes}{$name};
	my %env = $self->_env;
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		setsid();
		$ENV{$_} = $env{$_} for keys %env;
		open STDIN, '<', '/dev/null';
		open STDOUT, '>>', "$self->{dir}/log/$name.log";
		open STDERR, '>&', \*STDOUT;
		{ exec 'pg_autoctl', 'run', '--pgdata', $n->{pgdata}; }
		POSIX::_exit(127);
	}
	$n->{keeper} = $pid;
	return $pid;
}

sub run_node { my ($self, $name) = @_; return $self->_run($name); }

# Does `db` on `name` answer within `secs`?
sub _wait_ready
{
	my ($self, $name, $db, $secs) = @_;
	my $until = time + $secs;
	while (time < $until)
	{
		my ($rc) = $self->psql($name, $db, 'SELECT 1');
		return 1 if $rc == 0;
		usleep(200_000);
	}
	return 0;
}

# A data node: the first is initdb'd here with `conf`, registered as the
# primary; the next ones are made standbys by pg_autoctl (pg_basebackup).
# Returns once the monitor has it in `state` (default: single for the
# first, secondary for the others).
sub add_node
{
	my ($self, $name, %o) = @_;
	my $first = !$self->nodes;
	my $n = $self->_server($name, $o{conf}, no_initdb => !$first);
	$self->autoctl("$name.create.log", 'create', 'postgres', '--pgdata', $n->{pgdata},
		'--pgport', $n->{port}, '--pghost', $self->{sock}, '--hostname', '127.0.0.1',
		'--listen', '127.0.0.1', '--name', $name, '--auth', 'trust', '--no-ssl',
		'--pgctl', "$self->{bindir}/pg_ctl", '--monitor', $self->{monitor_uri},
		'--dbname', 'postgres', @{ $o{options} // [] })
	  or die "pg_autoctl create postgres $name failed: " . $self->log("$name.create.log");
	$self->_run($name);
	$self->wait_states({ $name => $o{state} // ($first ? 'single' : 'secondary') }, 120)
	  or die "node $name did not reach its state: " . $self->show_state . $self->log("$name.log");
	return $n;
}

# The monitor's view: { name => [reported, assigned] }.
sub states
{
	my ($self) = @_;
	my ($rc, $out) = $self->psql('monitor', 'pg_auto_failover',
		q{SELECT nodename, current_group_state, assigned_group_state
		  FROM pgautofailover.current_state('default')});
	return {} if $rc != 0;
	return { map { my @f = split /\|/; ($f[0] => [ $f[1], $f[2] ]) } split /\n/, $out };
}

# `pg_autoctl show state`, for a diagnostic.
sub show_state
{
	my ($self) = @_;
	my ($rc, $out) = $self->psql('monitor', 'pg_auto_failover',
		q{SELECT nodename || ' ' || current_group_state || '/' || assigned_group_state
		  FROM pgautofailover.current_state('default')});
	return "formation: $out\n";
}

# Are all the nodes of `want` (name => state) reported and assigned that
# state within `secs`?  A state may be a regexp.
sub wait_states
{
	my ($self, $want, $secs) = @_;
	my $until = time + $secs;
	while (1)
	{
		my $s  = $self->states;
		my $ok = 1;
		for my $name (keys %$want)
		{
			my $re = ref $want->{$name} ? $want->{$name} : qr/^\Q$want->{$name}\E$/;
			$ok = 0 unless $s->{$name} && $s->{$name}[0] =~ $re && $s->{$name}[1] =~ $re;
		}
		return 1 if $ok;
		return 0 if time >= $until;
		usleep(200_000);
	}
}

# The node the monitor has as primary (reported and assigned), or undef.
sub primary
{
	my ($self) = @_;
	my $s = $self->states;
	my ($p) = grep { $s->{$_}[0] eq 'primary' && $s->{$_}[1] eq 'primary' } keys %$s;
	return $p;
}

# psql on a server, `sql` on stdin; returns (exit code, stdout, stderr).
sub psql
{
	my ($self, $name, $db, $sql, %o) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ "$self->{bindir}/psql", '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1', '-h', $self->{sock},
			'-p', $self->{nodes}{$name}{port}, '-U', 'postgres', '-d', $db, '-f', '-' ],
		'<', \$sql, '>', \$out, '2>', \$err, IPC::Run::timeout($o{timeout} // 60));
	if (!eval { $h->finish; 1 })
	{
		$h->kill_kill;
		return (124, $out, "timed out\n$err");
	}
	chomp $out;
	return ($h->result(0), $out, $err);
}

sub safe_psql
{
	my ($self, $name, $db, $sql, %o) = @_;
	my ($rc, $out, $err) = $self->psql($name, $db, $sql, %o);
	die "psql on $name ($db) failed ($rc): $err\nwhile running: $sql" if $rc != 0;
	return $out;
}

# libpq's connection string naming every data node, for a client that must
# find the primary itself.
sub connstr
{
	my ($self, $db) = @_;
	my @n = $self->nodes;
	return 'host=' . join(',', map { '127.0.0.1' } @n)
	  . ' port=' . join(',', map { $self->port($_) } @n)
	  . " dbname=$db user=postgres target_session_attrs=read-write connect_timeout=2";
}

# The postmaster's pid, from postmaster.pid (undef if there is none).
sub postmaster_pid
{
	my ($self, $name) = @_;
	my $f = "$self->{nodes}{$name}{pgdata}/postmaster.pid";
	return undef unless -e $f;
	my ($pid) = slurp_file($f) =~ /^(\d+)/;
	return $pid;
}

# pid => [ppid, state] of every process.
sub _processes
{
	my %p;
	for my $stat (glob '/proc/[0-9]*/stat')
	{
		open my $fh, '<', $stat or next;
		my $line = <$fh>;
		close $fh;
		next unless defined $line && $line =~ /^(\d+) \(.*\) (\S) (\d+)/s;
		$p{$1} = [ $3, $2 ];
	}
	return \%p;
}

sub _descendants
{
	my ($procs, $root) = @_;
	my @out;
	my @todo = ($root);
	while (defined(my $pid = shift @todo))
	{
		my @kids = grep { $procs->{$_}[0] == $pid } keys %$procs;
		push @out, @kids;
		push @todo, @kids;
	}
	return @out;
}

# The node dies as a machine's processes die in a crash, the manager's
# first: SIGKILL to its pg_autoctl processes (so none restarts PostgreSQL),
# then to the postmaster.  The postmaster's children (backends, the WAL
# sender) are left to find out on their own, as after any kill -9 of a
# postmaster; one that is stopped (SIGSTOP) never would, and is killed.
# Returns once they are all gone, with the time of the postmaster's kill.
sub kill_node
{
	my ($self, $name) = @_;
	my $n      = $self->{nodes}{$name};
	my $procs  = _processes();
	my $pm     = $self->postmaster_pid($name);
	my @pgkids = $pm ? _descendants($procs, $pm) : ();
	my %skip   = map { $_ => 1 } ($pm // 0, @pgkids);
	my @keeper = grep { !$skip{$_} } ($n->{keeper}, _descendants($procs, $n->{keeper}));
	kill 'KILL', @keeper;
	kill 'KILL', $pm if $pm;
	my $at = time;
	kill 'KILL', grep { ($procs->{$_}[1] // '') eq 'T' } @pgkids;
	waitpid $n->{keeper}, 0;
	delete $n->{keeper};
	my $until = time + 60;
	while (grep { kill 0, $_ } @pgkids)
	{
		die "the postmaster's children of $name did not exit" if time > $until;
		usleep(100_000);
	}
	return $at;
}

sub stop
{
	my ($self) = @_;
	# data nodes first, the monitor last
	for my $name (reverse @{ $self->{order} })
	{
		my $n = $self->{nodes}{$name};
		next unless $n->{keeper};
		# SIGTERM: pg_autoctl stops its services, PostgreSQL in fast mode
		kill 'TERM', $n->{keeper};
		my $until = time + 30;
		while (waitpid($n->{keeper}, WNOHANG) == 0 && time < $until)
		{
			usleep(100_000);
		}
		if (kill 0, $n->{keeper})
		{
			kill 'KILL', -$n->{keeper};
			waitpid $n->{keeper}, 0;
		}
		delete $n->{keeper};
		my $pm = $self->postmaster_pid($name);
		kill 'KILL', $pm if $pm && kill 0, $pm;
	}
	return;
}

END
{
	my $rc = $?;
	$_->stop for @formations;
	$? = $rc;
}

1;
