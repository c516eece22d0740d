# leaf_id on Citus: a node added with citus_add_node, before
# replicate_reference_tables, has no copy of its own of leaf_worker. It reads
# the registry through Citus, which reads one copy. It takes over the worker
# id of a live holder that an operator released, while the copy Citus reads
# missed the holder's latest renewals.
#
# worker1 cannot reach the coordinator (pg_dist_poolinfo on worker1 sends its
# connections to the coordinator to a closed port): its renewals reach its
# own copy and worker2's (a majority), and the coordinator's copy of its row
# falls behind its lease. The coordinator releases worker1's id, and worker3,
# just added, takes it (leaf_id.worker_id set to it). worker3 must issue only
# above every millisecond worker1 may have used: the highest mark over every
# copy, not the one Citus read. Checked: worker3's first millisecond with the
# id is above worker1's last, and no ID twice.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use CitusTap;
use SegmentTap qw(wait_until);

my ($coord, $w1, $w2) = citus_cluster();
my $id = leaf_worker_id_of($w1);
$_->safe_psql('postgres', DRAWLOG_SQL) for ($w1, $w2);

my $shard = shard_of($w2, 'leaf_worker');
my $mark_on = sub {
	my ($node) = @_;
	return $node->safe_psql('postgres', "SELECT last_timestamp FROM $shard WHERE worker_id = $id");
};

# --- worker3 joins, without a copy of the reference tables ----------------------
my $w3 = citus_node('worker3');
add_citus_node($coord, $w3);
$w3->safe_psql('postgres', DRAWLOG_SQL);
is($w3->safe_psql('postgres', "SELECT count(*) FROM pg_class WHERE relname = '$shard'"), 0,
	'premise: worker3 has no copy of leaf_worker of its own');

# --- worker1 loses the coordinator --------------------------------------------------
my $coordnode = $w1->safe_psql('postgres', 'SELECT nodeid FROM pg_dist_node WHERE nodeport = ' . $coord->port);
$w1->safe_psql('postgres', "INSERT INTO pg_dist_poolinfo VALUES ($coordnode, 'host=127.0.0.1 port=1')");
start_drawing($w1, 'w1_snow', 'snowflake');
my ($stale, $fresh);
ok( wait_until(
		20,
		sub {
			($stale, $fresh) = ($mark_on->($coord), $mark_on->($w2));
			$fresh - $stale > 4000;
		}),
	"premise: the coordinator's copy of worker1's row falls behind (its mark $stale, worker2's $fresh)");

# --- the release, and worker3 takes the id ------------------------------------------
# worker1 stops at its next renewal (within a second): the time is read
# right after the release has committed, in the same psql
my $w1_name = $w1->safe_psql('postgres', 'SELECT node_name FROM leaf_snowflake_status');
my ($released, $t_release) = split /\n/, $coord->safe_psql('postgres',
	"SELECT leaf_snowflake_release_worker_id($id); SELECT extract(epoch FROM clock_timestamp())");
is($released, $w1_name, "the coordinator releases worker1's id $id while worker1 issues with it");
$w3->safe_psql('postgres', "ALTER SYSTEM SET leaf_id.worker_id = $id; SELECT pg_reload_conf()");
start_drawing($w3, 'w3_snow', 'snowflake');
ok( wait_until(
		20,
		sub {
			$w3->safe_psql('postgres', "SELECT count(*) FROM drawlog WHERE session = 'w3_snow' AND id IS NOT NULL")
			  > 100;
		}),
	'worker3 issues snowflake IDs');
sleep_full(2);
stop_drawing();
is($w3->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status'), $id, "worker3 holds id $id");

# --- worker3 issued only above worker1's last millisecond with the id --------------
my $ms_with_id = qq{SELECT (extract(epoch FROM d.timestamp) * 1000)::bigint ms_of, l.t FROM drawlog l,
  leaf_snowflake_decode(l.id) d WHERE l.id IS NOT NULL AND d.worker_id = $id};
my ($w1_last, $w1_after) = split /\|/,
  $w1->safe_psql('postgres', "SELECT max(ms_of), count(*) FILTER (WHERE t >= $t_release) FROM ($ms_with_id) x");
my $w3_first = $w3->safe_psql('postgres', "SELECT min(ms_of) FROM ($ms_with_id) x");
note "worker1's last millisecond with id $id: $w1_last ($w1_after IDs from the release on); worker3's first: $w3_first";
cmp_ok($w1_after, '>', 0, 'premise: worker1 issued with the id after the release (it was live)');
cmp_ok($w3_first, '>', $w1_last, "worker3's IDs with id $id start above worker1's last millisecond with it");

my (%seen, $dup);
$dup = 0;
for my $n ($w1, $w3)
{
	$dup += $seen{$_}++ ? 1 : 0 for split /\n/, $n->safe_psql('postgres', 'SELECT id FROM drawlog WHERE id IS NOT NULL');
}
note 'snowflake IDs issued: ' . scalar(keys %seen);
is($dup, 0, 'no snowflake ID issued twice');

$w1->safe_psql('postgres', 'DELETE FROM pg_dist_poolinfo');
$_->stop for ($w3, $w2, $w1, $coord);
done_testing();
