# leaf_id on Citus: an operator releases the worker id of a
# node that is still live, while one copy of leaf_worker missed its latest
# renewals, and another node takes the id over at once.
#
# worker1 cannot reach worker2 (a partial partition: pg_dist_poolinfo on
# worker1 sends its connections to worker2 to a closed port). worker1's
# renewals then reach its own copy and the coordinator's (a majority), and
# worker2's copy of worker1's row falls behind its lease. The coordinator
# reaches every node, so leaf_snowflake_release_worker_id works, and so does
# worker2's claim of that id (leaf_id.worker_id set to it).
#
# worker1 issues with the id until its next renewal finds the row released.
# worker2 must issue only above every millisecond worker1 may have used: the
# mark of the copies that took worker1's lease, not the stale mark of its own
# copy. Checked: worker2's first millisecond with the id is above worker1's
# last, and no ID twice.
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
use SegmentTap qw(wait_until);

my ($coord, $w1, $w2) = citus_cluster();
my %wid = map { $_->name => leaf_worker_id_of($_) } ($coord, $w1, $w2);
my $id = $wid{worker1};
isnt($wid{worker2}, $id, 'premise: worker1 and worker2 hold different worker ids');
$_->safe_psql('postgres', DRAWLOG_SQL) for ($w1, $w2);

my $shard = shard_of($w2, 'leaf_worker');
my $mark_on = sub {
	my ($node) = @_;
	return $node->safe_psql('postgres', "SELECT last_timestamp FROM $shard WHERE worker_id = $id");
};

# --- worker1 loses worker2 -----------------------------------------------------------
my $w2node = $w1->safe_psql('postgres', 'SELECT nodeid FROM pg_dist_node WHERE nodeport = ' . $w2->port);
$w1->safe_psql('postgres', "INSERT INTO pg_dist_poolinfo VALUES ($w2node, 'host=127.0.0.1 port=1')");
start_drawing($w1, 'w1_snow', 'snowflake');
my ($stale, $fresh);
ok( wait_until(
		20,
		sub {
			($stale, $fresh) = ($mark_on->($w2), $mark_on->($coord));
			$fresh - $stale > 4000;
		}),
	"premise: worker2's copy of worker1's row falls behind (its mark $stale, the coordinator's $fresh)");
my $now_ms = $coord->safe_psql('postgres', q{SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint});
cmp_ok($stale, '<', $now_ms, "premise: worker2's copy holds a lease that has passed");

# --- the release, and worker2 takes the id ---------------------------------------
# worker1 stops at its next renewal (within a second): the time is read
# right after the release has committed, in the same psql
my $w1_name = $w1->safe_psql('postgres', 'SELECT node_name FROM leaf_snowflake_status');
my ($released, $t_release) = split /\n/, $coord->safe_psql('postgres',
	"SELECT leaf_snowflake_release_worker_id($id); SELECT extract(epoch FROM clock_timestamp())");
is($released, $w1_name, "the coordinator releases worker1's id $id while worker1 issues with it");
$w2->safe_psql('postgres', "ALTER SYSTEM SET leaf_id.worker_id = $id; SELECT pg_reload_conf()");
start_drawing($w2, 'w2_snow', 'snowflake');
ok( wait_until(
		20,
		sub {
			$w2->safe_psql('postgres', "SELECT count(*) FROM drawlog WHERE session = 'w2_snow' AND id IS NOT NULL")
			  > 100;
		}),
	'worker2 issues snowflake IDs');
sleep_full(2);
stop_drawing();
is($w2->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status'), $id, "worker2 holds id $id");

# --- worker2 issued only above worker1's last millisecond with the id --------------
my $decode = q{SELECT (extract(epoch FROM d.timestamp) * 1000)::bigint FROM drawlog l,
  leaf_snowflake_decode(l.id) d WHERE l.id IS NOT NULL AND d.worker_id = };
my ($w1_last, $w1_after) = split /\|/, $w1->safe_psql('postgres',
	"SELECT max(ms_of), count(*) FILTER (WHERE t >= $t_release) FROM (SELECT (extract(epoch FROM d.timestamp) * 1000)::bigint ms_of, l.t FROM drawlog l, leaf_snowflake_decode(l.id) d WHERE l.id IS NOT NULL AND d.worker_id = $id) x");
my $w2_first = $w2->safe_psql('postgres', "SELECT min(x) FROM ($decode $id) s(x)");
note "worker1's last millisecond with id $id: $w1_last ($w1_after IDs from the release on); worker2's first: $w2_first";
cmp_ok($w1_after, '>', 0, 'premise: worker1 issued with the id after the release (it was live)');
cmp_ok($w2_first, '>', $w1_last, "worker2's IDs with id $id start above worker1's last millisecond with it");

my (%seen, $dup);
for my $n ($w1, $w2)
{
	$dup += $seen{$_}++ ? 1 : 0 for split /\n/, $n->safe_psql('postgres', 'SELECT id FROM drawlog WHERE id IS NOT NULL');
}
note 'snowflake IDs issued: ' . scalar(keys %seen);
is($dup, 0, 'no snowflake ID issued twice');

# --- worker1 reaches worker2 again: it claims another id ----------------------------
$w1->safe_psql('postgres', 'DELETE FROM pg_dist_poolinfo');
my $r;
ok( wait_until(
		30,
		sub {
			$r = $w1->psql('postgres', 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');
			$r == 0;
		}),
	'worker1 issues again once it reaches worker2');
my $w1_new = $w1->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status');
isnt($w1_new, $id, "worker1 now holds another id ($w1_new)");

$_->stop for ($w2, $w1, $coord);
done_testing();
