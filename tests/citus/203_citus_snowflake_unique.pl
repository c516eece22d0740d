# leaf_id on Citus: snowflake IDs unique across the cluster.
#
# leaf_worker is a reference table: each of the three nodes claims its own
# worker id from it and keeps it across a restart of that node and across a
# restart of the whole cluster. Then 9 sessions at once (3 on each node) draw
# IDs into a distributed table: no ID twice, and each node's IDs carry its
# worker id.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CitusTap;
use SnowflakeTap qw(issued_after_restart);

use constant PER_SESSION => 40_000;

my ($coord, @workers) = citus_cluster();
my @nodes = ($coord, @workers);

my $name_sql = q{SELECT system_identifier || ':' || current_setting('port') FROM pg_control_system()};
my %wid = map { $_->name => leaf_worker_id_of($_) } @nodes;
is(join(',', sort values %wid), '0,1,2', 'the three nodes claimed three different worker ids')
  or diag explain \%wid;
for my $n (@nodes)
{
	my $me = $n->safe_psql('postgres', $name_sql);
	is( $coord->safe_psql('postgres', "SELECT worker_id FROM leaf_id_catalog.leaf_worker WHERE node_name = '$me'"),
		$wid{ $n->name },
		$n->name . ': the shared registry (read on the coordinator) has its row under its node name');
	is($n->safe_psql('postgres', 'SELECT worker_id_source FROM leaf_snowflake_status'),
		'leaf_worker', $n->name . ': its worker id came from the registry');
}

# A restart of one worker while the others run, and of the whole cluster.
# On Citus a node being stopped does not write its exact last millisecond:
# Citus ends a distributed statement early, with only the node's own copy
# written and no error, when a terminate is pending while interrupts are
# held, so the clean close leaves the row as it is (lease and owner token,
# on every copy alike). The restart keeps its owner token (owner file) and
# waits for the lease to pass (up to leaf_id.lease_ahead, 3 s);
# issued_after_restart allows refusals meanwhile (58000).
my $token_sql = sub {
	my ($id) = @_;
	return qq{SELECT string_agg(DISTINCT result, ',') FROM run_command_on_placements('leaf_id_catalog.leaf_worker',
	  \$\$SELECT owner_token FROM %s WHERE worker_id = $id\$\$)};
};
my $w1_token = $coord->safe_psql('postgres', $token_sql->($wid{ $workers[1]->name }));
like($w1_token, qr/^\d+$/, 'premise: every copy of leaf_worker has one token for ' . $workers[1]->name);
$workers[1]->restart;
ok($workers[1]->log_contains(qr/closed; its leaf_worker row keeps its lease/),
	$workers[1]->name . ': its clean shutdown left the row as it was (no partial write to some copies)');
my $r1 = issued_after_restart($workers[1], 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id',
	$workers[1]->name . ' after its restart', seconds => 15);
is($r1->{last}{out}, $wid{ $workers[1]->name }, $workers[1]->name . ' keeps its worker id across its restart');
is($coord->safe_psql('postgres', $token_sql->($wid{ $workers[1]->name })), $w1_token,
	'every copy of its row still has the same token: the restart kept it');
$_->stop for reverse @nodes;
$_->start for @nodes;
for my $n (@nodes)
{
	my $r = issued_after_restart($n, 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id',
		$n->name . ' after a restart of the cluster', seconds => 15);
	is($r->{last}{out}, $wid{ $n->name }, $n->name . ' keeps its worker id across a restart of the cluster');
}
is($coord->safe_psql('postgres', 'SELECT count(*) FROM leaf_id_catalog.leaf_worker'), '3',
	'the registry still has three rows');

# 9 sessions at once, 3 per node, all IDs into one distributed table
$coord->safe_psql(
	'postgres', q{
CREATE TABLE ids (id bigint NOT NULL, node text NOT NULL);
SELECT create_distributed_table('ids', 'id');
});
my @sessions;
for my $n (@nodes)
{
	push @sessions,
	  map {
		[ $n, $n->name . "_$_",
			"INSERT INTO ids SELECT leaf_snowflake_next(), '" . $n->name
			  . "' FROM generate_series(1, " . PER_SESSION . ");\n" ]
	  } 1 .. 3;
}
my $res = run_sessions(300, @sessions);
is($res->{ $_->[1] }{rc}, 0, "session $_->[1] drew its IDs without an error")
  or diag $res->{ $_->[1] }{err}
  for @sessions;
my $total = 9 * PER_SESSION;
is($coord->safe_psql('postgres', 'SELECT count(*), count(DISTINCT id) FROM ids'),
	"$total|$total", "all $total IDs are there, none twice");
for my $n (@nodes)
{
	is( $coord->safe_psql(
			'postgres',
			"SELECT string_agg(DISTINCT ((id >> 12) & 1023)::text, ',') FROM ids WHERE node = '"
			  . $n->name . "'"),
		$wid{ $n->name },
		$n->name . "'s IDs all carry its worker id $wid{ $n->name }");
}
# the nodes really drew at the same time: their millisecond ranges overlap
is( $coord->safe_psql(
		'postgres', q{SELECT max(lo) < min(hi) FROM (SELECT min(id >> 22) lo, max(id >> 22) hi FROM ids GROUP BY node) s}),
	't', 'the three nodes issued during a common time span');

$_->stop for reverse @nodes;
done_testing();
