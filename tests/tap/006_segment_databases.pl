# leaf_id segment mode: two databases of one server, each with a tag of the
# same name, are independent: each starts at its own leaf_alloc.max_id, both
# issue IDs (also at the same time), neither moves the other's range, and
# deleting the tag in one leaves the other alone.

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node('databases', "leaf_id.tag_resync_interval = 1\n");
my $BIG = 1_000_000_000_000;    # start of the second database's range

$node->safe_psql('postgres', 'CREATE DATABASE second');
$node->safe_psql('second', 'CREATE EXTENSION leaf_id');
$node->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('same', 1, 10)");
$node->safe_psql('second',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('same', $BIG, 10)");

# interleaved, one session at a time
my (@first, @second);
for my $i (1 .. 5)
{
	push @first,  draw_ids($node, 'postgres', 'same', 40);
	push @second, draw_ids($node, 'second',   'same', 40);
}
is_deeply(\@first, [ 1 .. 200 ],
	'database 1: tag "same" gives 1..200, untouched by database 2');
is_deeply(\@second, [ $BIG .. $BIG + 199 ],
	'database 2: tag "same" gives its own range, untouched by database 1');

my $max1 = $node->safe_psql('postgres',
	"SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'same'");
my $max2 = $node->safe_psql('second',
	"SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'same'");
ok($max1 > 200 && $max1 < $BIG, "database 1: max_id $max1 moved by its own refills only");
ok($max2 > $BIG + 199, "database 2: max_id $max2 moved by its own refills");

my $workers = $node->safe_psql('postgres',
	"SELECT count(DISTINCT datname) FROM pg_stat_activity WHERE backend_type = 'leaf_id segment worker'");
is($workers, '2', 'one leaf_id segment worker per database');

my @st1 = split /\|/, $node->safe_psql('postgres',
	"SELECT tag, buffer0_start, buffer1_start FROM leaf_segment_status");
my @st2 = split /\|/, $node->safe_psql('second',
	"SELECT tag, buffer0_start, buffer1_start FROM leaf_segment_status");
is($st1[0], 'same', 'database 1 lists its tag');
is($st2[0], 'same', 'database 2 lists its tag');
ok(!grep({ $_ >= $BIG } @st1[ 1, 2 ]), 'database 1 status shows only its own segments');
ok(!grep({ $_ > 0 && $_ < $BIG } @st2[ 1, 2 ]),
	'database 2 status shows only its own segments');

# both at the same time, two clients each
my @clients;
for my $db ('postgres', 'second')
{
	for my $i (1 .. 2)
	{
		push @clients,
		  start_client($node, $db, "${db}_c$i",
			"SELECT leaf_segment_next('same') FROM generate_series(1, 20);\n"
			  x 150);
	}
}
finish_clients(120, @clients);
for my $c (@clients)
{
	is($c->{rc}, 0, "client $c->{name} finished") or diag $c->{stderr};
}
my @c1 = map { client_ids($_) } grep { $_->{name} =~ /^postgres/ } @clients;
my @c2 = map { client_ids($_) } grep { $_->{name} =~ /^second/ } @clients;
is(scalar @c1, 2 * 150 * 20, 'database 1: all concurrent IDs received');
is(scalar @c2, 2 * 150 * 20, 'database 2: all concurrent IDs received');
is_deeply([ duplicates(@first, @c1) ], [], 'database 1: no ID twice');
is_deeply([ duplicates(@second, @c2) ], [], 'database 2: no ID twice');
ok(!grep({ $_ <= 200 || $_ >= $BIG } @c1),
	'database 1: concurrent IDs are new and in its own range');
ok(!grep({ $_ < $BIG + 200 } @c2),
	'database 2: concurrent IDs are new and in its own range');

# deleting the tag in database 1 leaves database 2 alone
$node->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'same'");
ok( wait_until(
		15,
		sub {
			(sqlstate_of($node, 'postgres', "SELECT leaf_segment_next('same')")
				  // '') eq '42704';
		}),
	'database 1: deleted tag fails with 42704');
my @after2 = draw_ids($node, 'second', 'same', 50);
is(scalar @after2, 50, 'database 2: the tag of the same name still works');
is_deeply([ duplicates(@second, @c2, @after2) ], [], 'database 2: still no ID twice');
is_deeply([ status_tags($node, 'second') ], ['same'],
	'database 2 still lists its tag');

# re-creating it in database 1 starts at the new row's max_id
$node->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('same', 5000000, 10)");
is_deeply([ draw_ids($node, 'postgres', 'same', 3) ],
	[ 5000000, 5000001, 5000002 ], 'database 1: re-inserted tag starts at its max_id');

$node->stop;
done_testing();
