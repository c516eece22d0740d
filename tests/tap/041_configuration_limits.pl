# leaf_id configuration limits that give SQLSTATE 53400
# (configuration_limit_exceeded) and no ID:
#  - registry full: the 1024 snowflake worker ids 0..1023 of leaf_worker all
#    belong to other node names, so this node cannot claim one;
#  - databases full: more databases use leaf_id than leaf_id.max_databases.
# (Tag slots full is 005, no background worker slot is 040.)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SegmentTap;
use SnowflakeTap qw(snowflake_status);

my $node = PostgreSQL::Test::Cluster->new('limits');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'leaf_id'
leaf_id.max_databases = 2
max_worker_processes = 16
lc_messages = 'C'
});
$node->start;

# --- registry full -----------------------------------------------------------
# One transaction: the worker never sees leaf_worker with a free id.
$node->safe_psql('postgres', q{
BEGIN;
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_worker (worker_id, node_name)
  SELECT g, 'other-node-' || g FROM generate_series(0, 1023) g;
COMMIT;
});
my $registry_sql = q{SELECT count(*), count(DISTINCT worker_id), min(worker_id), max(worker_id),
  count(*) FILTER (WHERE node_name LIKE 'other-node-%') FROM leaf_id_catalog.leaf_worker};
is($node->safe_psql('postgres', $registry_sql), '1024|1024|0|1023|1024',
	'premise: leaf_worker holds worker ids 0..1023, all of other nodes');

for my $attempt (1 .. 2)
{
	my $r = try_sql($node, 'postgres', 'SELECT leaf_snowflake_next()');
	is($r->{sqlstate}, '53400', "registry full, call $attempt: SQLSTATE 53400")
	  or diag $r->{err};
	like($r->{err}, qr/ERROR:\s+53400:\s+all 1024 snowflake worker ids in leaf_worker are taken/,
		"registry full, call $attempt: the message says all 1024 worker ids are taken");
	is($r->{out}, '', "registry full, call $attempt: no ID");
}
is($node->safe_psql('postgres', $registry_sql), '1024|1024|0|1023|1024',
	'registry full: leaf_worker is left as it was');

# the refusal was the registry's: once one id is released, the claim takes it
$node->safe_psql('postgres',
	q{UPDATE leaf_id_catalog.leaf_worker SET node_name = 'released:' || worker_id WHERE worker_id = 700});
my $r = wait_for_number($node, 'postgres', 'SELECT leaf_snowflake_next()', 30);
ok($r->{ok}, 'after worker id 700 is released, snowflake IDs are issued')
  or diag "psql exit $r->{ret}, stderr: $r->{err}";
is(snowflake_status($node, 'worker_id'), '700', 'the node claimed the released worker id 700');

# --- databases full ------------------------------------------------------------
# postgres uses leaf_id (one database slot); d1 takes the second and last.
for my $db ('d1', 'd2')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, q{
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('t', 100, 10);
});
}
$r = try_sql($node, 'd1', "SELECT leaf_segment_next('t')");
is($r->{out}, '100', 'd1 takes the second database slot: its tag t hands out 100')
  or diag $r->{err};

for my $call ("leaf_segment_next('t')", 'leaf_snowflake_next()')
{
	$r = try_sql($node, 'd2', "SELECT $call");
	is($r->{sqlstate}, '53400', "databases full: d2's $call fails with 53400")
	  or diag $r->{err};
	like($r->{err}, qr/ERROR:\s+53400:[^\n]*leaf_id\.max_databases = 2/,
		"databases full: the message names leaf_id.max_databases");
	is($r->{out}, '', "databases full: no ID for d2's $call");
}
is($node->safe_psql('d2', "SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 't'"),
	'100', 'databases full: nothing was reserved for d2');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'leaf_id % worker' AND datname = 'd2'"),
	'0', 'databases full: no leaf_id worker runs for d2');

$node->stop;
done_testing();
