# leaf_id segment mode: tags added and deleted while the server runs.
#  - a tag inserted into leaf_alloc works at once;
#  - a deleted tag fails with SQLSTATE 42704 as soon as its cached segments
#    are used up, and at the latest after leaf_id.tag_resync_interval;
#  - its shared-memory slot is reused (leaf_id.max_tags = 4, yet many more
#    tags come and go), and a session that still caches the old slot never
#    gets IDs of the tag that took the slot over.

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;
use Time::HiRes qw(time usleep);

# The server starts with the resync switched off (1 hour) for the first
# parts; it is set to 1 second by a reload further down.
my $node = leaf_node(
	'lifecycle', q{
leaf_id.tag_resync_interval = 3600
leaf_id.max_tags = 4
leaf_id.max_tags_per_database = 4
});

# Poll (at most $seconds) until leaf_segment_next($tag) fails with 42704.
sub noticed_deleted
{
	my ($tag, $seconds) = @_;
	return wait_until($seconds,
		sub { (sqlstate_of($node, 'postgres', "SELECT leaf_segment_next('$tag')") // '') eq '42704' });
}

$node->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('base', 1, 10)");
my @base = draw_ids($node, 'postgres', 'base', 5);
is_deeply(\@base, [ 1 .. 5 ], 'base tag gives 1..5; the worker runs');

# ---------------------------------------------------------------------------
# a tag inserted while the server runs works at once
my $out = $node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('fresh', 777, 10);
SELECT leaf_segment_next('fresh');
});
is($out, '777', 'a tag inserted while the server runs gives its max_id at once');
is_deeply([ draw_ids($node, 'postgres', 'fresh', 3) ],
	[ 778, 779, 780 ], 'and goes on from there in another session');

# ---------------------------------------------------------------------------
# deleted tag, without resync: fails as soon as its cached segments are used up
is($node->safe_psql('postgres', 'SHOW leaf_id.tag_resync_interval'),
	'1h', 'resync switched off (1 hour) for this part');

$node->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('small', 100, 2)");
my @small_before = draw_ids($node, 'postgres', 'small', 3);
is_deeply(\@small_before, [ 100, 101, 102 ], 'small tag works');
# let prefetching settle, then see how many IDs are still cached
ok( wait_until(
		10,
		sub {
			$node->safe_psql('postgres',
				"SELECT next_ready AND NOT refill_in_flight FROM leaf_segment_status WHERE tag = 'small'"
			) eq 't';
		}),
	'small tag: next segment prefetched');
my $cached = $node->safe_psql('postgres',
	"SELECT (buffer0_end - buffer0_next) + (buffer1_end - buffer1_next) FROM leaf_segment_status WHERE tag = 'small'"
);
cmp_ok($cached, '>', 0, "small tag: $cached IDs cached");

$node->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'small'");
my $t0 = time;
my $r = try_sql($node, 'postgres',
	"SELECT leaf_segment_next('small');\n" x ($cached + 20));
my $elapsed = time - $t0;
my @small_after = split /\n/, $r->{out};
is($r->{sqlstate}, '42704',
	'deleted tag: SQLSTATE 42704 once its cached IDs are used up');
like($r->{err}, qr/small/, 'the error names the tag');
cmp_ok(scalar(@small_after), '<=', $cached,
	'no more IDs after the deletion than were cached');
cmp_ok($elapsed, '<', 5,
	sprintf('the error came at once (%.2fs), not after a resync or a timeout', $elapsed));
is_deeply([ duplicates(@small_before, @small_after) ], [], 'small tag: no ID twice');
is(sqlstate_of($node, 'postgres', "SELECT leaf_segment_next('small')"),
	'42704', 'deleted tag: the next call fails too');
ok(!grep({ $_ eq 'small' } status_tags($node, 'postgres')),
	'deleted tag no longer listed in leaf_segment_status');

$node->safe_psql('postgres',
	'ALTER SYSTEM SET leaf_id.tag_resync_interval = 1; SELECT pg_reload_conf()');
ok( wait_until(60,
		sub { $node->safe_psql('postgres', 'SHOW leaf_id.tag_resync_interval') eq '1s' }),
	'resync every second from now on');
# The worker has reloaded too once it notices, by a resync, a tag deleted
# with plenty of IDs cached (no refill can notice it). Until it reloads it
# does not resync for an hour.
$node->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('probe', 1, 100000)");
draw_ids($node, 'postgres', 'probe', 1);
$node->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'probe'");
ok( noticed_deleted('probe', 60),
	'the worker reloaded: a resync noticed a deleted tag with IDs cached');

# ---------------------------------------------------------------------------
# deleted tag with plenty of IDs cached: fails after the resync interval
$node->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('big', 1000, 100000)"
);
my $s_big = session($node, 'postgres');
my ($first_big) = session_query($s_big, "SELECT leaf_segment_next('big')");
is($first_big, '1000', 'big tag works');
$node->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'big'");
$t0 = time;
my ($state, @big_after);
while (time - $t0 < 15)
{
	my ($o, $e, $st) = session_query($s_big, "SELECT leaf_segment_next('big')");
	if (defined $st)
	{
		$state = $st;
		last;
	}
	push @big_after, $o;
	usleep(50_000);
}
$elapsed = time - $t0;
is($state, '42704', 'deleted tag with cached IDs: SQLSTATE 42704 in the end');
cmp_ok($elapsed, '<', 1 + 1 + 2,
	sprintf('within the resync interval (1s) plus the worker tick (%.2fs)',
		$elapsed));
