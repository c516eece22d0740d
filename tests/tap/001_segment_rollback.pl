# leaf_id segment mode: IDs drawn in transactions that roll back are never
# handed out again (IDs, like sequence values, are not transactional), both
# for plain calls and for column defaults of rows whose INSERT rolls back.

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node('rollback');

$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES
  ('rb', 100, 7), ('rb_multi', 1, 5), ('row', 1, 4), ('sub', 1, 3);
});

# --- plain calls: the first use of a tag, inside a transaction that rolls back
my ($out) = $node->safe_psql(
	'postgres', q{
BEGIN;
SELECT leaf_segment_next('rb') FROM generate_series(1, 25);
ROLLBACK;
});
my @rolled_back = split /\n/, $out;
is(scalar @rolled_back, 25, 'drew 25 IDs in a transaction that rolled back');
is($rolled_back[0], 100, 'first ID of a new tag is its max_id');

# the worker reserved those IDs in its own committed transaction
my $max_id = $node->safe_psql('postgres',
	"SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'rb'");
cmp_ok($max_id, '>', max_of(@rolled_back),
	'leaf_alloc.max_id is past every ID drawn in the rolled-back transaction'
);

my @after = draw_ids($node, 'postgres', 'rb', 25);
my %rb = map { $_ => 1 } @rolled_back;
is_deeply([ grep { $rb{$_} } @after ], [],
	'IDs drawn after the rollback (same tag, new session) are all new');
cmp_ok(min_of(@after), '>', max_of(@rolled_back),
	'and above every rolled-back ID');
is_deeply([ duplicates(@rolled_back, @after) ], [], 'no ID seen twice');

# --- several rollbacks and commits interleaved in one session
my ($multi_ret, $multi_out, $multi_err) = $node->psql(
	'postgres', q{
BEGIN; SELECT leaf_segment_next('rb_multi') FROM generate_series(1, 12); ROLLBACK;
SELECT leaf_segment_next('rb_multi') FROM generate_series(1, 3);
BEGIN; SELECT leaf_segment_next('rb_multi') FROM generate_series(1, 9); ROLLBACK;
BEGIN; SELECT leaf_segment_next('rb_multi'); SELECT 1/0;
ROLLBACK;
BEGIN; SELECT leaf_segment_next('rb_multi') FROM generate_series(1, 4); COMMIT;
SELECT leaf_segment_next('rb_multi') FROM generate_series(1, 30);
}, on_error_stop => 0, timeout => 60);
like($multi_err, qr/division by zero/, 'the failing transaction failed');
# the failing "SELECT 1/0" prints nothing: every printed line is an ID
my @multi = split /\n/, $multi_out;
is(scalar @multi, 12 + 3 + 9 + 1 + 4 + 30, 'every call of the mixed session returned an ID');
is_deeply([ duplicates(@multi) ], [], 'mixed rollbacks/commits: no ID twice');
is_deeply([@multi], [ sort { $a <=> $b } @multi ],
	'one session gets increasing IDs across rollbacks');

# --- savepoints
$out = $node->safe_psql(
	'postgres', q{
BEGIN;
SELECT leaf_segment_next('sub');
SAVEPOINT s1;
SELECT leaf_segment_next('sub') FROM generate_series(1, 10);
ROLLBACK TO SAVEPOINT s1;
SELECT leaf_segment_next('sub') FROM generate_series(1, 10);
ROLLBACK;
SELECT leaf_segment_next('sub') FROM generate_series(1, 10);
});
my @sub = split /\n/, $out;
is(scalar @sub, 31, 'savepoint session drew 31 IDs');
is_deeply([ duplicates(@sub) ], [], 'savepoint rollbacks: no ID twice');

