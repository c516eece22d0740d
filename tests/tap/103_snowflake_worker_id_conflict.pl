# leaf_id snowflake mode: a configured worker id (leaf_id.worker_id) that
# leaf_worker assigns to another node name is refused: leaf_snowflake_next()
# fails with SQLSTATE 55000 and returns no ID, the registry row is left alone.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Run SQL with verbose errors. Returns (rc, stdout, stderr, sqlstate).
sub try_sql
{
	my ($node, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql(
		'postgres', "\\set VERBOSITY verbose\n$sql",
		stdout => \$out,
		stderr => \$err,
		timeout => 60);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($rc, $out, $err, $state);
}

my $node = PostgreSQL::Test::Cluster->new('snowflake_conflict');
$node->init;
$node->append_conf('postgresql.conf', <<'CONF');
shared_preload_libraries = 'leaf_id'
leaf_id.refill_timeout = 20s
CONF
$node->start;
$node->safe_psql('postgres', <<'SQL');
CREATE EXTENSION leaf_id;
INSERT INTO leaf_worker (worker_id, node_name) VALUES (7, 'someone-else');
CREATE TABLE ids (id bigint);
SQL
my $my_node = $node->safe_psql('postgres',
	q{SELECT system_identifier || ':' || current_setting('port') FROM pg_control_system()});

$node->append_conf('postgresql.conf', "leaf_id.worker_id = 7\n");
$node->restart;

for my $attempt (1 .. 2)
{
	my ($rc, $out, $err, $state) = try_sql($node, 'SELECT leaf_snowflake_next()');
	isnt($rc, 0, "call $attempt: leaf_snowflake_next() fails");
	is($state, '55000', "call $attempt: SQLSTATE 55000 (object not in prerequisite state)")
	  or diag $err;
	like($err, qr/someone-else/, "call $attempt: the message names the owner of worker id 7")
	  or diag $err;
	is($out, '', "call $attempt: no ID is returned");
}

# Also inside an INSERT: nothing is inserted.
my ($rc, $out, $err, $state) =
  try_sql($node, 'INSERT INTO ids SELECT leaf_snowflake_next() FROM generate_series(1, 10)');
is($state, '55000', 'INSERT ... leaf_snowflake_next(): SQLSTATE 55000') or diag $err;
is($node->safe_psql('postgres', 'SELECT count(*) FROM ids'), '0', 'no row was inserted');

is( $node->safe_psql(
		'postgres', q{SELECT worker_id, node_name, last_timestamp IS NULL FROM leaf_worker ORDER BY worker_id}),
	"7|someone-else|t",
	'leaf_worker: row 7 still belongs to someone-else, no mark written, no row for this node');

isnt($node->safe_psql('postgres', 'SELECT state FROM leaf_snowflake_status'),
	'ready', 'status is not ready');

# The owner's name is exactly what makes the difference: take the name, and
# the same configured id works (its IDs carry 7).
$node->append_conf('postgresql.conf', "leaf_id.node_name = 'someone-else'\n");
$node->restart;
($rc, $out, $err, $state) = try_sql($node, 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');
is($out, '7', 'as node someone-else, the configured worker id 7 is accepted') or diag $err;
is($node->safe_psql('postgres', 'SELECT worker_id, worker_id_source, node_name FROM leaf_snowflake_status'),
	'7|setting|someone-else', 'status: 7 from the setting, node someone-else');

# And a free configured id is taken by this node (a new row).
$node->append_conf('postgresql.conf', "leaf_id.node_name = ''\nleaf_id.worker_id = 8\n");
$node->restart;
($rc, $out, $err, $state) = try_sql($node, 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');
is($out, '8', 'a free configured worker id (8) is accepted') or diag $err;
is( $node->safe_psql('postgres', q{SELECT worker_id, node_name FROM leaf_worker ORDER BY worker_id}),
	"7|someone-else\n8|$my_node",
	'leaf_worker: 8 registered for this node, 7 unchanged');

$node->stop;
done_testing();
