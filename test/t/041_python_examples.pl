# Copyright: eo authors.  See README.
#
# The Python examples of README.md and docs/*.md are real programs, run
# here, so that they cannot rot (docs/testing.md, "The examples of the
# README and docs/"):
# - every ```python block carries, on the line before it,
#   <!-- program: test/python/NAME.py -->, and its text is in that file word
#   for word; an unmarked block, a marker without a block or a program no
#   page shows fails, and so does a program this test has no scenario for;
# - each program runs with python3 and psycopg 3 (Debian: python3-psycopg)
#   against a fresh server with shared_preload_libraries = 'eo', the
#   connection string in EO_DSN, and what it answers and what it committed
#   (counted from another connection) are checked.
# Without python3 and psycopg 3 the programs are not run (loudly), unless
# EO_REQUIRE_PYTHON is set (tools/test.sh sets it): then the test fails.

use strict;
use warnings;

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# ---- the blocks -----------------------------------------------------------

# A page's ```python blocks: { program, code, line }, and its problems.
sub read_blocks
{
	my ($path) = @_;
	open my $fh, '<', $path or die "cannot read $path: $!";
	my @lines = <$fh>;
	close $fh;
	chomp @lines;

	my (@blocks, @problems);
	my $marker;    # the program marker on the previous non-blank line, if any
	for (my $i = 0; $i < @lines; $i++)
	{
		my $line = $lines[$i];
		if ($line =~ /^\s*<!-- program:\s*(\S+)\s*-->\s*$/)
		{
			push @problems, "line $marker->{line}: a program marker not followed by a ```python block"
			  if defined $marker;
			$marker = { program => $1, line => $i + 1 };
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
			if ($lang !~ /^(?:python3?|py)$/i)
			{
				push @problems, "line $marker->{line}: a program marker before a ```$lang block"
				  if defined $marker;
				undef $marker;
				next;
			}
			if (!defined $marker)
			{
				push @problems, "line $start: a ```$lang block without a <!-- program: ... --> marker";
				next;
			}
			push @blocks,
			  {
				program => $marker->{program},
				code    => join("\n", @body) . "\n",
				line    => $start
			  };
			undef $marker;
			next;
		}
		if (defined $marker && $line =~ /\S/)
		{
			push @problems, "line $marker->{line}: a program marker not followed by a ```python block";
			undef $marker;
		}
	}
	push @problems, "line $marker->{line}: a program marker not followed by a ```python block"
	  if defined $marker;
	return (\@blocks, \@problems);
}

# docs/python.md is the Python client's page: its examples use the client
# and run in the client's own tests (clients/python/test/test_docs.py,
# run by tools/clients.sh), marked <!-- example: NAME -->.
my (@blocks, @problems, %shown);
for my $page ('README.md', grep { $_ ne 'docs/python.md' } sort glob('docs/*.md'))
{
	my ($blocks, $problems) = read_blocks($page);
	push @problems, map { "$page: $_" } @$problems;
	for my $b (@$blocks)
	{
		my $where = "$page line $b->{line}";
		if ($b->{program} !~ m{^test/python/[\w-]+\.py$} || !-f $b->{program})
		{
			push @problems, "$where: the program $b->{program} is not a file test/python/*.py";
			next;
		}
		push @problems, "$where: the block is not in $b->{program} word for word"
		  if index(slurp_file($b->{program}), $b->{code}) < 0;
		push @{ $shown{ $b->{program} } }, $where;
	}
}
for my $program (sort glob('test/python/*.py'))
{
	push @problems, "$program: no page shows it in a ```python block" unless $shown{$program};
}
is_deeply(\@problems, [],
	'every ```python block of README.md and docs/ is marked with its program and is in it word for word')
  or diag join("\n", @problems);

# ---- the scenarios --------------------------------------------------------

my %scenario = (
	'test/python/idempotency_key_handler.py' => \&idempotency_key_handler,
	'test/python/recovery_point.py'          => \&recovery_point);
for my $program (sort keys %shown)
{
	ok($scenario{$program}, "this test runs $program");
}
ok(scalar(keys %shown) >= 2, 'docs/ have Python programs to run');

