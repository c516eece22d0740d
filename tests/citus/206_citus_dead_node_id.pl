# leaf_id on Citus: a dead or removed node does not lose its snowflake
# worker id.
#
# worker2's postmaster is killed (kill -9) while it holds worker id 2 with a
# live lease. Then, without any Citus action, the coordinator and worker1
# are restarted (they issue with their own ids again: a restart of the same
# data directory keeps its owner token, no takeover needed) and a fourth
# node is added; then worker2 is removed with
# citus_remove_node, the restarted nodes and the new node claim, and worker2
# comes back with citus_add_node. At no point does any node but worker2 issue
# IDs with worker id 2, and the registry row of worker id 2 stays worker2's.
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
use SnowflakeTap qw(default_node_name);

my ($coord, $w1, $w2) = citus_cluster(conf => "leaf_id.refill_timeout = 3000\n");
my %wid = map { $_->name => leaf_worker_id_of($_) } ($coord, $w1, $w2);
is(join(',', map { $wid{ $_->name } } ($coord, $w1, $w2)), '0,1,2', 'coordinator, worker1 and worker2 hold worker ids 0, 1, 2');
my $w2name = default_node_name($w2);
my $w2port = $w2->port;
my $row2_sql = q{SELECT node_name || ' ' || (owner_token IS NOT NULL) FROM leaf_id_catalog.leaf_worker WHERE worker_id = 2};

