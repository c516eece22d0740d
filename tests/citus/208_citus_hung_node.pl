# leaf_id on Citus: a node that hangs (a network partition).
#
# Every process of worker2 is stopped (SIGSTOP): its port accepts TCP
# connections but nothing answers, as across a partition, where Citus waits
# (citus.node_connection_timeout, 30 s by default) instead of being refused.
# At that instant a refill of the coordinator is running on worker2 (a
# session there holds the row it updates): it waits for worker2 (Citus
# cancels with a blocking PQcancel) and, through Citus' lock on the shard,
# holds the other nodes' refills too. Under load on the coordinator and
# worker1 (one session per mode per node, across the stop):
#  - snowflake goes on with no refusal: renewals run in a worker of their
#    own, not behind the stuck refill; each writes the copies of leaf_worker
#    one by one on new connections, bounded by a timeout, and a majority
#    (the node's own and the other survivor's) is enough;
#  - segment: a refill needs every copy of leaf_alloc and cannot finish;
#    once the cached segments are used, every call fails within
#    leaf_id.refill_timeout (3 s here) with a clear SQLSTATE;
#  - worker2 resumed (SIGCONT): everything goes on by itself;
#  - no ID twice.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use CitusTap;
use SegmentTap qw(try_sql start_client finish_clients client_ids wait_until);

# no segment reserve (leaf_id.citus_reserve = 0): what a node has without it,
# its two cached segments (210 tests the reserve)
my ($coord, $w1, $w2) = citus_cluster(
	conf => "leaf_id.refill_timeout = 3000\nleaf_id.max_step = 100\nleaf_id.citus_reserve = 0\n");
$coord->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('dn', 10)});
my %wid = map { $_->name => leaf_worker_id_of($_) } ($coord, $w1, $w2);
my $w2port = $w2->port;

$_->safe_psql('postgres', DRAWLOG_SQL) for ($coord, $w1, $w2);

my @survivors = ([ $coord, 'coord' ], [ $w1, 'w1' ]);
$_->[0]->safe_psql('postgres', q{SELECT count(leaf_segment_next('dn')) FROM generate_series(1, 30)}) for @survivors;
start_drawing($_->[0], "$_->[1]_snow", 'snowflake') for @survivors;
start_drawing($_->[0], "$_->[1]_seg", 'segment') for @survivors;
sleep_full(2);

# --- a refill of the coordinator waits on worker2 --------------------------------
$coord->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('inflight', 10)});
my ($holder, $herr) = hold_shard_row($w2, 'leaf_alloc', q{biz_tag = 'inflight'});
is($herr, '', "premise: a session on worker2 holds the row 'inflight' of its copy");
my $inflight = start_client($coord, 'postgres', 'inflight',
	"\\set VERBOSITY verbose\nSET leaf_id.refill_timeout = 3000;\nSELECT leaf_segment_next('inflight');\n");
ok( wait_until(
		20,
		sub {
			$w2->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%leaf_alloc%'"
			) ne '0';
		}),
	"premise: the coordinator's refill of 'inflight' waits on worker2");

# --- worker2 hangs ---------------------------------------------------------------
my $t_stop = time;
my @pids = stop_node($w2);
cmp_ok(scalar @pids, '>', 1, 'premise: worker2\'s postmaster and its children are found');
sleep_full(12);
my $t_after = time;
for my $s (@survivors)
{
	for my $mode ('seg', 'snow')
	{
		my $session = "$s->[1]_$mode";
		my $r = summary($s->[0], $session, $t_stop, $t_after);
		note sprintf(
			'%s with worker2 stopped: %d IDs, the last %.2f s after the stop; first refusal %.2f s after; %d refusals, longest wait %.0f ms; %s',
			$session, $r->{ok}, $r->{last_ok} - $t_stop, $r->{first_err} - $t_stop, $r->{errors},
			$r->{max_err_ms}, $r->{states});
		if ($mode eq 'snow')
		{
			is($r->{errors}, 0, "$session: snowflake is never refused while worker2 hangs") or diag $r->{states};
			cmp_ok($r->{last_ok} - $t_stop, '>', 10, "$session: it keeps issuing (12 s, four leases)");
			next;
		}
		cmp_ok($r->{errors}, '>', 0, "$session: refused once the cached segments are used");
		cmp_ok($r->{max_err_ms}, '<', 3600, "$session: a refused call waits at most leaf_id.refill_timeout (3 s)");
		my @other = grep { !/^(55P03|57014|08006) / } split / \| /, $r->{states};
		is(scalar @other, 0, "$session: every refusal is 55P03, 57014 or 08006") or diag explain \@other;
	}
}

finish_clients(30, $inflight);
like(slurp_file($inflight->{err}), qr/55P03/,
	"the call waiting for the refill that hangs on worker2 is refused with 55P03 (refill_timeout)");
is(scalar(client_ids($inflight)), 0, '... and gets no ID');

# --- worker2 goes on ---------------------------------------------------------
kill 'CONT', @pids;
my $t_cont = time;
$holder->query('ROLLBACK');
$holder->quit;
for my $s (@survivors)
{
	for my $mode ('seg', 'snow')
	{
		my $session = "$s->[1]_$mode";
		my $first = 0;
		my $deadline = time + 40;
		while (time < $deadline)
		{
			$first = first_ok_after($s->[0], $session, $t_cont);
			last if $first > 0;
			usleep(200_000);
		}
		note sprintf('%s: first ID %.2f s after SIGCONT', $session, $first - $t_cont) if $first;
		ok($first > 0, "$session issues by itself after worker2 goes on");
	}
}
start_drawing($w2, 'w2_seg', 'segment');
start_drawing($w2, 'w2_snow', 'snowflake');
sleep_full(4);
stop_drawing();

# --- no ID twice -------------------------------------------------------------
my (%seen, %dup);
for my $n ($coord, $w1, $w2)
{
	for my $line (split /\n/, $n->safe_psql('postgres', q{SELECT session, id FROM drawlog WHERE id IS NOT NULL}))
	{
		my ($session, $id) = split /\|/, $line;
		my $mode = $session =~ /seg/ ? 'seg' : 'snow';
		$dup{$mode}++ if $seen{$mode}{$id}++;
	}
}
note "IDs issued: " . join(', ', map { "$_ " . scalar(keys %{ $seen{$_} }) } sort keys %seen);
cmp_ok(scalar(keys %{ $seen{seg} // {} }), '>', 0, 'premise: segment IDs were drawn');
is($dup{seg} // 0, 0, 'no segment ID issued twice over the three nodes');
is($dup{snow} // 0, 0, 'no snowflake ID issued twice over the three nodes');
for my $n ([ $coord, 'coord' ], [ $w1, 'w1' ], [ $w2, 'w2' ])
{
	is(snowflake_wids_of($n->[0], "$n->[1]_snow"), $wid{ $n->[0]->name },
		$n->[0]->name . "'s snowflake IDs all carry its own worker id");
}

$_->stop for ($w2, $w1, $coord);
done_testing();