# The system's python3, where Debian's python3-psycopg installs (a python3
# of pyenv or a virtualenv first on PATH would not see it); EO_PYTHON
# chooses another.
my $python = $ENV{EO_PYTHON} // (-x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3');
my ($has_python, $version, $python_err) = ('', '', '');
{
	my $out = '';
	$has_python = eval {
		IPC::Run::run([ $python, '-c', 'import psycopg; print(psycopg.__version__)' ],
			'>', \$out, '2>', \$python_err);
	} || do { $python_err .= $@; 0 };
	chomp($version = $out);
}
if (!$has_python)
{
	if ($ENV{EO_REQUIRE_PYTHON})
	{
		fail('python3 with psycopg 3 is installed (EO_REQUIRE_PYTHON is set)');
		diag $python_err;
		done_testing();
		exit;
	}
	diag '';
	diag '*** SKIPPED: the Python examples of docs/ are NOT run: python3 with psycopg 3 is missing';
	diag '*** (Debian: apt-get install python3-psycopg; EO_REQUIRE_PYTHON=1 makes this a failure)';
	diag '';
	done_testing();
	exit;
}
note "python3 with psycopg $version";

my $node = PostgreSQL::Test::Cluster->new('python');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{shared_preload_libraries = 'eo'
eo.naptime = 3600    # leases here expire on purpose: the worker must not reclaim them first
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION eo');

my $json = JSON::PP->new->canonical;
my $timeout = $PostgreSQL::Test::Utils::timeout_default;

sub dsn
{
	my ($name) = @_;
	return $node->connstr('postgres') . " application_name=$name";
}

sub count
{
	my ($table) = @_;
	return $node->safe_psql('postgres', "SELECT count(*) FROM $table");
}

for my $program (sort keys %scenario)
{
	note "---- $program";
	$scenario{$program}->($program);
}

$node->stop;
done_testing();

# ---- the Idempotency-Key handler ------------------------------------------

# The handler as a server process: started once, fed requests on its stdin,
# one answer a line on its stdout, all on its one connection.
sub start_handler
{
	my ($program, $name) = @_;
	my %h = (in => '', out => '', err => '', name => $name);
	local $ENV{EO_DSN} = dsn($name);
	$h{timer} = IPC::Run::timeout($timeout);
	$h{run} = IPC::Run::start([ $python, $program ],
		'<', \$h{in}, '>', \$h{out}, '2>', \$h{err}, $h{timer});
	return \%h;
}

sub ask
{
	my ($h, $headers, $body) = @_;
	$h->{out} = '';
	$h->{in} .= $json->encode(
		{ method => 'POST', path => '/orders', headers => $headers, body => $body }) . "\n";
	$h->{timer}->start($timeout);
	eval { $h->{run}->pump while $h->{out} !~ /\n/; 1 }
	  or die "no answer from the handler: $@\nstderr:\n$h->{err}";
	return $json->decode($h->{out});
}

sub finish_handler
{
	my ($h) = @_;
	$h->{timer}->start($timeout);
	$h->{run}->finish;
	return ($h->{run}->full_result(0), $h->{err});
}

sub backend_state
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT state FROM pg_stat_activity WHERE application_name = '$name'");
}

sub idempotency_key_handler
{
	my ($program) = @_;
	my $tea = '{"item": "tea", "qty": 2}';
	$node->safe_psql('postgres',
		'CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL, qty int NOT NULL)');

	my $h = start_handler($program, 'handler');
	my $ans = ask($h, {}, $tea);
	is($ans->{status}, 400, 'handler: a request without an Idempotency-Key is answered 400');
	like($ans->{body}{error} // '', qr/key/, '... with the error eo_claim raised');
	is(backend_state('handler'), 'idle', '... and leaves the connection idle, no transaction open');

	$ans = ask($h, { 'Idempotency-Key' => '7f3c' }, $tea);
	is($ans->{status}, 201, 'handler: then a request with a key is answered 201');
	my $id = $ans->{body}{id};
	ok(defined $id, '... with the new order\'s id');
	is(count('orders'), 1, '... and the order is committed (counted from another connection)');
	# (a key claimed in a transaction left open makes eo_status wait)
	my (undef, $state) = $node->psql('postgres',
		"SET statement_timeout = '10s'; SELECT state FROM eo_status('orders:7f3c')");
	is($state, 'done', '... and so is its key');

	$ans = ask($h, { 'Idempotency-Key' => '7f3c' }, $tea);
	is($ans->{status}, 201, 'handler: its retry is answered 201 again');
	is_deeply($ans->{body}, { id => $id }, '... with the same body');
	is(count('orders'), 1, '... and no second order');

	$ans = ask($h, { 'Idempotency-Key' => '7f3c' }, '{"item": "tea", "qty": 3}');
	is($ans->{status}, 422, 'handler: the key with another body is answered 422');
	is(count('orders'), 1, '... and no second order');

	my ($rc, $err) = finish_handler($h);
	is($rc, 0, 'handler: exits 0 at the end of its input') or diag $err;

	# Why the page says autocommit=True: the same program on psycopg's
	# default connection answers alike and commits nothing.
	my $text = slurp_file($program);
	my $edits = ($text =~ s/, autocommit=True\)/)/g) || 0;
	is($edits, 1, 'handler: connects with autocommit=True, once');
	my $default = "${PostgreSQL::Test::Utils::tmp_check}/handler_default_connection.py";
	open my $fh, '>', $default or die "cannot write $default: $!";
	print $fh $text;
	close $fh;
	$h = start_handler($default, 'handler_default');
	is(ask($h, {}, $tea)->{status}, 400, 'default connection: no key, 400');
	is(backend_state('handler_default'), 'idle in transaction',
		'... and the connection stays idle in a transaction');
	is(ask($h, { 'Idempotency-Key' => '9a1b' }, $tea)->{status}, 201,
		'default connection: a request with a key is answered 201');
	is(count('orders'), 1, '... but its order is not committed (the lost write the page warns of)');
	($rc, $err) = finish_handler($h);
	is(count('orders'), 1, '... nor after the program ends') or diag $err;
}