# Try a snowflake ID on $node for up to $seconds: the worker ids of the IDs
# it issued (one per try) and the refusals.
sub draw_worker_ids
{
	my ($node, $seconds) = @_;
	my (%ids, @refusals);
	my $deadline = time + $seconds;
	while (time < $deadline)
	{
		my $r = try_sql($node, 'postgres', 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');
		if ($r->{ret} == 0) { $ids{ $r->{out} }++ }
		else { push @refusals, ($r->{sqlstate} // 'none') . ' ' . ($r->{err} =~ s/\n.*//sr) }
		usleep(200_000);
	}
	return (\%ids, \@refusals);
}

$w2->kill9;
my $t_kill = time;

# --- no Citus action: restarts and a new node --------------------------------
$_->restart for ($coord, $w1);
for my $n ($coord, $w1)
{
	my ($ids, $refusals) = draw_worker_ids($n, 5);
	note $n->name . ' restarted with worker2 dead: worker ids issued: ' . join(',', sort keys %$ids)
	  . '; ' . scalar(@$refusals) . ' refusals, first: ' . ($refusals->[0] // '-');
	ok(!exists $ids->{2}, $n->name . ' restarted does not issue IDs with worker2\'s worker id 2');
	ok(!grep({ $_ ne $wid{ $n->name } } keys %$ids), $n->name . ' issues with nothing but its own worker id')
	  or diag explain $ids;
	# its clean close could not reach worker2's copy, so its row kept its
	# owner token, and the restart of the same data directory kept it too
	ok(exists $ids->{ $wid{ $n->name } },
		$n->name . ' restarted with worker2 dead issues IDs with its own worker id (owner token kept)')
	  or diag explain $refusals;
}

my $w3 = citus_node('worker3');
my $add = try_sql($coord, 'postgres', 'SELECT citus_add_node(\'127.0.0.1\', ' . $w3->port . ')');
note "citus_add_node of worker3 with worker2 dead: ret $add->{ret} $add->{err}";
is($add->{sqlstate}, '08006', 'citus_add_node fails with 08006 while a dead node is active');
if ($add->{ret} == 0)
{
	my ($ids, $refusals) = draw_worker_ids($w3, 5);
	note 'worker3 with worker2 dead: worker ids issued: ' . join(',', sort keys %$ids)
	  . '; first refusal: ' . ($refusals->[0] // '-');
	ok(!exists $ids->{2}, 'worker3 added with worker2 dead does not issue IDs with worker id 2');
}
is($coord->safe_psql('postgres', $row2_sql), "$w2name true", 'worker id 2 is still worker2\'s in the registry');

# --- citus_remove_node of worker2 ------------------------------------------------
my $rm = try_sql($coord, 'postgres', "SELECT citus_remove_node('127.0.0.1', $w2port)");
note "citus_remove_node of dead worker2: ret $rm->{ret} $rm->{err}";
is($rm->{sqlstate}, '08006', 'citus_remove_node of the dead node fails with 08006 (it connects to it)');
my $dis = try_sql($coord, 'postgres', "SELECT citus_disable_node('127.0.0.1', $w2port)");
note "citus_disable_node of dead worker2: ret $dis->{ret} $dis->{err}";
is($dis->{ret}, 0, 'citus_disable_node of the dead node works') or diag $dis->{err};
# citus_disable_node syncs the other nodes' metadata in the background: until
# it has, citus_remove_node refuses ("is a metadata node, but is out of
# sync", 55000), as an operator would see; wait for the sync, up to 30 s
my $rm_deadline = time + 30;
while (1)
{
	$rm = try_sql($coord, 'postgres', "SELECT citus_remove_node('127.0.0.1', $w2port)");
	last if $rm->{ret} == 0 || $rm->{err} !~ /is a metadata node, but is out of sync/ || time > $rm_deadline;
	sleep 1;
}
note "citus_remove_node of dead, disabled worker2: ret $rm->{ret} $rm->{err}";
is($rm->{ret}, 0, 'after citus_disable_node, citus_remove_node of the dead node works') or diag $rm->{err};
if ($add->{ret} != 0)
{
	$add = try_sql($coord, 'postgres', 'SELECT citus_add_node(\'127.0.0.1\', ' . $w3->port . ')');
	note "citus_add_node of worker3 after that: ret $add->{ret} $add->{err}";
	is($add->{ret}, 0, 'with the dead node removed, citus_add_node of worker3 works') or diag $add->{err};
}
for my $n ($coord, $w1, $w3)
{
	my ($ids, $refusals) = draw_worker_ids($n, 4);
	note $n->name . ' after removal: worker ids issued: ' . join(',', sort keys %$ids)
	  . '; first refusal: ' . ($refusals->[0] // '-');
	ok(!exists $ids->{2}, $n->name . ' does not issue IDs with worker2\'s worker id 2');
	ok(%$ids, $n->name . ' issues IDs');
}
is(leaf_worker_id_of($w3), '3', 'worker3 claimed worker id 3, not worker2\'s');
is(leaf_worker_id_of($coord), '0', 'the coordinator has its own worker id back');
is(leaf_worker_id_of($w1), '1', 'worker1 has its own worker id back');
is($coord->safe_psql('postgres', $row2_sql), "$w2name true", 'worker id 2 is still worker2\'s in the registry');

# a restart of the survivors now, and of the new node: the same ids again
$_->restart for ($coord, $w1, $w3);
for my $n ($coord, $w1, $w3)
{
	my ($ids, $refusals) = draw_worker_ids($n, 4);
	note $n->name . ' restarted after removal: ' . join(',', sort keys %$ids) . '; first refusal: ' . ($refusals->[0] // '-');
	ok(!exists $ids->{2}, $n->name . ' restarted does not issue IDs with worker id 2');
	my $own = $n == $w3 ? 3 : $wid{ $n->name };
	is(join(',', sort keys %$ids), $own, $n->name . " restarted issues IDs, all with its own worker id $own")
	  or diag explain $refusals;
}

# --- worker2 comes back --------------------------------------------------------
$w2->start;
my $back = try_sql($coord, 'postgres', "SELECT citus_add_node('127.0.0.1', $w2port)");
note "citus_add_node of returning worker2: ret $back->{ret} $back->{err}";
is($back->{ret}, 0, 'citus_add_node of the returning worker2 works') or diag $back->{err};
my ($ids, $refusals) = draw_worker_ids($w2, 6);
note 'worker2 back: worker ids issued: ' . join(',', sort keys %$ids) . '; first refusal: ' . ($refusals->[0] // '-');
ok(exists $ids->{2} && keys %$ids == 1, 'worker2 back issues with its own worker id 2') or diag explain $ids, $refusals;

$_->stop for ($w3, $w2, $w1, $coord);
done_testing();
