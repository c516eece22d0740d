# Callers that wait for a slow refill ask for one refill, not two. A caller
# that finds both segments empty asks the worker again on every round of its
# wait (every 100 ms), and it used to set the request flag after the worker
# had begun the refill it waited for: when that refill was published the flag
# was still set, and the worker at once reserved the next segment, with the
# step doubled (the first segment "lasted" less than the segment duration).
# On Citus, where a first refill takes a round trip to every node, this made
# the ranges of test 201 depend on timing. The refill is made slow here by a
# row lock on the tag's leaf_alloc row, held while two callers wait; after
# the commit there must be one refill, and leaf_alloc must record one step.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;

my $node = leaf_node('one_refill');
$node->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('w', 1000)});

my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN; SELECT 1 FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'w' FOR UPDATE});
my @callers = map {
	SegmentTap::start_client($node, 'postgres', "waiter$_",
		"SET leaf_id.refill_timeout = 20000;\nSELECT leaf_segment_next('w');\n")
} 1 .. 2;

# the premise: the worker's refill waits on the row lock, and both callers
# wait for it (for more than a few of their 100 ms rounds)
ok( wait_until(
		10,
		sub {
			$node->safe_psql('postgres', q{
SELECT count(*) FROM pg_stat_activity
WHERE backend_type = 'leaf_id segment worker' AND wait_event_type = 'Lock'}) eq '1';
		}),
	'the worker\'s refill waits for the row lock');
ok( wait_until(
		10,
		sub {
			$node->safe_psql('postgres', q{
SELECT count(*) FROM pg_stat_activity
WHERE application_name LIKE 'waiter%' AND state = 'active'}) eq '2';
		}),
	'both callers wait for the refill');
sleep 1;
is($node->safe_psql('postgres', q{SELECT refill_in_flight FROM leaf_segment_status WHERE tag = 'w'}),
	't', 'the refill is still in flight after a second of the callers\' waits');
$holder->query_safe('COMMIT');
$holder->quit;

SegmentTap::finish_clients(30, @callers);
is(join(',', map { $_->{rc} } @callers), '0,0', 'both callers got an ID')
  or diag join "\n", map { $_->{stderr} } @callers;
is( join(',', sort { $a <=> $b } map { SegmentTap::client_ids($_) } @callers),
	'1,2', 'they got the first two IDs of the segment');

# any second refill would have been asked for before the callers returned;
# give the worker time to make it
sleep 2;
is($node->safe_psql('postgres', q{SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'w'}),
	'1001', 'leaf_alloc recorded one segment of one step');
is($node->safe_psql('postgres', q{SELECT refills FROM leaf_segment_status WHERE tag = 'w'}),
	'1', 'the worker made one refill');

# the prefetch still comes at 10% of the segment, with the step doubled
$node->safe_psql('postgres', q{SELECT leaf_segment_next('w') FROM generate_series(1, 150)});
ok( wait_until(
		10,
		sub {
			$node->safe_psql('postgres', q{SELECT refills FROM leaf_segment_status WHERE tag = 'w'}) eq '2';
		}),
	'the prefetch after 10% of the segment is made');
is($node->safe_psql('postgres', q{SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'w'}),
	'3001', 'the prefetch reserved the next segment, of twice the step');

$node->stop;
done_testing();
