# leaf_id on Citus (membership changes): nodes removed on
# one side of a partition.
#
# The coordinator disables and then removes worker1 and worker2 while both
# are live (as an operator on the wrong side of a partition would, following
# the dead-node procedure to its end). Its Citus metadata then lists its own
# copy of leaf_worker only; worker1's and worker2's still list all three,
# and they keep renewing their leases on each other's copies, a majority of
# three. Before the pinned copies, the coordinator's release of worker1's
# id wrote its own copy, which was every copy it listed, and its claim of
# the id then issued with it while worker1 still did.
#
# Now each row pins the copies its holder's lease counts, and a release
# must reach every pinned copy but the holder's: refused with 55000, and the
# coordinator never issues with worker1's id.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use CitusTap;
use SegmentTap qw(wait_until try_sql);

my ($coord, $w1, $w2) = citus_cluster();
my %wid = map { $_->name => leaf_worker_id_of($_) } ($coord, $w1, $w2);
my $id = $wid{worker1};
$_->safe_psql('postgres', DRAWLOG_SQL) for ($coord, $w1, $w2);

# --- every claim pinned the three copies, with its holder's own -------------------
my $pins = $coord->safe_psql(
	'postgres', q{
SELECT string_agg(w.worker_id || ':' || pg_catalog.cardinality(w.copies) || ':'
                  || (w.holder_copy = n.groupid), ',' ORDER BY w.worker_id)
FROM leaf_id_catalog.leaf_worker w
JOIN pg_dist_node n ON n.noderole = 'primary'
JOIN (VALUES } . join(', ', map { "($wid{$_->name}, " . $_->port . ')' } ($coord, $w1, $w2)) . q{) h(id, port)
  ON h.id = w.worker_id AND n.nodeport = h.port});
is($pins, join(',', map { "$_:3:true" } sort { $a <=> $b } values %wid),
	'each node pinned the three copies of leaf_worker in its row, its own as the holder\'s');

start_drawing($w1, 'w1_snow', 'snowflake');

# --- the coordinator disables and removes both live workers --------------------------
for my $w ($w1, $w2)
{
	$coord->safe_psql('postgres', "SELECT citus_disable_node('127.0.0.1', " . $w->port . ', synchronous => true)');
}
for my $w ($w1, $w2)
{
	$coord->safe_psql('postgres', "SELECT citus_remove_node('127.0.0.1', " . $w->port . ')');
}
is($coord->safe_psql('postgres', q{SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary'}),
	1, 'premise: the coordinator lists itself only');
is( $w1->safe_psql('postgres',
		q{SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_shard s USING (shardid) WHERE s.logicalrelid = 'leaf_id_catalog.leaf_worker'::regclass}),
	3, 'premise: worker1 still lists three copies of leaf_worker');

# --- the release is refused -----------------------------------------------------------
my $r = try_sql($coord, 'postgres', "SELECT leaf_snowflake_release_worker_id($id)");
is($r->{sqlstate}, '55000', "the coordinator's release of worker1's id $id is refused with 55000")
  or diag $r->{err} . $r->{out};
like($r->{err}, qr/cannot release snowflake worker id $id: the copies of leaf_worker that its holder's lease counts are not all on active nodes here/,
	'saying why');
is($coord->safe_psql('postgres', "SELECT node_name FROM leaf_id_catalog.leaf_worker WHERE worker_id = $id"),
	$w1->safe_psql('postgres', 'SELECT node_name FROM leaf_snowflake_status'),
	"the row of id $id is worker1's still");

# --- the coordinator tries to take the id ---------------------------------------------
$coord->safe_psql('postgres', "ALTER SYSTEM SET leaf_id.worker_id = $id; SELECT pg_reload_conf()");
my %calls = snowflake_calls($coord, 8, [$id]);
my ($took, $refused, @coord_ids) = ($calls{with}, $calls{refused}, @{ $calls{ids} });
$r = $calls{last};
is($took, 0, "the coordinator never issues with worker1's id $id");
cmp_ok($refused, '>', 0, 'its calls are refused');
is(join(',', map { "$_ x$calls{states}{$_}" } sort keys %{ $calls{states} }), "55000 x$refused",
	'every refusal is 55000') or diag explain $calls{errors};

# worker1 went on issuing with its id all along (its majority: worker1 and worker2)
my $w1_since = $w1->safe_psql('postgres',
	"SELECT count(*) FROM drawlog WHERE session = 'w1_snow' AND id IS NOT NULL AND ((id >> 12) & 1023) = $id AND t > extract(epoch FROM now()) - 6");
cmp_ok($w1_since, '>', 0, "premise: worker1 issued with id $id meanwhile");
stop_drawing();

# --- every snowflake ID of both nodes: none twice ------------------------------------
my (%seen, $dup);
$dup += $seen{$_}++ ? 1 : 0
  for @coord_ids, split /\n/, $w1->safe_psql('postgres', 'SELECT id FROM drawlog WHERE id IS NOT NULL');
is($dup, 0, 'no snowflake ID issued twice');

$_->stop for ($w2, $w1, $coord);
done_testing();
