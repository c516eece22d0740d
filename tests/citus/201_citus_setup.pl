# leaf_id on Citus: the set-up.
#
# A coordinator and two workers; CREATE EXTENSION leaf_id on the coordinator
# reaches every node, and one statement (CitusTap::SHARE_TABLES_SQL) makes
# leaf_alloc and leaf_worker reference tables with a copy on every node. Then a
# third worker is added with citus_add_node: it gets the extension, knows the
# shared tables, draws IDs from them and claims its own snowflake worker id;
# replicate_reference_tables() gives it its own copy of the tables.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CitusTap;

my ($coord, @workers) = citus_cluster();
my @nodes = ($coord, @workers);

# the placements of the two shared tables, as "port:table" sorted
my $placements_sql = q{
SELECT string_agg(n.nodeport || ':' || s.logicalrelid::regclass, ' ' ORDER BY n.nodeport, s.logicalrelid::regclass::text)
FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) JOIN pg_dist_shard s USING (shardid)
WHERE s.logicalrelid IN ('leaf_id_catalog.leaf_alloc'::regclass, 'leaf_id_catalog.leaf_worker'::regclass)};
my $want_placements = sub {
	join ' ', map { my $p = $_->port; ("$p:leaf_id_catalog.leaf_alloc", "$p:leaf_id_catalog.leaf_worker") } sort { $a->port <=> $b->port } @_;
};

my $version = $nodes[0]->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'leaf_id'");
for my $n (@nodes)
{
	is($n->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'leaf_id'}),
		$version, $n->name . ': CREATE EXTENSION leaf_id on the coordinator created it here');
	is( $n->safe_psql(
			'postgres', q{
SELECT string_agg(logicalrelid::regclass || ':' || partmethod::text || repmodel::text, ' ' ORDER BY logicalrelid::regclass::text)
FROM pg_dist_partition WHERE logicalrelid IN ('leaf_id_catalog.leaf_alloc'::regclass, 'leaf_id_catalog.leaf_worker'::regclass)}),
		'leaf_id_catalog.leaf_alloc:nt leaf_id_catalog.leaf_worker:nt',
		$n->name . ': leaf_alloc and leaf_worker are reference tables (partmethod n, repmodel t)');
}
is($coord->safe_psql('postgres', $placements_sql), $want_placements->(@nodes),
	'every node holds a copy of both shared tables');

# a tag made on the coordinator serves every node, each from its own range
$coord->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('order', 1000)});
my %first;
for my $n (@nodes)
{
	$first{ $n->name } = $n->safe_psql('postgres', q{SELECT leaf_segment_next('order')});
	like($first{ $n->name }, qr/^\d+$/, $n->name . ': draws an ID of a tag inserted on the coordinator');
}
# each node's first refill reserves its segment of 1000 and, for its reserve
# (leaf_id.citus_reserve, 4 by default), 4 segments more: 5000 IDs
my @starts = sort { $a <=> $b } values %first;
is_deeply(\@starts, [ 1, 5001, 10001 ],
	'the three nodes drew from three different ranges (a segment of 1000 and a reserve of 4000 each)')
  or diag explain \%first;
is($coord->safe_psql('postgres', q{SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'order'}),
	'15001', 'leaf_alloc recorded the three reservations');
is( $coord->safe_psql(
		'postgres', q{
SELECT count(DISTINCT result) FROM run_command_on_placements('leaf_id_catalog.leaf_alloc',
  $$SELECT max_id FROM %s WHERE biz_tag = 'order'$$)}),
	'1', 'every copy of leaf_alloc says the same max_id');

# snowflake: each node its own worker id from the shared registry
my %wid = map { $_->name => leaf_worker_id_of($_) } @nodes;
is(join(',', sort map { $wid{$_} } keys %wid), '0,1,2', 'the three nodes claimed worker ids 0, 1, 2')
  or diag explain \%wid;

# --- a node added later ------------------------------------------------------
my $late = citus_node('worker3');
add_citus_node($coord, $late);
is($late->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'leaf_id'}),
	$version, 'citus_add_node created leaf_id on the new node');
is( $late->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_dist_partition
WHERE logicalrelid IN ('leaf_id_catalog.leaf_alloc'::regclass, 'leaf_id_catalog.leaf_worker'::regclass) AND partmethod = 'n'}),
	'2', 'the new node knows leaf_alloc and leaf_worker as reference tables');
my $late_placements = $coord->safe_psql('postgres', $placements_sql);
note "placements right after citus_add_node: $late_placements";
my $late_id = $late->safe_psql('postgres', q{SELECT leaf_segment_next('order')});
is($late_id, '15001', 'the new node draws from the next range of the shared tag');
is(leaf_worker_id_of($late), '3', 'the new node claims the next free worker id, 3');
is($coord->safe_psql('postgres', 'SELECT count(*), count(DISTINCT node_name) FROM leaf_id_catalog.leaf_worker'),
	'4|4', 'the registry has one row per node');

# Citus 13 does not copy reference tables to a node at citus_add_node; until
# replicate_reference_tables() (or a shard move or create_distributed_table)
# the new node reads and writes the other nodes' copies.
isnt($late_placements, $want_placements->(@nodes, $late),
	'right after citus_add_node the new node has no copy of the shared tables yet');
$coord->safe_psql('postgres', q{SELECT replicate_reference_tables('block_writes')});
is($coord->safe_psql('postgres', $placements_sql), $want_placements->(@nodes, $late),
	'after replicate_reference_tables() it holds a copy of both');
is( $coord->safe_psql(
		'postgres', q{
SELECT count(DISTINCT result) FROM run_command_on_placements('leaf_id_catalog.leaf_worker',
  $$SELECT string_agg(worker_id || '=' || node_name, ',' ORDER BY worker_id) FROM %s$$)}),
	'1', 'every copy of leaf_worker, the new one too, holds the same registry');
$late->safe_psql('postgres', q{SELECT leaf_segment_next('order') FROM generate_series(1, 1000)});
is($late->safe_psql('postgres', q{SELECT leaf_segment_next('order')}), '20002',
	'the new node refills from its own copy: the next range starts at 20001');

$_->stop for ($late, reverse @nodes);
done_testing();
