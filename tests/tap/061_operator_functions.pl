# leaf_id operator functions that need a running worker (README, "Operator
# functions"):
#  - the tuned step survives a restart (Leaf issue #111): the worker persists
#    a tag's dynamic step in leaf_alloc_tuning, and the first refill after a
#    restart starts from it, bounded by leaf_id.max_step and never below the
#    row's step (leaf_segment_status shows the step);
#  - leaf_snowflake_release_worker_id() on the live owner's id: its generator
#    stops issuing, the row keeps its mark, and a re-claim takes the id back
#    above everything issued before.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use SnowflakeTap qw(default_node_name LEAF_EPOCH_MS);
use Test::More;

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
		"SELECT tuned_step FROM leaf_alloc_tuning WHERE biz_tag = '$tag'");
}

# ---------------------------------------------------------------------------
# the tuned step
$node->safe_psql('postgres', q{
INSERT INTO leaf_alloc (biz_tag, step) VALUES ('busy', 10), ('capped', 10), ('floor', 500);
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
INSERT INTO leaf_alloc_tuning (biz_tag, tuned_step) VALUES ('capped', 2000000), ('floor', 20);
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
$node->safe_psql('postgres', q{DELETE FROM leaf_alloc_tuning WHERE biz_tag = 'busy'});
$node->restart;
$node->safe_psql('postgres', q{SELECT leaf_segment_next('busy')});
is(status_of('busy', 'dynamic_step'), '10', 'without its row the tag starts from its step');

# ---------------------------------------------------------------------------
# releasing the live owner's worker id
my $first = $node->safe_psql('postgres', 'SELECT leaf_snowflake_next()');
my $wid = $node->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status');
is( $node->safe_psql('postgres', "SELECT leaf_snowflake_release_worker_id($wid)"),
	default_node_name($node),
	'release returns the former owner');
# the owner's next renewal finds the row released (55006 in the log) and it
# claims again: another free id, not the released one (the operator released
# it for another node, which would race the owner's re-claim for it)
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
is( $node->safe_psql('postgres', "SELECT node_name FROM leaf_worker WHERE worker_id = $wid"),
	"released:$wid", '... leaving the released id to another node');
my $new_wid = $node->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status');
isnt($new_wid, $wid, "... issuing with another id ($new_wid)");
is( $node->safe_psql('postgres', "SELECT worker_id FROM leaf_worker WHERE node_name = '" . default_node_name($node) . "'"),
	$new_wid, '... which it claimed in the registry');
my $last = max_of($first, @issued);
cmp_ok($r->{out}, '>', $last, '... above every ID issued before');
my %seen;
is(scalar(grep { $seen{$_}++ } ($first, @issued, $r->{out})), 0, 'no ID twice');

$node->stop;
done_testing();
