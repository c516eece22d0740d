# leaf_id operator functions that need a running worker (README, "Operator
# functions"):
#  - the tuned step survives a restart (Leaf issue #111): the worker persists
#    a tag's dynamic step in leaf_alloc_tuning, and the first refill after a
#    restart starts from it, bounded by leaf_id.max_step and never below the
#    row's step (leaf_segment_status shows the step);
#  - leaf_snowflake_release_worker_id() on the live owner's id: the row keeps
#    its mark (leaf_worker.last_timestamp, unchanged by the release and at or
#    above every ID issued with the id); the owner's next renewal fails with
#    55006 (a call waiting on that renewal reports it: the worker only logs
#    the message, as a WARNING); and the owner claims again, another free id,
#    not the released one (that is left to the node it was released for),
#    issuing above everything issued before.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use SnowflakeTap qw(default_node_name persisted_mark LEAF_EPOCH_MS);
use Test::More;
use Time::HiRes qw(usleep);

my $node = leaf_node('operator');

sub status_of
{
	my ($tag, $cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM leaf_segment_status WHERE tag = '$tag'");
}

sub tuned
{
	my ($tag) = @_;
	return $node->safe_psql('postgres',
		"SELECT tuned_step FROM leaf_id_catalog.leaf_alloc_tuning WHERE biz_tag = '$tag'");
}

# ---------------------------------------------------------------------------
# the tuned step
$node->safe_psql('postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('busy', 10), ('capped', 10), ('floor', 500);
});
is(status_of('busy', 'count(*)'), '0', 'premise: busy is not cached yet');
# segments used up at once: every refill doubles the step
$node->safe_psql('postgres', q{SELECT count(*) FROM leaf_segment_next('busy', 5000)});
my $step;
ok( wait_until(
		20,
		sub {
			$step = status_of('busy', 'dynamic_step');
			my $busy = status_of('busy', 'refill_in_flight OR NOT next_ready');
			return $busy eq 'f' && tuned('busy') eq $step;
		}),
	'the worker persisted the dynamic step of busy');
cmp_ok($step, '>=', 160, "premise: the step of busy grew from 10 (to $step)");

# set-ups for the bounds: a tuned step above leaf_id.max_step, one below the
# row's step
$node->safe_psql('postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc_tuning (biz_tag, tuned_step) VALUES ('capped', 2000000), ('floor', 20);
});

$node->restart;
is(status_of('busy', 'count(*)'), '0', 'after the restart nothing is cached');
$node->safe_psql('postgres',
	q{SELECT leaf_segment_next('busy'), leaf_segment_next('capped'), leaf_segment_next('floor')});
is(status_of('busy', 'refills || \':\' || dynamic_step'), "1:$step",
	'the first refill after the restart uses the tuned step');
is(status_of('capped', 'dynamic_step'), '1000000', '... bounded by leaf_id.max_step');
is(status_of('floor', 'dynamic_step'), '500', '... never below the row\'s step');
is(status_of('busy', 'table_step'), '10', 'the row\'s step is unchanged');

# deleting the row starts the tag from its step again (after a restart)
$node->safe_psql('postgres', q{DELETE FROM leaf_id_catalog.leaf_alloc_tuning WHERE biz_tag = 'busy'});
$node->restart;
$node->safe_psql('postgres', q{SELECT leaf_segment_next('busy')});
is(status_of('busy', 'dynamic_step'), '10', 'without its row the tag starts from its step');

# ---------------------------------------------------------------------------
# releasing the live owner's worker id
my $first = $node->safe_psql('postgres', 'SELECT leaf_snowflake_next()');
my $wid = $node->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status');
my @before = ($first,
	split /\n/, $node->safe_psql('postgres', 'SELECT leaf_snowflake_next() FROM generate_series(1, 2000)'));
