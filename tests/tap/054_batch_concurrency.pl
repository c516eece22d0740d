# Many IDs in one call, concurrently with single calls: 8 sessions on a
# step-10 tag (leaf_id.max_step = 10, so segments stay small and refills are
# constant), half drawing batches of 1 to 100 IDs (many larger than a
# segment), half drawing one ID per call; and snowflake batches against
# single snowflake calls. Every ID any client received is distinct.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node('batch', "leaf_id.max_step = 10\n");
$node->safe_psql('postgres', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('b', 10)");

for my $mode (
	[ 'segment', sub { "SELECT leaf_segment_next('b', $_[0]);\n" }, "SELECT leaf_segment_next('b');\n" ],
	[ 'snowflake', sub { "SELECT leaf_snowflake_next($_[0]);\n" }, "SELECT leaf_snowflake_next();\n" ])
{
	my ($what, $batch, $single) = @$mode;
	my @clients;
	for my $i (1 .. 4)
	{
		my $sql = join '', map { $batch->(1 + int(rand(100))) } 1 .. 400;
		push @clients, start_client($node, 'postgres', "${what}_batch$i", $sql);
		push @clients, start_client($node, 'postgres', "${what}_single$i", $single x 5000);
	}
	finish_clients(120, @clients);
	my @all;
	for my $c (@clients)
	{
		is($c->{rc}, 0, "$what: client $c->{name} finished") or diag $c->{stderr};
		push @all, client_ids($c);
	}
	cmp_ok(scalar(@all), '>', 30_000, "$what: clients received many IDs (" . scalar(@all) . ')');
	my @dups = duplicates(@all);
	is_deeply(\@dups, [], "$what: no ID received twice")
	  or diag 'duplicated: ' . join(' ', @dups[ 0 .. ($#dups < 9 ? $#dups : 9) ]);
}
my $refills = $node->safe_psql('postgres', "SELECT refills FROM leaf_segment_status WHERE tag = 'b'");
cmp_ok($refills, '>', 1000, "segment: the batches crossed many segments ($refills refills)");

done_testing();