# ---- recovery points ------------------------------------------------------

# One run of the program: (exit status, stdout decoded or undef, stderr).
sub book_ride
{
	my ($program, @args) = @_;
	my ($out, $err) = ('', '');
	local $ENV{EO_DSN} = dsn('recovery_point');
	IPC::Run::run([ $python, $program, @args ],
		'>', \$out, '2>', \$err, IPC::Run::timeout($timeout));
	my $rc = $? >> 8;
	return ($rc, ($out =~ /\S/ ? $json->decode($out) : undef), $err);
}

sub recovery_point
{
	my ($program) = @_;
	$node->safe_psql(
		'postgres', q{
CREATE TABLE rides (id bigserial PRIMARY KEY, request text UNIQUE NOT NULL);
CREATE TABLE card_charges (id bigserial PRIMARY KEY, idempotency_key text UNIQUE NOT NULL,
                           amount int NOT NULL);
CREATE TABLE receipts (idempotency_key text PRIMARY KEY, ride_id bigint NOT NULL);
});
	my $counts = sub {
		$node->safe_psql('postgres',
			'SELECT (SELECT count(*) FROM rides), (SELECT count(*) FROM card_charges),'
			  . ' (SELECT count(*) FROM receipts)');
	};

	my ($rc, $out, $err) = book_ride($program, 'ride:42', '1 second', '--die-after-charge');
	is($rc, 3, 'recovery points: the first worker dies right after the charge') or diag $err;
	is( $node->safe_psql('postgres',
			"SELECT state, recovery_point, recovery_state FROM eo_keys() WHERE key = 'ride:42'"),
		'p|ride_created|{"ride_id": 1}',
		'... its lease held, the point of step 1 recorded');
	is($counts->(), '1|1|0', '... one ride, one charge, no receipt');

	$node->poll_query_until('postgres',
		"SELECT lease_expires_at < clock_timestamp() FROM eo_keys() WHERE key = 'ride:42'")
	  or die 'the lease of ride:42 did not expire';
	($rc, $out, $err) = book_ride($program, 'ride:42');
	is($rc, 0, 'recovery points: the next worker, once the lease ran out, finishes') or diag $err;
	is_deeply($out, [ 'done', { ride_id => 1, charge => 'ch_1' } ],
		'... from step 2, with the ride of step 1 and the first charge\'s id');
	is($counts->(), '1|1|1', '... no second ride, no second charge, one receipt');
	is( $node->safe_psql('postgres', "SELECT state, attempts, result FROM eo_status('ride:42')"),
		'done|2|{"charge": "ch_1", "ride_id": 1}',
		'... and the key is done, in two attempts');

	($rc, $out, $err) = book_ride($program, 'ride:42');
	is($rc, 0, 'recovery points: a redelivery') or diag $err;
	is_deeply($out, [ 'duplicate', { ride_id => 1, charge => 'ch_1' } ],
		'... is a duplicate, answered with the stored result');
	is($counts->(), '1|1|1', '... and does nothing again');
}