# --- row level: a DEFAULT leaf_segment_next() column whose INSERT rolls back
$node->safe_psql(
	'postgres', q{
CREATE TABLE items (
  id bigint PRIMARY KEY DEFAULT leaf_segment_next('row'),
  v int CHECK (v > 0)
);
});
$out = $node->safe_psql(
	'postgres', q{
BEGIN;
INSERT INTO items (v) SELECT g FROM generate_series(1, 30) g RETURNING id;
ROLLBACK;
});
my @row_rolled_back = split /\n/, $out;
is(scalar @row_rolled_back, 30, 'INSERT of 30 rows returned 30 IDs before its rollback');
is($node->safe_psql('postgres', 'SELECT count(*) FROM items'), '0',
	'the rolled-back rows are gone');

# a statement that fails after its defaults were evaluated
my $r = try_sql($node, 'postgres',
	'INSERT INTO items (v) SELECT 10 - g FROM generate_series(1, 15) g');
is($r->{sqlstate}, '23514', 'INSERT violating the CHECK fails (rows got IDs first)');

# concurrent sessions: two commit rows while a third keeps rolling its
# inserts back, all three at the same time
my $rounds = 400;
my @clients = (
	(
		map {
			start_client($node, 'postgres', "commit$_",
				"INSERT INTO items (v) SELECT g FROM generate_series(1, 5) g RETURNING id;\n"
				  x $rounds)
		} 1 .. 2
	),
	start_client(
		$node, 'postgres', 'rollback',
		"BEGIN;\nINSERT INTO items (v) SELECT g FROM generate_series(1, 5) g RETURNING id;\nROLLBACK;\n"
		  x $rounds));
finish_clients(120, @clients);
is_deeply([ map { $_->{rc} } @clients ], [ 0, 0, 0 ],
	'the three concurrent sessions ran without error')
  or diag join("\n", map { "$_->{name}: $_->{stderr}" } @clients);
my @conc_committed = map { client_ids($_) } @clients[ 0, 1 ];
my @conc_rolled_back = client_ids($clients[2]);
is(scalar @conc_committed, 2 * 5 * $rounds, 'the committing sessions got an ID for every row');
is(scalar @conc_rolled_back, 5 * $rounds, 'the rolling-back session got an ID for every row');
# the premise: the sessions ran at the same time. IDs of a tag come from one
# increasing stream, so concurrent sessions get interleaved IDs: rolled-back
# IDs lie between committed ones
my ($rb_min, $rb_max) = (min_of(@conc_rolled_back), max_of(@conc_rolled_back));
my $inside = grep { $_ > $rb_min && $_ < $rb_max } @conc_committed;
cmp_ok($inside, '>', 0,
	"the sessions overlapped: $inside committed IDs lie inside the rolled-back session's range");

my @row_committed = split /\n/,
  $node->safe_psql('postgres', 'SELECT id FROM items ORDER BY id');
is_deeply(\@row_committed, [ sort { $a <=> $b } @conc_committed ],
	'the table holds exactly the rows the committing sessions inserted');
my %rrb = map { $_ => 1 } @row_rolled_back, @conc_rolled_back;
is_deeply([ grep { $rrb{$_} } @row_committed ], [],
	'no committed row reuses an ID of a rolled-back INSERT');
cmp_ok(min_of(@row_committed), '>', max_of(@row_rolled_back),
	'committed rows got IDs above those of the INSERT rolled back before');
is_deeply([ duplicates(@row_rolled_back, @conc_rolled_back, @conc_committed) ], [],
	'no ID returned twice by INSERT ... RETURNING');

# rows committed afterwards in several sessions: still no ID reused
for my $i (1 .. 3)
{
	$node->safe_psql(
		'postgres', qq{
BEGIN; INSERT INTO items (v) SELECT g FROM generate_series(1, 7) g; ROLLBACK;
INSERT INTO items (v) SELECT g FROM generate_series(1, 7) g;
});
}
my @all_ids = split /\n/,
  $node->safe_psql('postgres', 'SELECT id FROM items ORDER BY id');
is(scalar @all_ids, 2 * 5 * $rounds + 21, 'all committed rows present');
is_deeply([ grep { $rrb{$_} } @all_ids ], [],
	'later committed rows never reuse rolled-back IDs');

$node->stop;
done_testing();
