# leaf_id on Citus: a snowflake renewal in flight on a node
# at the instant the node hangs.
#
# Citus reads a remote answer without a timeout and cancels with libpq's
# blocking PQcancel, so whoever sent a statement to a node that then hangs
# waits for as long as the node does. A session on worker2 holds the
# coordinator's row in worker2's copy of leaf_worker, so each of the
# coordinator's renewals waits there (up to its remote lock_timeout); while
# one waits, every process of worker2 is stopped (SIGSTOP). The renewal's
# statement on worker2 then never returns. The coordinator's snowflake IDs
# must go on (its own copy and worker1's are a majority): the statements on
# other nodes are sent by helper processes, and only the helper waits.
# Then worker2 goes on (SIGCONT): no ID twice.
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

my ($coord, $w1, $w2) = citus_cluster(conf => "leaf_id.refill_timeout = 3000\n");
my %wid = map { $_->name => leaf_worker_id_of($_) } ($coord, $w1, $w2);
$_->safe_psql('postgres', DRAWLOG_SQL) for ($coord, $w1, $w2);
my @survivors = ([ $coord, 'coord' ], [ $w1, 'w1' ]);

my ($holder, $herr) = hold_shard_row($w2, 'leaf_worker', "worker_id = $wid{coord}");
is($herr, '', "premise: a session on worker2 holds the coordinator's row in worker2's copy");
start_drawing($_->[0], "$_->[1]_snow", 'snowflake') for @survivors;

# --- worker2 hangs while a renewal of the coordinator waits there ----------------
# the renewal's backend on worker2 is a new connection, forked for each
# renewal (stop_node stops the postmaster before it lists its children)
my @pids;
my $waiting_sql =
  q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%leaf_worker%'};
my $stopped = 0;
for (1 .. 200)
{
	if ($w2->safe_psql('postgres', $waiting_sql) ne '0')
	{
		@pids = stop_node($w2);
		$stopped = 1;
		last;
	}
	usleep(10_000);
}
cmp_ok(scalar @pids, '>', 2, 'premise: worker2\'s postmaster and its children are found');
ok($stopped, "premise: worker2 stopped while a renewal of the coordinator waited on it");
my $t_stop = time;
# while the first helper waits on worker2, no second one is started for that
# copy: at most one helper per other copy (worker1's comes and goes)
my ($most, $fewest) = (0, 99);
my $helpers = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leaf_id renewal helper'};
while (time - $t_stop < 10)
{
	my $n = $coord->safe_psql('postgres', $helpers);
	$most = $n if $n > $most;
	$fewest = $n if $n < $fewest && time - $t_stop > 1;
	usleep(200_000);
}
cmp_ok($most, '<=', 2, "no second helper for worker2's copy while the first waits (at most $most helpers)");
cmp_ok($fewest, '>=', 1, 'the helper that waits on worker2 stays (at least one helper throughout)');
my $t_after = time;
for my $s (@survivors)
{
	my $r = summary($s->[0], "$s->[1]_snow", $t_stop, $t_after);
	note sprintf('%s with worker2 stopped: %d IDs, the last %.2f s after the stop; %d refusals; %s',
		"$s->[1]_snow", $r->{ok}, $r->{last_ok} - $t_stop, $r->{errors}, $r->{states});
	is($r->{errors}, 0, "$s->[1]: snowflake is never refused while a renewal hangs on worker2")
	  or diag $r->{states};
	cmp_ok($r->{last_ok} - $t_stop, '>', 8, "$s->[1]: it keeps issuing (10 s, into a third lease)");
}

# --- worker2 goes on -------------------------------------------------------------
kill 'CONT', @pids;
$holder->query('ROLLBACK');
$holder->quit;
my $t_cont = time;
sleep_full(3);
stop_drawing();
for my $s (@survivors)
{
	my $r = summary($s->[0], "$s->[1]_snow", $t_cont, time);
	is($r->{errors}, 0, "$s->[1]: no refusal after worker2 goes on") or diag $r->{states};
}
ok( wait_until(
		20,
		sub {
			$coord->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leaf_id renewal helper'") eq '0';
		}),
	'the helper that waited on worker2 has ended');

my (%seen, $dup);
for my $n ($coord, $w1)
{
	for my $id (split /\n/, $n->safe_psql('postgres', 'SELECT id FROM drawlog WHERE id IS NOT NULL'))
	{
		$dup++ if $seen{$id}++;
	}
}
note 'snowflake IDs issued: ' . scalar(keys %seen);
is($dup // 0, 0, 'no snowflake ID issued twice');
for my $s (@survivors)
{
	is(snowflake_wids_of($s->[0], "$s->[1]_snow"), $wid{ $s->[0]->name },
		$s->[0]->name . "'s snowflake IDs all carry its own worker id");
}

$_->stop for ($w2, $w1, $coord);
done_testing();
