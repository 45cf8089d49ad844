# Copyright: eo authors.  See README.
#
# A database owner's planner settings do not reach the worker.  With
# ALTER DATABASE ... SET of jit (and its costs at 0), parallel query forced
# (force_parallel_mode on 15, debug_parallel_query later) and its costs at
# 0, the owner's own statements are planned with JIT and a Gather node
# (the settings are in force), while the worker's passes, whose plans
# auto_explain writes to the log, use neither: they would otherwise compile
# code and draw parallel workers from the pool that queries and logical
# replication share, for statements that touch a few rows.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/perl';
use EoTest;
use Time::HiRes qw(usleep);

my $node = EoTest::eo_node('worker_planner', preload => 0, conf => q{
shared_preload_libraries = 'eo, auto_explain'
eo.naptime = 1
log_line_prefix = '%m [%p] %b '
}, eo_in => []);
$node->safe_psql('postgres', q{
CREATE ROLE dbo LOGIN;
CREATE DATABASE shop OWNER dbo;
});
$node->safe_psql('shop', q{
CREATE EXTENSION eo;
SELECT eo_outbox_create('billing', premake => 2);
SELECT eo_claim('some-key');
});

my $forced =
  $node->safe_psql('postgres', q{SELECT count(*) FROM pg_settings WHERE name = 'debug_parallel_query'})
  ? 'debug_parallel_query'
  : 'force_parallel_mode';
$node->safe_psql('shop', qq{
SET ROLE dbo;
ALTER DATABASE shop SET jit = on;
ALTER DATABASE shop SET jit_above_cost = 0;
ALTER DATABASE shop SET jit_inline_above_cost = 0;
ALTER DATABASE shop SET jit_optimize_above_cost = 0;
ALTER DATABASE shop SET $forced = on;
ALTER DATABASE shop SET max_parallel_workers_per_gather = 4;
ALTER DATABASE shop SET parallel_setup_cost = 0;
ALTER DATABASE shop SET parallel_tuple_cost = 0;
ALTER DATABASE shop SET min_parallel_table_scan_size = 0;
ALTER DATABASE shop SET min_parallel_index_scan_size = 0;
});
# (a superuser's setting: the worker honours it, and it shows the plans)
$node->safe_psql('postgres', 'ALTER DATABASE shop SET auto_explain.log_min_duration = 0');

my $plan = $node->safe_psql('shop', q{SET ROLE dbo; EXPLAIN SELECT count(*) FROM pg_class});
like($plan, qr/Gather/, "the owner's settings are in force: its statements get a Gather node");
my $jit = $node->safe_psql('shop', q{SELECT pg_jit_available()}) eq 't';
like($plan, qr/JIT:/, '... and JIT') if $jit;

# Passes that start after the settings were made.
my $offset = -s $node->logfile;
usleep(3_500_000);
my @entries = split /^(?=\d{4}-\d\d-\d\d )/m, slurp_file($node->logfile, $offset);
my @plans = grep { /^\S+ \S+ \S+ \[\d+\] eo worker LOG:  duration: .* plan:/ } @entries;
cmp_ok(scalar @plans, '>', 0, "auto_explain logged the worker's plans");
is(join('', grep { /Gather/ } @plans), '', 'no plan of the worker has a Gather node');
is(join('', grep { /JIT:/ } @plans), '', 'no plan of the worker is compiled by JIT');

$node->stop;
done_testing();
