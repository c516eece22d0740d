# leaf_id segment mode: all tag slots in use (leaf_id.max_tags = 2). A third
# tag fails with SQLSTATE 53400 and an error that names leaf_id.max_tags; the
# cached tags go on working; a deleted tag's slot can be taken by a new tag.
# Slots are shared by all databases. A tag whose first refill fails gives
# its slot back, so tags that cannot be refilled do not keep the slots from
# the others.

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node(
	'slots', q{
leaf_id.max_tags = 2
leaf_id.max_tags_per_database = 2
leaf_id.tag_resync_interval = 1
});

$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES
  ('a', 1, 10), ('b', 100, 10), ('c', 1000, 10);
});

is_deeply([ draw_ids($node, 'postgres', 'a', 3) ], [ 1, 2, 3 ], 'tag a works');
is_deeply([ draw_ids($node, 'postgres', 'b', 3) ], [ 100, 101, 102 ],
	'tag b works');

my $r = try_sql($node, 'postgres', "SELECT leaf_segment_next('c')");
is($r->{sqlstate}, '53400', 'third tag with max_tags = 2: SQLSTATE 53400');
like($r->{err}, qr/leaf_id\.max_tags/,
	'the error (message or hint) names leaf_id.max_tags');
like($r->{err}, qr/ERROR:\s+53400:[^\n]*leaf_id\.max_tags/,
	'the error message itself names leaf_id.max_tags')
  or diag "error report:\n$r->{err}";
is($r->{out}, '', 'no ID for the third tag');
is($node->safe_psql('postgres', "SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'c'"),
	'1000', 'nothing was reserved for the third tag');

# a session that keeps trying, and the cached tags meanwhile
my $s = session($node, 'postgres');
my ($o, $e, $st) = session_query($s, "SELECT leaf_segment_next('c')");
is($st, '53400', 'again 53400 in another session');
($o) = session_query($s, "SELECT leaf_segment_next('a')");
is($o, '4', 'tag a still works after the failure, in the same session');
is_deeply([ draw_ids($node, 'postgres', 'b', 2) ], [ 103, 104 ],
	'tag b still works');

# slots are shared by all databases
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', q{
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('a', 50000, 10);
});
is(sqlstate_of($node, 'other', "SELECT leaf_segment_next('a')"),
	'53400', 'a tag of another database finds the slots full too');

# delete tag a: after the resync its slot is free again for c
$node->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'a'");
ok( wait_until(
		15,
		sub {
			(sqlstate_of($node, 'postgres', "SELECT leaf_segment_next('a')")
				  // '') eq '42704';
		}),
	'deleted tag a fails with 42704');
($o, $e, $st) = session_query($s,
	"SELECT leaf_segment_next('c') FROM generate_series(1, 3)");
is($o, "1000\n1001\n1002", 'tag c takes the freed slot and starts at its max_id')
  or diag $e;
is(sqlstate_of($node, 'other', "SELECT leaf_segment_next('a')"),
	'53400', 'the slots are full again (b and c)');
is_deeply([ draw_ids($node, 'postgres', 'b', 2) ], [ 105, 106 ],
	'tag b unaffected');
$s->quit;
$node->stop;

# --- tags whose first refill fails do not keep the slots --------------------
my $fail = leaf_node('slots_failing', "leaf_id.max_tags = 2\nleaf_id.max_tags_per_database = 2\n");
$fail->safe_psql('postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step)
  SELECT 'broken' || i, 1, 10 FROM generate_series(1, 5) i UNION ALL SELECT 'good', 1, 10;
CREATE FUNCTION refuse_broken() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.biz_tag LIKE 'broken%' THEN RAISE EXCEPTION 'no refill for %', NEW.biz_tag; END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER refuse_broken BEFORE UPDATE ON leaf_id_catalog.leaf_alloc FOR EACH ROW EXECUTE FUNCTION refuse_broken();
});
my @states = map { sqlstate_of($fail, 'postgres', "SELECT leaf_segment_next('broken$_')") // 'none' } 1 .. 5;
is_deeply(\@states, [ ('P0001') x 5 ],
	'five tags whose refill fails, with two slots: each call gets the refill\'s error, not 53400');
is_deeply([ draw_ids($fail, 'postgres', 'good', 3) ], [ 1, 2, 3 ],
	'a tag that can be refilled still finds a slot');
is(sqlstate_of($fail, 'postgres', "SELECT leaf_segment_next('broken1')") // 'none', 'P0001',
	'a failing tag asked again gets its error again');
$fail->stop;
done_testing();
