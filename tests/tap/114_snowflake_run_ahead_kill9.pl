# leaf_id snowflake mode with leaf_id.max_run_ahead_ms: a burst that issues
# faster than the layout's 4,096 IDs per millisecond goes on in milliseconds
# the clock has not reached yet. kill -9 in the middle of such a burst, with
# restart_after_crash = on (the postmaster reinitializes shared memory: the
# generator starts over, and only the persisted high-water mark stands
# between it and the milliseconds issued before the crash).
#
# THE RULE: every ID the burst's client received is below every ID drawn
# after the crash, and none is handed out twice. The persisted mark is kept
# short here (leaf_id.lease_ahead = 400 ms, run-ahead up to 1000 ms), so the
# generator's bound "never past the persisted mark" is what holds the rule:
# a generator that ran ahead past the mark would issue, after the crash,
# milliseconds it had issued before.
#
# Premises: the burst ran ahead of the real clock when it was killed (its
# last ID's millisecond is later than the moment of the kill), and it was
# held by the mark (never more than the mark ahead of the clock at the kill).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SegmentTap;
use SnowflakeTap qw(LEAF_EPOCH_MS issued_after_restart);

use constant LEASE_AHEAD_MS => 400;
use constant RUN_AHEAD_MS   => 1000;
# how far ahead the burst must be before the kill, and the time the kill
# itself may take
use constant MARK_NEAR_MS  => 200;
use constant KILL_SLACK_MS => 50;
# how long the burst goes on after that before the kill
use constant BURST_ON_US => 1_000_000;

my $node = leaf_node(
	'snowflake_run_ahead', qq{
restart_after_crash = on
leaf_id.random_sequence_start = off
leaf_id.lease_ahead = @{[LEASE_AHEAD_MS]}
leaf_id.heartbeat_interval = 100
leaf_id.max_run_ahead_ms = @{[RUN_AHEAD_MS]}
});
is($node->safe_psql('postgres', "SELECT setting FROM pg_settings WHERE name = 'leaf_id.max_run_ahead_ms'"), RUN_AHEAD_MS,
	'premise: the run-ahead setting is in effect');
my $worker_id = $node->safe_psql('postgres', 'SELECT (leaf_snowflake_next() >> 12) & 1023');

# The millisecond (Unix) of the last complete line of $file, or 0.
sub last_ms_of
{
	my ($file) = @_;
	open(my $fh, '<', $file) or return 0;
	my $size = -s $fh;
	return 0 if $size < 64;
	seek($fh, $size - 64, 0);
	local $/;
	my $tail = <$fh>;
	close $fh;
	my @lines = split /\n/, $tail;
	pop @lines unless $tail =~ /\n\z/;
	return 0 unless @lines && $lines[-1] =~ /^\d+$/;
	return ($lines[-1] >> 22) + LEAF_EPOCH_MS;
}

