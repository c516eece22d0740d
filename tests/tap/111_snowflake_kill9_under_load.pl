# leaf_id snowflake mode: kill -9 of a client backend, of the leaf_id worker
# and of a backend with an open transaction, while clients draw snowflake IDs,
# with restart_after_crash = on. The postmaster then kills every server
# process and reinitializes shared memory in place (not a shutdown and
# restart, as in 106): the generator starts over from nothing and the worker
# claims its worker id again. THE RULE: every ID returned to a client -
# committed, rolled back by the crash or never committed - is unique over all
# rounds, and every ID drawn after a crash is above every ID before it.
#
# The load clients run with leaf_id.test_clock_offset_ms = +3500: their clock
# is 3.5 s ahead before the crash, and the calls after it use the real clock,
# as if the clock had been stepped back across the crash. Only the persisted
# high-water mark (leaf_id.lease_ahead = 6 s ahead of the worker's clock)
# keeps the reinitialized generator from the milliseconds issued before the
# crash; the load runs long enough that its IDs also cover the milliseconds
# right after the crash. leaf_id.random_sequence_start = off makes a
# millisecond issued twice a literal duplicate ID.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SegmentTap;
use SnowflakeTap qw(LEAF_EPOCH_MS issued_after_restart);

use constant AHEAD_MS => 3500;

my $node = leaf_node(
	'snowflake_kill9', q{
restart_after_crash = on
leaf_id.random_sequence_start = off
leaf_id.lease_ahead = 6000
leaf_id.heartbeat_interval = 500
});
$node->safe_psql('postgres',
	'CREATE TABLE issued (id bigint NOT NULL, client text NOT NULL)');

my $worker_id = $node->safe_psql('postgres',
	'SELECT (leaf_snowflake_next() >> 12) & 1023');
# How many ms the IDs committed by the load of $round span.
sub load_span_ms
{
	my ($round) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce((max(id) >> 22) - (min(id) >> 22), 0) FROM issued WHERE client LIKE 'r${round}_%'");
}

# every ID handed out so far: received by a client or drawn after a crash
my %before;
my @all_received;

my @targets = (
	[ 'client backend (autocommit INSERT)', sub { backend_pid($node, 'postgres', "r$_[0]_ins1") } ],
	[ 'leaf_id snowflake worker', sub { worker_pid($node, 'postgres', 'snowflake') } ],
	[ 'backend with an open transaction', sub { backend_pid($node, 'postgres', "r$_[0]_opentx") } ],
);
for my $round (1 .. @targets)
{
	my ($what, $find) = @{ $targets[ $round - 1 ] };
	my $killed_at_ms;
	my @received = kill9_under_load(
		$node, $round, $what,
		sub {
			# kill once the load's IDs span more than AHEAD_MS: the
			# milliseconds right after the crash were issued before it
			ok( wait_until(60, sub { load_span_ms($round) > AHEAD_MS + 500 }),
				"round $round: the load's IDs span more than @{[AHEAD_MS + 500]} ms");
			$killed_at_ms = int(time * 1000);
			return $find->($round);
		},
		1000 + int(rand(3000)),
		# enough statements that no client runs out before the kill, even
		# when the span takes long to build on a loaded machine
		undef, 400_000,
		call => 'leaf_snowflake_next()',
		setup => 'SET leaf_id.test_clock_offset_ms = ' . AHEAD_MS . ";\n");
	cmp_ok(scalar(@received), '>', 1000,
		"round $round: clients received IDs before the crash");
	is_deeply([ grep { $before{$_} } @received ], [],
		"round $round: no ID of an earlier round was handed out again");
	# the premise: the last IDs before the crash are ahead of the real clock
	my $last_ms = (max_of(@received) >> 22) + LEAF_EPOCH_MS;
	cmp_ok($last_ms - $killed_at_ms, '>', 1000,
		"round $round: the IDs before the crash ran ahead of the real clock");
	$before{$_} = 1 for @received;
	push @all_received, @received;

	# after the crash, with the real clock: refused (58000, behind the
	# persisted mark) until the clock passes the mark, then above everything
	my $r = issued_after_restart($node,
		'SELECT leaf_snowflake_next() FROM generate_series(1, 5000)',
		"round $round: after the crash", seconds => 30);
	my @new = split /\n/, $r->{last}{out};
	is(scalar @new, 5000, "round $round: 5000 IDs after the crash");
	is_deeply([ grep { $before{$_} } @new ], [],
		"round $round: no ID after the crash repeats one from before it");
	cmp_ok(min_of(@new), '>', max_of(keys %before),
		"round $round: every ID after the crash is above every ID before it");
	$before{$_} = 1 for @new;
	push @all_received, @new;
}

no_duplicates_over_all_rounds($node, @all_received);
is_deeply([ grep { (($_ >> 12) & 1023) != $worker_id } @all_received ], [],
	"all IDs carry the node's worker id $worker_id (claimed again after each crash)");

$node->stop;
done_testing();
