# Security on Citus: the database owner, not a superuser, owns the schema
# leaf_id and its reference tables live in (public, of pg_database_owner).
# She renames it (Citus takes the rename to every node) to names built to end
# a string literal, a dollar quote or an identifier early and call her
# function. The workers' statements on Citus (the placements of leaf_alloc
# and leaf_worker, the renewal of each copy of leaf_worker, sent to the other
# node as a DO statement, and the reads of the other copies' marks) must go
# on under every name, and her function must never run as a superuser on any
# node.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CitusTap;
use HostileNames;

my ($coord, @workers) = citus_cluster(workers => 1, conf => "leaf_id.tag_resync_interval = 1\n");
my @nodes = ($coord, @workers);
plant_mallory($_, 'SET citus.enable_ddl_propagation = off; ') for @nodes;

my $tags = join ', ', map { "('" . ($_ =~ s/'/''/gr) . "', 5)" } HOSTILE_TAGS;
$coord->safe_psql('postgres', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES $tags");
# both nodes hold a worker id before the first rename: renewals and claims
# then run under each name
is(join(',', sort map { leaf_worker_id_of($_) } @nodes), '0,1', 'two nodes, two worker ids');

my $schema = 'public';
my $round = 0;
for my $name (HOSTILE_SCHEMA_NAMES)
{
	$round++;
	$schema = hostile_round(node => $coord, all => \@nodes, from => $schema, to => $name,
		round => $round);
	is( $workers[0]->safe_psql('postgres',
			"SELECT count(*) FROM pg_namespace WHERE nspname = '" . ($name =~ s/'/''/gr) . "'"),
		'1', "$name: the rename reached the worker node");
}
my $qs = quote_ident($schema);
# the renewals reached both copies: each node's copy of leaf_worker has
# both rows renewed within the last seconds
for my $n (@nodes)
{
	is( $n->safe_psql('postgres',
			"SELECT count(*) FROM leaf_id_catalog.leaf_worker WHERE heartbeat_at > now() - interval '5 s'"),
		'2', $n->name . ': its copy of leaf_worker has both nodes\' renewals');
}
done_testing();