# the largest ID handed out so far, and how many IDs
my ($max_before, $handed_out) = (0, 0);
# IDs of one session come in increasing order: reads $file (one ID a line;
# a last line cut short by the kill is left out) without keeping it, and
# returns its count, its largest ID, the IDs not above the one before them
# (or, the first, not above $floor), and the IDs of another worker id
sub scan_ids
{
	my ($file, $floor) = @_;
	my ($count, @bad, @other) = (0);
	open(my $fh, '<', $file) or die "$file: $!";
	while (my $line = <$fh>)
	{
		last unless $line =~ /^(\d+)\n\z/;
		my $id = $1;
		$count++;
		push @bad, $id if $id <= $floor && @bad < 10;
		push @other, $id if (($id >> 12) & 1023) != $worker_id && @other < 10;
		$floor = $id if $id > $floor;
	}
	close $fh;
	return ($count, $floor, \@bad, \@other);
}
my @targets = (
	[ 'the backend of the burst', sub { backend_pid($node, 'postgres', 'burst') } ],
	[ 'the leaf_id snowflake worker', sub { worker_pid($node, 'postgres', 'snowflake') } ],
);
for my $round (1 .. @targets)
{
	my ($what, $find) = @{ $targets[ $round - 1 ] };
	my $file = $PostgreSQL::Test::Utils::tmp_check . "/burst_$round.ids";
	unlink $file;
	# one session, IDs streamed to the client as the batch function makes
	# them (COPY sends each row at once)
	my $burst = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres') . ' application_name=burst',
			'-c', 'COPY (SELECT leaf_snowflake_next(2000000000)) TO STDOUT'
		],
		'>', $file, '2>', "$file.err");
	my ($ahead_ms, $killed_at_ms) = (0, 0);
	ok( wait_until(60, sub { $ahead_ms = last_ms_of($file) - int(time * 1000); $ahead_ms > MARK_NEAR_MS }),
		"round $round: premise: the burst runs ahead of the clock, near the mark (by $ahead_ms ms)");
	my $pid = $find->();
	# more of the burst: a generator not held by the mark would now be
	# further ahead than the mark
	usleep(BURST_ON_US);
	# and the kill at a moment the burst is ahead: on a busy machine its
	# client may fall behind for a while (the backend then waits to send,
	# and the clock catches up), so the kill comes right after the client
	# has an ID ahead of the clock again, with nothing (no psql) between
	ok( wait_until(60, sub { $ahead_ms = last_ms_of($file) - int(time * 1000); $ahead_ms > MARK_NEAR_MS }),
		"round $round: premise: after that second the burst is ahead of the clock again (by $ahead_ms ms)");
	$killed_at_ms = int(time * 1000);
	kill 'KILL', $pid;
	$burst->finish;
	# at once after the crash, before the burst's IDs are read: the
	# milliseconds the burst ran ahead into are still ahead of the clock
	ok(wait_for_server($node), "round $round: the server is back after killing $what");
	my $r = issued_after_restart($node,
		'SELECT leaf_snowflake_next() FROM generate_series(1, 5000)',
		"round $round: after the crash", seconds => 30);
	my @new = split /\n/, $r->{last}{out};
	is(scalar @new, 5000, "round $round: 5000 IDs after the crash");
	my ($received, $max_id, $bad, $other) = scan_ids($file, $max_before);
	unlink $file;
	my $last_ms = ($max_id >> 22) + LEAF_EPOCH_MS;
	note "round $round: killed $what (pid $pid); the burst received $received IDs, the last "
	  . ($last_ms - $killed_at_ms) . ' ms ahead of the kill';
	cmp_ok($received, '>', 10_000, "round $round: the burst received IDs before the crash");
	cmp_ok($last_ms - $killed_at_ms, '>', 0,
		"round $round: premise: its last ID is later than the moment of the kill");
	# (the mark is renewed every 100 ms to 400 ms ahead of the worker's
	# clock; a renewal between the reading of the time and the kill may
	# move it a few ms further)
	cmp_ok($last_ms - $killed_at_ms, '<=', LEASE_AHEAD_MS + KILL_SLACK_MS,
		"round $round: the burst never ran further ahead than the persisted mark");
	is(scalar(@$bad), 0, "round $round: the burst's IDs increase, all above those of earlier rounds")
	  or diag "not above the one before: @$bad";
	is(scalar(@$other), 0, "round $round: the burst's IDs carry the worker id $worker_id")
	  or diag "@$other";
	$max_before = $max_id;
	$handed_out += $received;

	note "round $round: the first ID after the crash is "
	  . ((min_of(@new) >> 22) + LEAF_EPOCH_MS - $killed_at_ms) . ' ms after the kill';
	my @below = grep { $_ <= $max_before } @new;
	is(scalar(@below), 0, "round $round: every ID after the crash is above every ID before it")
	  or diag "max before $max_before; not above: @below[0 .. ($#below < 9 ? $#below : 9)]";
	$max_before = max_of($max_before, @new);
	$handed_out += @new;
}
note "$handed_out IDs handed out, each above every one before it";

$node->stop;
done_testing();
