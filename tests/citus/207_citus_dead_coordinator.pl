# leaf_id on Citus: a dead coordinator.
#
# The coordinator holds a copy of the reference tables too. Once its
# postmaster is killed (kill -9):
#  - snowflake: the workers renew their leases on a majority of the copies
#    of leaf_worker (their own and the other worker's) and keep issuing, with
#    no refusal, for as long as the coordinator is down;
#  - segment: every refill needs every copy of leaf_alloc, so the workers
#    issue until their cached segments run out, then refuse with 08006
#    (saying what failed) within leaf_id.refill_timeout;
#  - a worker that crashes and restarts meanwhile (kill -9), and one
#    restarted cleanly, keep their owner tokens (the owner file) and issue
#    snowflake IDs again with their own worker ids, the coordinator still
#    down (Leaf starts from its local file while ZooKeeper is down).
# When the coordinator is started again, everything resumes by itself, with
# no ID twice.
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
use SegmentTap qw(try_sql);

# no segment reserve (leaf_id.citus_reserve = 0): what a node has without it,
# its two cached segments (210 tests the reserve)
# citus.recover_2pc_interval of 1 s (1 min by default): the workers resolve
# the prepared transactions the coordinator's crash left within the test's
# bounds (citus.md, a dead coordinator)
my ($coord, $w1, $w2) = citus_cluster(
	conf => "leaf_id.refill_timeout = 3000\nleaf_id.max_step = 100\nleaf_id.citus_reserve = 0\n"
	  . "citus.recover_2pc_interval = '1s'\n");
$coord->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('dc', 10)});
my %wid = map { $_->name => leaf_worker_id_of($_) } ($coord, $w1, $w2);

my %ids = (seg => {}, snow => {});
my $dups = 0;

