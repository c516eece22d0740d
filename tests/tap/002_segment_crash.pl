# leaf_id segment mode: kill -9 of a backend (or of the leaf_id worker) while
# several clients draw IDs makes the postmaster reinitialize shared memory
# and run crash recovery. After it, every new ID must be above every ID
# handed out before the crash, and leaf_alloc.max_id above all of them.

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node(
	'crash', q{
restart_after_crash = on
leaf_id.max_step = 50
});

$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('load', 1000, 7);
CREATE TABLE issued (id bigint NOT NULL, client text NOT NULL);
});

# every ID handed out so far: received by a client or committed in "issued"
my %before;
# every ID a client received, over all rounds (each must occur once)
my @all_received;

sub table_ids
{
	return split /\n/,
	  $node->safe_psql('postgres', 'SELECT id FROM issued ORDER BY id');
}

sub max_id
{
	return $node->safe_psql('postgres',
		"SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'load'");
}

# One round: start the load, kill -9 the process $target->() names, let the
# postmaster recover, then check.
sub crash_round
{
	my ($round, $what, $target) = @_;
	# crash at a different point of the load each round
	my @received = kill9_under_load($node, $round, $what, $target,
		300 + int(rand(3000)), 'load');
	cmp_ok(scalar(@received), '>', 300,
		"round $round: clients received IDs before the crash");

	is_deeply([ grep { $before{$_} } @received ], [],
		"round $round: no ID of an earlier round was handed out again");

	$before{$_} = 1 for @received, table_ids();
	push @all_received, @received;
	my $max_before = max_of(keys %before);

	# the reservation is durable: recovery did not roll max_id back
	cmp_ok(max_id(), '>', $max_before,
		"round $round: leaf_alloc.max_id is above every ID issued before the crash"
	);

	# new IDs after recovery
	my @new = draw_ids($node, 'postgres', 'load', 300);
	is(scalar @new, 300, "round $round: 300 new IDs after recovery");
	cmp_ok(min_of(@new), '>', $max_before,
		"round $round: every new ID is above every ID issued before the crash"
	);
	$before{$_} = 1 for @new;
	push @all_received, @new;
	return;
}

my $worker_pid = sub { worker_pid($node, 'postgres') };
my @targets = (
	[ 'client backend (autocommit INSERT)', sub { backend_pid($node, 'postgres', "r$_[0]_ins1") } ],
	[ 'leaf_id worker', $worker_pid ],
	[ 'backend with an open transaction', sub { backend_pid($node, 'postgres', "r$_[0]_opentx") } ],
	[ 'selecting client backend', sub { backend_pid($node, 'postgres', "r$_[0]_sel") } ],
);
for my $round (1 .. 8)
{
	my ($what, $find) = @{ $targets[ ($round - 1) % @targets ] };
	crash_round($round, $what, sub { $find->($round) });
}

# the table as a whole: every committed row has its own ID
no_duplicates_over_all_rounds($node, @all_received);
my %received = map { $_ => 1 } @all_received;
my @unseen = grep { !$received{$_} } table_ids();
note scalar(@unseen)
  . ' committed row IDs were not seen by their client (reply lost in a crash)';

$node->stop;
done_testing();
