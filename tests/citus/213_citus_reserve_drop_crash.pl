# leaf_id on Citus: a reserve drop survives a crash right after the refill
# that decided it.
#
# The coordinator keeps a reserve of tag 'rc'. The tag is deleted and
# inserted again (max_id 1, below the reserve), and its record in
# leaf_alloc_encoding deleted too (a superuser's; with it, every refill would
# start above the reserve, and nothing could overlap), so the coordinator's
# next refill drops the tag's reserve: other nodes may now hand out those
# IDs. The worker crashes right after that refill commits
# (leaf_id.test_fault_point = 'after_refill_commit'), and the server is
# started again. The reserve file must no longer hold the dropped ranges; the
# coordinator draws, and its refills keep a new reserve; when worker1 (which
# issued IDs of the re-created tag inside the dropped reserve before the
# refill) is killed, the coordinator's refills come from that reserve (200
# IDs drawn, checked), and no ID is issued twice over all of them.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CitusTap;
use SegmentTap qw(try_sql wait_until);

my ($coord, $w1) = citus_cluster(workers => 1,
	conf => "leaf_id.refill_timeout = 3000\nleaf_id.max_step = 10\nleaf_id.citus_reserve = 30\n");
$coord->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('rc', 10)});

sub reserve_ranges
{
	my ($node, $tag) = @_;
	my $dboid = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
	my $file = $node->data_dir . "/pgsql_tmp_leaf_id_reserve_$dboid";
	my (@ranges, $t);
	return [] unless -e $file;
	for (split /\n/, slurp_file($file))
	{
		$t = pack('H*', $1) if /^tag ([0-9a-f]+) /;
		push @ranges, [ $1, $2 ] if /^range (\d+) (\d+)$/ && $t eq $tag;
	}
	return \@ranges;
}

# (the IDs of the tag before it is re-created are not counted: a tag
# re-created below IDs it issued issues them again, by the operator's doing)
$coord->safe_psql('postgres', q{SELECT leaf_segment_next('rc') FROM generate_series(1, 50)});
my @issued;
my $before = reserve_ranges($coord, 'rc');
cmp_ok(scalar @$before, '>', 0, 'premise: the coordinator keeps a reserve of tag rc (' . scalar(@$before) . ' ranges)');

$coord->safe_psql('postgres',
	"DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'rc'; INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('rc', 10);
DELETE FROM leaf_id_catalog.leaf_alloc_encoding WHERE biz_tag = 'rc'");
# worker1, which keeps no reserve, issues IDs of the re-created tag from 1
# on, inside the coordinator's reserve, before the coordinator refills
$w1->append_conf('postgresql.conf', "leaf_id.citus_reserve = 0\n");
$w1->reload;
sleep_full(1);
push @issued, split /\n/,
  $w1->safe_psql('postgres', q{SELECT leaf_segment_next('rc') FROM generate_series(1, 250)});
cmp_ok($issued[-1], '<', $before->[-1][1], "premise: worker1's IDs reach into the coordinator's reserve");
$coord->append_conf('postgresql.conf', "leaf_id.test_fault_point = 'after_refill_commit'\n");
$coord->reload;
sleep_full(1);
# draw through the cached segments to a refill: the worker crashes after its
# commit, and so does this session
my $r = try_sql($coord, 'postgres', q{SELECT count(leaf_segment_next('rc')) FROM generate_series(1, 300)});
isnt($r->{ret}, 0, 'the drawing session ended with the crash');
ok($coord->log_contains(qr/leaf_id\.test_fault_point = after_refill_commit: crashing/),
	'the worker crashed right after the refill that dropped the reserve committed');
# (the test clusters do not restart after a crash by themselves)
$coord->append_conf('postgresql.conf', "leaf_id.test_fault_point = ''\n");
$coord->{_pid} = undef;    # it shut down by itself
ok(start_after_kill9($coord), 'the coordinator starts again after the crash');

my @kept;
for my $r (@{ reserve_ranges($coord, 'rc') })
{
	push @kept, $r if grep { $r->[0] < $_->[1] && $_->[0] < $r->[1] } @$before;
}
is(scalar @kept, 0, 'after the crash, the reserve file holds none of the dropped ranges')
  or diag explain \@kept;

# the coordinator draws (worker1 alive): its refills keep a reserve again,
# above the re-created tag's IDs
push @issued, split /\n/,
  $coord->safe_psql('postgres', q{SELECT leaf_segment_next('rc') FROM generate_series(1, 100)});
my $again;
ok(wait_until(20, sub { $again = reserve_ranges($coord, 'rc'); @$again > 0 }),
	'premise: the coordinator keeps a reserve of tag rc again (' . scalar(@$again) . ' ranges)');

# worker1 dies: the coordinator's refills can only come from its reserve
$w1->kill9;
$r = try_sql($coord, 'postgres', q{SELECT leaf_segment_next('rc') FROM generate_series(1, 200)}, timeout => 60);
my @from_reserve = $r->{ret} == 0 ? split(/\n/, $r->{out}) : ();
is(scalar @from_reserve, 200, 'with worker1 dead the coordinator draws 200 IDs (its refills come from its reserve)')
  or diag $r->{err};
push @issued, @from_reserve;
my %seen;
my @twice = grep { $seen{$_}++ } @issued;
is(scalar @twice, 0, 'no segment ID issued twice (' . scalar(@issued) . ' IDs)')
  or diag "twice: @twice[0 .. ($#twice < 9 ? $#twice : 9)]";

$coord->stop;
done_testing();