my $sf_pid = worker_pid($node, 'postgres', 'snowflake');
ok($sf_pid =~ /^\d+$/, "premise: one snowflake worker ($sf_pid)");
# The owner's renewal is what reports 55006, and only to calls waiting on
# it (the worker logs just the message): stop the worker outside a
# transaction (the release then takes the row at once), let its lease run
# out so that a call has to wait for a renewal, release, start that call,
# and let the worker go on.
my $stopped = 0;
# never leave it stopped, whatever fails (the node could not shut down)
END { kill 'CONT', $sf_pid if defined $sf_pid && $sf_pid =~ /^\d+$/; }
for (1 .. 50)
{
	kill 'STOP', $sf_pid or die "SIGSTOP $sf_pid: $!";
	$stopped = $node->safe_psql('postgres',
		"SELECT xact_start IS NULL FROM pg_stat_activity WHERE pid = $sf_pid") eq 't';
	last if $stopped;
	kill 'CONT', $sf_pid;
	usleep(20_000);
}
ok($stopped, 'premise: the snowflake worker is stopped between transactions');
my $mark = persisted_mark($node, $wid);
cmp_ok($mark, '>=', (max_of(@before) >> 22) + LEAF_EPOCH_MS, 'premise: the mark covers the IDs issued before the release');
ok( wait_until(
		20,
		sub {
			$node->safe_psql('postgres',
				"SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint > $mark") eq 't';
		}),
	'premise: the stopped owner\'s lease ran out');
is( $node->safe_psql('postgres', "SELECT leaf_snowflake_release_worker_id($wid)"),
	default_node_name($node),
	'release returns the former owner');
is(persisted_mark($node, $wid), $mark, 'the released row keeps its mark');
my $waiter = start_client($node, 'postgres', 'waiter',
	"\\set VERBOSITY verbose\nSET leaf_id.refill_timeout = 15000;\nSELECT leaf_snowflake_next();\n",
	timeout => 60);
my $waiting = wait_until(
	20,
	sub {
		$node->safe_psql('postgres',
			q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'waiter' AND wait_event_type = 'Extension'}
		) eq '1';
	});
kill 'CONT', $sf_pid;
ok($waiting, 'premise: a call waits for the stopped owner\'s renewal');
finish_clients(60, $waiter);
my $waiter_err = slurp_file($waiter->{err});
isnt($waiter->{rc}, 0, 'the waiting call is refused');
my ($waiter_state) = $waiter_err =~ /ERROR:\s+([0-9A-Z]{5}):/;
is($waiter_state, '55006',
	'... with the 55006 of the owner\'s renewal, which finds the row released')
  or diag $waiter_err;
my @issued;
ok( wait_until(
		20,
		sub {
			my $r = try_sql($node, 'postgres',
				'SET leaf_id.refill_timeout = 2000; SELECT leaf_snowflake_next()');
			push @issued, $r->{out} if $r->{ret} == 0;
			return $node->log_contains(
				qr/renewal failed: the leaf_worker row of worker id $wid is not held by this server: it has node "released:$wid"/);
		}),
	'the released owner\'s renewal fails, saying the row is released');
my $r = wait_for_number($node, 'postgres',
	'SET leaf_id.refill_timeout = 2000; SELECT leaf_snowflake_next()', 20);
ok($r->{ok}, 'the released owner claims again and issues');
is( $node->safe_psql('postgres', "SELECT node_name FROM leaf_id_catalog.leaf_worker WHERE worker_id = $wid"),
	"released:$wid", '... leaving the released id to another node');
my $new_wid = $node->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status');
isnt($new_wid, $wid, "... issuing with another id ($new_wid)");
is( $node->safe_psql('postgres', "SELECT worker_id FROM leaf_id_catalog.leaf_worker WHERE node_name = '" . default_node_name($node) . "'"),
	$new_wid, '... which it claimed in the registry');
my $last = max_of(@before, @issued);
cmp_ok($r->{out}, '>', $last, '... above every ID issued before');
my %seen;
is(scalar(grep { $seen{$_}++ } (@before, @issued, $r->{out})), 0, 'no ID twice');
# the row the next owner of the id takes over still bounds the old owner's IDs
my $mark_now = persisted_mark($node, $wid);
is($mark_now, $mark, 'after the re-claim the released row still has its mark');
my @old_id = grep { (($_ >> 12) & 1023) == $wid } (@before, @issued);
ok($mark_now =~ /^\d+$/ && !grep({ ($_ >> 22) + LEAF_EPOCH_MS > $mark_now } @old_id),
	'no ID issued with the released id is above the row\'s mark (' . scalar(@old_id) . ' IDs)');

$node->stop;
done_testing();
