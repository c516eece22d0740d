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
INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('load', 1000, 7);
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
		"SELECT max_id FROM leaf_alloc WHERE biz_tag = 'load'");
}

# One round: start the load, kill -9 the process $target->() names, let the
# postmaster recover, then check.
sub crash_round
{
	my ($round, $what, $target) = @_;
	my $n0 = issued_count($node);
	my @clients = start_load($node, "r$round", 'load');
	# crash at a different point of the load each round
	my $rows = 300 + int(rand(3000));
	ok( wait_until(60, sub { issued_count($node) >= $n0 + $rows }),
		"round $round: load is running ($rows rows committed)");
	# every client must have received IDs before the crash
	ok( wait_until(30, sub { !grep { !-s $_->{out} } @clients }),
		"round $round: every client has drawn IDs");

	my $pid = $target->();
	like($pid, qr/^\d+$/, "round $round: found the $what (pid $pid)");
	my $log_offset = -s $node->logfile;
	ok(kill('KILL', $pid), "round $round: kill -9 $what");

	finish_clients(60, @clients);
	for my $c (@clients)
	{
		ok(!$c->{killed} && $c->{rc} != 0,
			"round $round: client $c->{name} was cut off by the crash (exit $c->{rc})"
		);
	}
	ok(wait_for_server($node), "round $round: server is back");
	ok( $node->log_contains(qr/\(PID $pid\) was terminated by signal 9/,
			$log_offset),
		"round $round: postmaster saw the kill");
	ok( $node->log_contains(
			qr/all server processes terminated; reinitializing/, $log_offset),
		"round $round: postmaster reinitialized (crash recovery)");

	my @received = map { client_ids($_) } @clients;
	cmp_ok(scalar(@received), '>', 300,
		"round $round: clients received IDs before the crash");
	is_deeply([ duplicates(@received) ], [],
		"round $round: no ID was received twice before the crash");
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM issued WHERE client = 'r${round}_opentx'"),
		'0',
		"round $round: rows of the never-committed transaction are gone");

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

my $worker_pid = sub {
	$node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'leaf_id worker' AND datname = 'postgres'"
	);
};
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
