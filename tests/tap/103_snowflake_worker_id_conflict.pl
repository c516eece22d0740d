# leaf_id snowflake mode: a configured worker id (leaf_id.worker_id) that
# leaf_worker assigns to another node name is refused: leaf_snowflake_next()
# fails with SQLSTATE 55000 and returns no ID, the registry row is left alone.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SnowflakeTap;

my $node = snowflake_node('snowflake_conflict', "leaf_id.refill_timeout = 20s\n", <<'SQL');
INSERT INTO leaf_id_catalog.leaf_worker (worker_id, node_name) VALUES (7, 'someone-else');
CREATE TABLE ids (id bigint);
SQL
my $my_node = default_node_name($node);

$node->append_conf('postgresql.conf', "leaf_id.worker_id = 7\n");
$node->restart;

for my $attempt (1 .. 2)
{
	my $r = try_sql($node, 'postgres', 'SELECT leaf_snowflake_next()');
	isnt($r->{ret}, 0, "call $attempt: leaf_snowflake_next() fails");
	is($r->{sqlstate}, '55000', "call $attempt: SQLSTATE 55000 (object not in prerequisite state)")
	  or diag $r->{err};
	like($r->{err}, qr/someone-else/, "call $attempt: the message names the owner of worker id 7")
	  or diag $r->{err};
	is($r->{out}, '', "call $attempt: no ID is returned");
}

# Also inside an INSERT: nothing is inserted.
my $r = try_sql($node, 'postgres',
	'INSERT INTO ids SELECT leaf_snowflake_next() FROM generate_series(1, 10)');
is($r->{sqlstate}, '55000', 'INSERT ... leaf_snowflake_next(): SQLSTATE 55000') or diag $r->{err};
is($node->safe_psql('postgres', 'SELECT count(*) FROM ids'), '0', 'no row was inserted');

is( $node->safe_psql(
		'postgres', q{SELECT worker_id, node_name, last_timestamp IS NULL FROM leaf_id_catalog.leaf_worker ORDER BY worker_id}),
	"7|someone-else|t",
	'leaf_worker: row 7 still belongs to someone-else, no mark written, no row for this node');

isnt(snowflake_status($node, 'state'),
	'ready', 'status is not ready');

# The owner's name is exactly what makes the difference: take the name, and
# the same configured id works (its IDs carry 7).
$node->append_conf('postgresql.conf', "leaf_id.node_name = 'someone-else'\n");
$node->restart;
$r = try_sql($node, 'postgres', 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');
is($r->{out}, '7', 'as node someone-else, the configured worker id 7 is accepted') or diag $r->{err};
is(snowflake_status($node, 'worker_id, worker_id_source, node_name'),
	'7|setting|someone-else', 'status: 7 from the setting, node someone-else');

# And a free configured id is taken by this node (a new row).
$node->append_conf('postgresql.conf', "leaf_id.node_name = ''\nleaf_id.worker_id = 8\n");
$node->restart;
$r = try_sql($node, 'postgres', 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');
is($r->{out}, '8', 'a free configured worker id (8) is accepted') or diag $r->{err};
is( $node->safe_psql('postgres', q{SELECT worker_id, node_name FROM leaf_id_catalog.leaf_worker ORDER BY worker_id}),
	"7|someone-else\n8|$my_node",
	'leaf_worker: 8 registered for this node, 7 unchanged');

# Another database of the server configured with an id (ALTER DATABASE ...
# SET leaf_id.worker_id) keeps it: a database that claims from its registry
# first takes another id, and the configured one then starts (it
# was refused with 55000, its id taken by the first).
$node->safe_psql('postgres', 'CREATE DATABASE conf_a');
$node->safe_psql('postgres', 'ALTER DATABASE conf_a SET leaf_id.worker_id = 0');
$node->safe_psql('postgres', 'CREATE DATABASE claim_b');
$node->safe_psql('postgres', 'ALTER DATABASE claim_b SET leaf_id.worker_id = -1');
$node->safe_psql('claim_b', 'CREATE EXTENSION leaf_id');
$r = try_sql($node, 'claim_b', 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');
is($r->{out}, '1', 'claim_b claims from its empty registry: 1, not 0, which conf_a is configured with')
  or diag $r->{err};
$node->safe_psql('conf_a', 'CREATE EXTENSION leaf_id');
$r = try_sql($node, 'conf_a', 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');
is($r->{sqlstate}, undef, 'conf_a starts with its configured worker id') or diag $r->{err};
is($r->{out}, '0', 'conf_a issues with worker id 0');

$node->stop;
done_testing();