is_deeply([ duplicates($first_big, @big_after) ], [], 'big tag: no ID twice');
my ($o2, $e2, $st2) = session_query($s_big, "SELECT leaf_segment_next('big')");
is($st2, '42704', 'deleted tag: the same session fails again');
is(sqlstate_of($node, 'postgres', "SELECT leaf_segment_next('big')"),
	'42704', 'and so does another session');
$s_big->quit;

# ---------------------------------------------------------------------------
# a session caching a slot that another tag takes over
# (slots now: base and fresh live, two free; max_tags = 4)
$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('x', 5000, 1000), ('filler', 7000, 1000);
});
my $s = session($node, 'postgres');
my ($x1) = session_query($s, "SELECT leaf_segment_next('x')");
is($x1, '5000', 'session S caches tag x');
is_deeply([ draw_ids($node, 'postgres', 'filler', 1) ], [7000],
	'tag filler takes the last free slot');
$node->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'x'");
ok( noticed_deleted('x', 15),
	'another session sees x deleted (42704); that frees the slot of x');
$node->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('y', 900000, 1000)");
my @y_other = draw_ids($node, 'postgres', 'y', 3);
is_deeply(\@y_other, [ 900000, 900001, 900002 ],
	'tag y takes the only free slot (the one of x) and starts at its max_id');
# free one more slot, so that S can look x up again
$node->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'filler'");
ok( noticed_deleted('filler', 15),
	'filler deleted');
my ($sx, $ex, $stx) = session_query($s, "SELECT leaf_segment_next('x')");
is($stx, '42704',
	'session S, whose cache points at the old slot of x (now y\'s), gets 42704')
  or diag "S got '$sx' for x: $ex";
is($sx, '', 'and no ID (in particular none of y)');
my ($sy) = session_query($s,
	"SELECT leaf_segment_next('y') FROM generate_series(1, 5)");
my @y_s = split /\n/, $sy;
is(scalar @y_s, 5, 'session S draws y');
push @y_other, draw_ids($node, 'postgres', 'y', 5);
is_deeply([ duplicates(@y_s, @y_other) ], [], 'tag y: no ID twice across sessions');
ok(!grep({ $_ < 900000 } @y_s, @y_other), 'tag y: all IDs from its own range');
$s->quit;

# Tags listed by leaf_segment_status: tag => status.
sub listed
{
	return map { split /\|/ } split /\n/,
	  $node->safe_psql('postgres', 'SELECT tag, status FROM leaf_segment_status');
}

sub live_tags
{
	return map { $_ => 1 } split /\n/,
	  $node->safe_psql('postgres', 'SELECT biz_tag FROM leaf_id_catalog.leaf_alloc');
}

# every listed tag exists, or is shown as missing
sub listed_ok
{
	my ($what) = @_;
	my %listed = listed();
	my %live = live_tags();
	my @wrong = grep { !$live{$_} && $listed{$_} ne 'missing' } sort keys %listed;
	is_deeply(\@wrong, [], "$what: leaf_segment_status lists no deleted tag as usable")
	  or diag explain \%listed;
	return;
}
listed_ok('after x and filler');
ok(!grep({ $_ eq 'x' || $_ eq 'filler' } keys %{ { listed() } }),
	'x and filler, whose slots were freed, are not listed');

# ---------------------------------------------------------------------------
# many tags come and go: slots are reused (max_tags = 4)
$node->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'y'");
ok( noticed_deleted('y', 15),
	'y deleted');
listed_ok('after y');
for my $i (1 .. 8)
{
	my $tag = "cycle$i";
	my $start = 10_000 * $i;
	$node->safe_psql('postgres',
		"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('$tag', $start, 1)"
	);
	my $got = try_sql($node, 'postgres',
		"SELECT leaf_segment_next('$tag') FROM generate_series(1, 3)");
	is($got->{out}, join("\n", $start .. $start + 2),
		"$tag: new tag works (slot found although max_tags = 4)")
	  or diag $got->{err};
	my %status = listed();
	is($status{$tag}, 'active', "$tag: listed as active in leaf_segment_status");
	ok(!(grep { /^cycle/ && $_ ne $tag } keys %status),
		"$tag: earlier deleted cycle tags not listed any more")
	  or diag explain \%status;
	listed_ok($tag);

	$node->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = '$tag'");
	# with step 1, its cached segments run out within a few calls
	$got = try_sql($node, 'postgres',
		"SELECT leaf_segment_next('$tag');\n" x 30);
	is($got->{sqlstate}, '42704', "$tag: deleted, then 42704");
	my @after = split /\n/, $got->{out};
	ok(!grep({ $_ < $start + 3 } @after), "$tag: no ID twice after deletion");
}

# ---------------------------------------------------------------------------
# fill every slot: slots of deleted tags (free or still shown as missing)
# are all reused
$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('f1', 100, 5), ('f2', 200, 5), ('f3', 300, 5);
});
is_deeply([ draw_ids($node, 'postgres', 'f1', 2) ], [ 100, 101 ], 'f1 gets a slot');
is_deeply([ draw_ids($node, 'postgres', 'f2', 2) ], [ 200, 201 ],
	'f2 gets the last slot (no slot is lost to deleted tags)');
is(sqlstate_of($node, 'postgres', "SELECT leaf_segment_next('f3')"),
	'53400', 'f3: all 4 slots in use by live tags');
is_deeply({ listed() },
	{ base => 'active', fresh => 'active', f1 => 'active', f2 => 'active' },
	'at the end only the live tags are listed');

$node->stop;
done_testing();
