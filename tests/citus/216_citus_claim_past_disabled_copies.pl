# leaf_id on Citus (membership changes): copies of
# leaf_worker on disabled nodes.
#
# The coordinator disables worker1 and worker2 while both are live (as an
# operator on the wrong side of a partition would, following the dead-node
# procedure). Writes through Citus then reach the coordinator's copy only.
# worker1 and worker2 keep renewing their leases on each other's copies, a
# majority of three.
#  - The coordinator's release of worker1's id is refused (55000): it would
#    reach one of the copies worker1's lease counts (before the pinned
#    copies it went through, and the coordinator's claim was all that
#    stopped the id being issued twice).
#  - A claim written through Citus meanwhile is refused (55000, naming the
#    disabled nodes): the coordinator moving to a free id.
#  - Once the nodes are active again, the release goes through, and the
#    coordinator's claim of the id issues above every millisecond worker1
#    used, although the activation copies the coordinator's copy of the
#    registry (with older marks) over the others.
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
start_drawing($w1, 'w1_snow', 'snowflake');

# --- the coordinator disables both live workers --------------------------------------
for my $w ($w1, $w2)
{
	$coord->safe_psql('postgres', "SELECT citus_disable_node('127.0.0.1', " . $w->port . ', synchronous => true)');
}
is($coord->safe_psql('postgres', 'SELECT count(*) FROM pg_dist_node WHERE NOT isactive'),
	2, 'premise: the coordinator lists worker1 and worker2 as disabled');

# --- a release is refused --------------------------------------------------------
my $r = try_sql($coord, 'postgres', "SELECT leaf_snowflake_release_worker_id($id)");
is($r->{sqlstate}, '55000', "the coordinator's release of worker1's id $id is refused with 55000")
  or diag $r->{err} . $r->{out};
like($r->{err}, qr/the copies of leaf_worker that its holder's lease counts are not all on active nodes here/,
	'saying why') or diag $r->{err};

# --- a claim written through Citus is refused ----------------------------------------
# (the coordinator moves to a free id: its claim would write its own copy only)
my $free = 1000;
$coord->safe_psql('postgres', "ALTER SYSTEM SET leaf_id.worker_id = $free; SELECT pg_reload_conf()");
my %calls = snowflake_calls($coord, 8, [$free, $id]);
my ($took, $refused, @coord_ids) = ($calls{with}, $calls{refused}, @{ $calls{ids} });
$r = $calls{last};
is($took, 0, "the coordinator never issues with id $free while worker1 and worker2 are disabled");
cmp_ok($refused, '>', 0, 'its calls are refused meanwhile');
is(join(',', map { "$_ x$calls{states}{$_}" } sort keys %{ $calls{states} }), "55000 x$refused",
	'every refusal is 55000') or diag explain $calls{errors};
is(scalar(grep { !/disabled Citus node 127\.0\.0\.1:\d+/ } @{ $calls{errors} }), 0,
	'each naming the disabled copies') or diag explain $calls{errors};

# worker1 went on issuing with its id all along (its majority: worker1 and worker2)
my $w1_since = $w1->safe_psql('postgres',
	"SELECT count(*) FROM drawlog WHERE session = 'w1_snow' AND id IS NOT NULL AND ((id >> 12) & 1023) = $id AND t > extract(epoch FROM now()) - 6");
cmp_ok($w1_since, '>', 0, "premise: worker1 issued with id $id meanwhile");

# --- the nodes come back ----------------------------------------------------------
# The activation and replicate_reference_tables copy the coordinator's copy of
# leaf_worker over worker1's and worker2's. The release then reaches every
# copy, and worker1 issues until its next renewal finds the row released. The
# coordinator's claim must issue only above every millisecond worker1 used.
for my $w ($w1, $w2)
{
	$coord->safe_psql('postgres', "SELECT citus_activate_node('127.0.0.1', " . $w->port . ')');
}
$coord->safe_psql('postgres', "SELECT replicate_reference_tables('block_writes')");
is($coord->safe_psql('postgres', "SELECT leaf_snowflake_release_worker_id($id)"),
	$w1->safe_psql('postgres', 'SELECT node_name FROM leaf_snowflake_status'),
	"with the nodes active, the coordinator releases worker1's id $id while worker1 issues with it");
$coord->safe_psql('postgres', "ALTER SYSTEM SET leaf_id.worker_id = $id; SELECT pg_reload_conf()");
my %coord_ms;
ok( wait_until(
		30,
		sub {
			my $q = try_sql($coord, 'postgres',
				q{SELECT x, d.worker_id, (extract(epoch FROM d.timestamp) * 1000)::bigint
				  FROM leaf_snowflake_next() x, leaf_snowflake_decode(x) d});
			return 0 if $q->{ret} != 0;
			my ($x, $w, $ms) = split /\|/, $q->{out};
			push @coord_ids, $x;
			$coord_ms{$ms} = 1 if $w eq $id;
			return keys(%coord_ms) >= 20;
		}),
	"once the nodes are active again, the coordinator issues with id $id");
sleep_full(1);

stop_drawing();
my ($coord_first) = sort { $a <=> $b } keys %coord_ms;
my $w1_last = $w1->safe_psql('postgres',
	"SELECT max((extract(epoch FROM d.timestamp) * 1000)::bigint) FROM drawlog l, leaf_snowflake_decode(l.id) d WHERE l.id IS NOT NULL AND d.worker_id = $id");
note "worker1's last millisecond with id $id: $w1_last; the coordinator's first: $coord_first";
cmp_ok($coord_first, '>', $w1_last, "the coordinator's IDs with id $id start above worker1's last millisecond with it");

# --- every snowflake ID of both nodes: none twice ------------------------------------
my (%seen, $dup);
$dup += $seen{$_}++ ? 1 : 0
  for @coord_ids, split /\n/, $w1->safe_psql('postgres', 'SELECT id FROM drawlog WHERE id IS NOT NULL');
is($dup, 0, 'no snowflake ID issued twice');

$_->stop for ($w2, $w1, $coord);
done_testing();
