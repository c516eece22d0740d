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
leaf_id.max_tags_per_database = 2
leaf_id.max_databases = 3
leaf_id.tag_resync_interval = 1
});

$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('main', 1, 10), ('other', 1000, 10);
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
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('t', 100, 10);
});
	my $r = try_sql($node, $db, "SELECT leaf_segment_next('t')");
	is($r->{out}, '100', "$db: tag t works") or diag $r->{err};
	is(sqlstate_of($node, 'postgres', "SELECT leaf_segment_next('other')"),
		'53400', "$db holds the second tag slot: postgres' tag other finds none");
	return;
}

# postgres' tag other hands out the ID $want: psql exits with 0 and prints
# it (polled: the slot comes free asynchronously)
sub other_works
{
	my ($want, $message) = @_;
	my $r = wait_for_number($node, 'postgres',
		"SELECT leaf_segment_next('other')", 10);
	ok($r->{ok} && $r->{out} eq $want, $message)
	  or diag "psql exit $r->{ret}, output '$r->{out}', stderr: $r->{err}";
	return;
}

# --- DROP EXTENSION gives the database's tag slots back
fill_db('d1');
$node->safe_psql('d1', 'DROP EXTENSION leaf_id');
other_works(1000, 'after DROP EXTENSION in d1, its tag slot is free again: other hands out 1000');

# free the slot of "other" again (delete it, let a call see it gone)
$node->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'other'");
ok( wait_until(
		15,
		sub {
			(sqlstate_of($node, 'postgres', "SELECT leaf_segment_next('other')")
				  // '') eq '42704';
		}),
	'tag other deleted (slot freed)');
$node->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('other', 2000, 10)");

# --- DROP DATABASE gives the database's tag slots back
fill_db('d2');
my $r = try_sql($node, 'postgres', 'DROP DATABASE d2');
note 'plain DROP DATABASE d2 while its leaf_id worker runs: '
  . ($r->{sqlstate} ? "fails: $r->{err}" : 'works');
if ($r->{sqlstate})
{
	$r = try_sql($node, 'postgres', 'DROP DATABASE d2 WITH (FORCE)');
	is($r->{ret}, 0, 'DROP DATABASE d2 WITH (FORCE)') or diag $r->{err};
}
other_works(2000, 'after DROP DATABASE d2, its tag slot is free again: other hands out 2000');

# --- DROP DATABASE gives the database slot back
# d1 (extension dropped, worker gone) can be dropped plainly
$r = try_sql($node, 'postgres', 'DROP DATABASE d1');
is($r->{ret}, 0, 'DROP DATABASE d1 (leaf_id dropped from it before)')
  or diag $r->{err};
# postgres, d1 and d2 used leaf_id; d1 and d2 are gone: two databases can
# start using it. Both tag slots are taken (main and other of postgres), so a
# snowflake call shows the database slot: it needs one, and no tag slot.
for my $db ('d3', 'd4')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION leaf_id');
	$r = wait_for_number($node, $db, 'SELECT leaf_snowflake_next()', 0);
	ok($r->{ok}, "$db gets a database slot: its snowflake call returns an ID")
	  or diag "psql exit $r->{ret}, output '$r->{out}', stderr: $r->{err}";
}

$node->stop;
done_testing();
