# Copyright: eo authors.  See README.
#
# EoNats: a real nats-server (JetStream) and eo_nats for the NATS tests
# (test/t/12*_nats*.pl).
#
#   EoNats::require_nats();                  # skip (or die under EO_REQUIRE_NATS)
#   my $n = EoNats->new(user => 'fwd');      # nats-server started, password set
#   $n->stop; $n->start;                     # an outage
#   my ($rc, $out) = $n->run('log', @args);  # eo_nats, waited for; stderr to log
#   my $pid = $n->spawn('log', {ENV}, @args);# eo_nats in the background
#   $n->wait_log('log', qr/.../, $secs);     # does the log say it in time?
#   $n->log('log');                          # the log's text
#   $n->dump('STREAM');                      # its messages (JSON lines)
#   EoNats::field($json_line, 'Nats-Msg-Id');
#
# The password is in $ENV{NATS_PASSWORD} for every eo_nats started;
# @{$n->nats} is the --nats and --user options.
package EoNats;

use strict;
use warnings;

use File::Basename qw(basename);
use File::Path qw(make_path);
use IO::Socket::INET;
use IPC::Run;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

sub require_nats
{
	my $have = !system('sh', '-c',
		'command -v nats-server >/dev/null && command -v eo_nats >/dev/null');
	return if $have;
	die 'nats-server or eo_nats is missing (EO_REQUIRE_NATS is set)' if $ENV{EO_REQUIRE_NATS};
	plan skip_all => 'nats-server or eo_nats (built with libnats-dev) is not installed';
}

sub new
{
	my ($class, %o) = @_;
	my $self = bless {
		# one directory per test file: prove runs them in one tmp_check
		dir      => "${PostgreSQL::Test::Utils::tmp_check}/nats-" . ($o{name} // basename($0, '.pl')),
		password => 's3cr3t-' . int(rand(1e9)),
		port     => PostgreSQL::Test::Cluster::get_free_port(),
		user     => $o{user} // 'fwd',
		owner    => $$,
	}, $class;
	make_path("$self->{dir}/store");
	open my $cf, '>', "$self->{dir}/nats.conf" or die;
	print $cf qq{port: $self->{port}
jetstream { store_dir: "$self->{dir}/store" }
authorization { user: $self->{user}, password: "$self->{password}" }
};
	close $cf;
	$ENV{NATS_PASSWORD} = $self->{password};
	$self->start;
	return $self;
}

sub dir      { return $_[0]{dir}; }
sub password { return $_[0]{password}; }
sub port     { return $_[0]{port}; }
sub pid      { return $_[0]{pid}; }    # nats-server's
sub url      { return "nats://127.0.0.1:$_[0]{port}"; }
sub nats     { return [ '--nats', $_[0]->url, '--user', $_[0]{user} ]; }

sub start
{
	my ($self) = @_;
	my $pid = fork // die;
	if ($pid == 0)
	{
		open STDOUT, '>>', "$self->{dir}/server.log";
		open STDERR, '>&', \*STDOUT;
		exec 'nats-server', '-c', "$self->{dir}/nats.conf";
	}
	$self->{pid} = $pid;
	for (1 .. 100)
	{
		return if IO::Socket::INET->new(PeerAddr => "127.0.0.1:$self->{port}");
		usleep(100_000);
	}
	die 'nats-server did not start';
}

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'TERM', $self->{pid};
	waitpid $self->{pid}, 0;
	$self->{pid} = undef;
}

# A server a test left running is stopped when the test ends: it holds
# the test's output open, and whatever reads that (tools/matrix.sh's tee)
# would wait for it for ever.  Only by the process that made it, not by a
# child forked to run eo_nats that exits.
sub DESTROY
{
	my ($self) = @_;
	local ($?, $!);
	$self->stop if ($self->{owner} // 0) == $$;
}

# eo_nats with `args`, waited for (60 s at most: then killed, and the
# exit code is 124); returns (exit code, stdout); stderr appended to `log`.
sub run
{
	my ($self, $log, @args) = @_;
	my $out = '';
	my $h = IPC::Run::start([ 'eo_nats', @args ], '<', \undef, '>', \$out,
		'2>>', "$self->{dir}/$log", IPC::Run::timeout(60));
	if (!eval { $h->finish; 1 })
	{
		$h->kill_kill;
		return (124, $out);
	}
	return ($h->result(0), $out);
}

# eo_nats in the background (environment %$env added); returns its pid.
sub spawn
{
	my ($self, $log, $env, @args) = @_;
	my $pid = fork // die;
	if ($pid == 0)
	{
		$ENV{$_} = $env->{$_} for keys %$env;
		delete $ENV{$_} for grep { !defined $env->{$_} } keys %$env;
		open STDOUT, '>>', "$self->{dir}/$log";
		open STDERR, '>&', \*STDOUT;
		exec 'eo_nats', @args;
	}
	return $pid;
}

sub log
{
	my ($self, $log) = @_;
	return -e "$self->{dir}/$log" ? slurp_file("$self->{dir}/$log") : '';
}

# Does `log` match `re` within `secs`?
sub wait_log
{
	my ($self, $log, $re, $secs) = @_;
	my $until = time + $secs;
	while (time < $until)
	{
		return 1 if $self->log($log) =~ $re;
		usleep(100_000);
	}
	return 0;
}

# The stream's messages, as eo_nats dump writes them (a JSON per line).
sub dump
{
	my ($self, $stream) = @_;
	my ($rc, $out) = $self->run('admin.log', 'dump', @{ $self->nats }, '--stream', $stream);
	return [ split /\n/, $out ];
}

sub field
{
	my ($line, $name) = @_;
	return $line =~ /"\Q$name\E":"((?:[^"\\]|\\.)*)"/ ? $1 : undef;
}

sub kill9 { kill 'KILL', $_[0]; waitpid $_[0], 0; }

# Has process `pid` (a child) exited within `secs`?  Reaped if so (-1:
# reaped before, or not a child: gone as far as this process can tell).
sub exited_within
{
	my ($pid, $secs) = @_;
	my $until = time + $secs;
	while (time < $until)
	{
		my $r = waitpid($pid, WNOHANG);
		return 1 if $r == $pid || $r == -1;
		usleep(100_000);
	}
	return 0;
}

# SIGTERM to each; one still running 60 s later is killed, said by a
# diag (and its log then lacks the "stopping" line tests look for): a
# process deaf to a stop fails its test instead of hanging the suite.
sub stop_all
{
	kill 'TERM', $_ for @_;
	for my $pid (@_)
	{
		next if exited_within($pid, 60);
		Test::More::diag("eo_nats (pid $pid) did not stop within 60 s of SIGTERM: killed");
		kill9($pid);
	}
}

1;