# Draw 20 IDs of each mode on each worker, again and again for $seconds:
# per worker and mode the time of the last success and the refusals
# ([time, sqlstate, first line, seconds the call took]).
sub draw_phase
{
	my ($seconds, $t0) = @_;
	my %res;
	my $end = time + $seconds;
	while (time < $end)
	{
		for my $n ($w1, $w2)
		{
			for my $mode ('seg', 'snow')
			{
				my $f = $mode eq 'seg' ? q{leaf_segment_next('dc')} : 'leaf_snowflake_next()';
				my $t = time;
				my $r = try_sql($n, 'postgres', "SELECT $f FROM generate_series(1, 20)");
				my $k = $n->name . "_$mode";
				if ($r->{ret} == 0)
				{
					$res{$k}{last_ok} = $t - $t0;
					$res{$k}{wids}{ ($_ >> 12) & 1023 }++ for $mode eq 'snow' ? split(/\n/, $r->{out}) : ();
					$dups += grep { $ids{$mode}{$_}++ } split /\n/, $r->{out};
				}
				else
				{
					push @{ $res{$k}{refusals} },
					  [ $t - $t0, $r->{sqlstate} // 'none', $r->{err} =~ s/^.*?ERROR:\s+//sr =~ s/\n.*//sr, time - $t ];
				}
				$res{$k}{first_ok} //= $t - $t0 if $r->{ret} == 0;
			}
		}
		usleep(20_000);
	}
	return \%res;
}

draw_phase(2, time);
my $t_kill = time;
$coord->kill9;
my $down = draw_phase(12, $t_kill);
for my $n ($w1, $w2)
{
	for my $mode ('seg', 'snow')
	{
		my $k = $n->name . "_$mode";
		my $r = $down->{$k};
		my @ref = @{ $r->{refusals} // [] };
		my $longest = 0;
		$longest = $_->[3] > $longest ? $_->[3] : $longest for @ref;
		note sprintf('%s with the coordinator dead: last ID %.2f s after the kill; %d refusals, first %.2f s after, longest call %.2f s; %s',
			$k, $r->{last_ok} // -1, scalar @ref, @ref ? $ref[0][0] : -1, $longest, @ref ? "$ref[0][1] $ref[0][2]" : '-');
		if ($mode eq 'snow')
		{
			is(scalar @ref, 0, "$k: snowflake is never refused while the coordinator is dead")
			  or diag explain \@ref;
			cmp_ok($r->{last_ok} // 0, '>', 9, "$k: and keeps issuing (12 s, over three leases)");
			is(join(',', keys %{ $r->{wids} }), $wid{ $n->name }, "$k: with its own worker id");
			next;
		}
		cmp_ok(scalar @ref, '>', 0, "$k: refused once the coordinator is dead");
		is(scalar(grep { $_->[1] ne '08006' } @ref), 0, "$k: every refusal is 08006");
		cmp_ok($longest, '<', 4, "$k: no refused call waits longer than leaf_id.refill_timeout (3 s) and psql's start");
		cmp_ok($r->{last_ok} // 0, '<', 4, "$k: stops issuing within 4 s (its cached segments)");
	}
}

# restarts with the coordinator still dead: worker1 crashes, worker2 is
# restarted cleanly (its close cannot reach the coordinator's copy, so its
# row keeps its token, as after a crash)
my $t_restart = time;
$w1->kill9;
ok(start_after_kill9($w1), 'worker1 starts again after kill -9');
$w2->restart;
my $again = draw_phase(10, $t_restart);
for my $n ($w1, $w2)
{
	my $k = $n->name . '_snow';
	my $r = $again->{$k};
	my @ref = @{ $r->{refusals} // [] };
	note sprintf('%s restarted with the coordinator dead: first ID %.2f s after the restart began, %d refusals, first: %s',
		$k, $r->{first_ok} // -1, scalar @ref, @ref ? "$ref[0][1] $ref[0][2]" : '-');
	ok(defined $r->{first_ok}, "$k: issues again after its restart, the coordinator still dead");
	is(join(',', keys %{ $r->{wids} // {} }), $wid{ $n->name }, "$k: with its own worker id");
	ok(!grep({ $_->[1] !~ /^(55P03|58000)$/ } @ref),
		"$k: the only refusals meanwhile are waits for the old lease (55P03, 58000)")
	  or diag explain \@ref;
}

# the coordinator comes back: the workers resume by themselves. A kill
# between a worker's refill's PREPARE TRANSACTION on the coordinator and its
# COMMIT PREPARED leaves the coordinator a prepared transaction that holds
# its copy's row of "dc", which only that worker's Citus recovery resolves
# (every citus.recover_2pc_interval); whether the kill above left one
# depends on the moment, so one of worker1's is left on purpose
$coord->start;
my @left = split /\n/, $coord->safe_psql('postgres', 'SELECT gid FROM pg_prepared_xacts ORDER BY gid');
note 'the coordinator started again with ' . scalar(@left) . ' prepared transactions: ' . join(', ', @left);
my $w1_group = $w1->safe_psql('postgres', 'SELECT groupid FROM pg_dist_local_group');
my $busy = prepare_in_doubt($coord, 'leaf_alloc', q{biz_tag = 'dc'}, $w1_group);
note "the row of \"dc\" was held by a prepared transaction the kill left: $busy" if $busy;
my $t_back = time;
my $up = draw_phase(8, $t_back);
for my $n ($w1, $w2)
{
	for my $mode ('seg', 'snow')
	{
		my $k = $n->name . "_$mode";
		note sprintf('%s after the coordinator started again: first ID %.2f s after its start', $k, $up->{$k}{first_ok} // -1);
		ok(defined $up->{$k}{first_ok} && $up->{$k}{first_ok} < 6, "$k: issues again by itself once the coordinator is back");
	}
	my $k = $n->name . '_snow';
	is(join(',', keys %{ $up->{$k}{wids} // {} }), $wid{ $n->name },
		"$k: with its own worker id once the coordinator is back");
}
# (the workers' refills still running may have others prepared there)
my $gids = join(',', map { "'$_'" } @left, in_doubt_gid($w1_group));
is($coord->safe_psql('postgres', "SELECT count(*) FROM pg_prepared_xacts WHERE gid IN ($gids)"), '0',
	'the prepared transactions the coordinator started with are resolved by the workers\' recovery');
is($dups, 0, 'no ID issued twice');
cmp_ok(scalar(keys %{ $ids{snow} }), '>', 0, 'premise: snowflake IDs were drawn');
is(leaf_worker_id_of($coord), $wid{coord}, 'the coordinator has its own worker id back');

$_->stop for ($w2, $w1, $coord);
done_testing();
