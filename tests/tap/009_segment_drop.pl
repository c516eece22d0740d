# leaf_id segment mode: shared-memory slots (leaf_id.max_tags,
# leaf_id.max_databases) held by a database come free again when leaf_id is
# dropped from it (DROP EXTENSION) or when the database itself is dropped, so
# that other databases can use them without a restart.

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node(
	'drop', q{
leaf_id.max_tags = 2
leaf_id.max_databases = 3
leaf_id.tag_resync_interval = 1
});

$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('main', 1, 10), ('other', 1000, 10);
});
is_deeply([ draw_ids($node, 'postgres', 'main', 2) ], [ 1, 2 ], 'postgres: tag main works');

# A database using leaf_id with one tag: with main, both tag slots are taken.
sub fill_db
{
	my ($db) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql(
		$db, q{
CREATE EXTENSION leaf_id;
INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('t', 100, 10);
});
	my $r = try_sql($node, $db, "SELECT leaf_segment_next('t')");
	is($r->{out}, '100', "$db: tag t works") or diag $r->{err};
	is(sqlstate_of($node, 'postgres', "SELECT leaf_segment_next('other')"),
		'53400', "$db holds the second tag slot: postgres' tag other finds none");
	return;
}

sub other_works
{
	return wait_until(
		10,
		sub {
			!defined sqlstate_of($node, 'postgres',
				"SELECT leaf_segment_next('other')");
		});
}

# --- DROP EXTENSION gives the database's tag slots back
fill_db('d1');
$node->safe_psql('d1', 'DROP EXTENSION leaf_id');
ok(other_works(), 'after DROP EXTENSION in d1, its tag slot is free again');

# free the slot of "other" again (delete it, let a call see it gone)
$node->safe_psql('postgres', "DELETE FROM leaf_alloc WHERE biz_tag = 'other'");
ok( wait_until(
		15,
		sub {
			(sqlstate_of($node, 'postgres', "SELECT leaf_segment_next('other')")
				  // '') eq '42704';
		}),
	'tag other deleted (slot freed)');
$node->safe_psql('postgres',
	"INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('other', 2000, 10)");

# --- DROP DATABASE gives the database's tag slots back
fill_db('d2');
my $r = try_sql($node, 'postgres', 'DROP DATABASE d2');
note 'plain DROP DATABASE d2 while its leaf_id worker runs: '
  . ($r->{sqlstate} ? "fails: $r->{err}" : 'works');
if ($r->{sqlstate})
{
	$r = try_sql($node, 'postgres', 'DROP DATABASE d2 WITH (FORCE)');
	is($r->{sqlstate}, undef, 'DROP DATABASE d2 WITH (FORCE)') or diag $r->{err};
}
ok(other_works(), 'after DROP DATABASE d2, its tag slot is free again')
  or diag 'postgres: '
  . try_sql($node, 'postgres', "SELECT leaf_segment_next('other')")->{err};

# --- DROP DATABASE gives the database slot back
# d1 (extension dropped, worker gone) can be dropped plainly
$r = try_sql($node, 'postgres', 'DROP DATABASE d1');
is($r->{sqlstate}, undef, 'DROP DATABASE d1 (leaf_id dropped from it before)')
  or diag $r->{err};
# postgres, d1 and d2 used leaf_id; d1 and d2 are gone: two databases can
# start using it
# (a tag slot may be missing, see above: only the database slot counts here)
for my $db ('d3', 'd4')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql(
		$db, q{
CREATE EXTENSION leaf_id;
INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('t', 100, 10);
});
	$r = try_sql($node, $db, "SELECT leaf_segment_next('t')");
	unlike($r->{err}, qr/databases already/, "$db gets a database slot")
	  or diag $r->{err};
}

$node->stop;
done_testing();
