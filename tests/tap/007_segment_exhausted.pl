# leaf_id segment mode: a tag whose max_id is near the largest bigint hands
# out the IDs that are left (max_id .. 9223372036854775806; max_id is the
# first ID not reserved, so 9223372036854775807 itself can never be reserved)
# and then fails with SQLSTATE 2200H, without any ID twice, also when several
# sessions race for the last IDs.

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use Math::BigInt;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node('exhausted');

# Perl numbers lose precision near 2^63: compare as strings / BigInts
my $MAX = Math::BigInt->new('9223372036854775807');
sub big { Math::BigInt->new($_[0]) }
sub range_str { my ($from, $n) = @_; map { ($from + $_)->bstr } 0 .. $n - 1 }

$node->safe_psql(
	'postgres', qq{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES
  ('end', @{[ ($MAX - 5)->bstr ]}, 3),
  ('full', @{[ $MAX->bstr ]}, 10),
  ('race', @{[ ($MAX - 1000)->bstr ]}, 7);
});

# one session, call after call
my $r = try_sql($node, 'postgres', "SELECT leaf_segment_next('end');\n" x 10);
my @end = split /\n/, $r->{out};
is_deeply(\@end, [ range_str($MAX - 5, 5) ],
	'the last 5 IDs are handed out, in order, up to 9223372036854775806');
is($r->{sqlstate}, '2200H', 'then SQLSTATE 2200H (sequence generator limit exceeded)')
  or diag $r->{err};
for my $i (1 .. 3)
{
	$r = try_sql($node, 'postgres', "SELECT leaf_segment_next('end')");
	is($r->{sqlstate}, '2200H', "exhausted tag: call $i in a new session fails with 2200H");
	is($r->{out}, '', "exhausted tag: call $i gives no ID");
}
is($node->safe_psql('postgres', "SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'end'"),
	$MAX->bstr, 'leaf_alloc.max_id stopped at the largest bigint');

# a tag that starts exhausted
$r = try_sql($node, 'postgres', "SELECT leaf_segment_next('full')");
is($r->{sqlstate}, '2200H', 'a tag with max_id = 9223372036854775807 fails at once');
is($r->{out}, '', 'and gives no ID');

# several sessions race for the last 1000 IDs
my @clients;
for my $i (1 .. 4)
{
	push @clients,
	  start_client($node, 'postgres', "race$i",
		"\\set VERBOSITY verbose\n"
		  . "SELECT leaf_segment_next('race');\n" x 1200);
}
finish_clients(120, @clients);
my @race;
for my $c (@clients)
{
	like($c->{stderr}, qr/ERROR:\s+2200H:/,
		"race client $c->{name} stopped at SQLSTATE 2200H")
	  or diag $c->{stderr};
	push @race, client_ids($c);
}
is_deeply([ duplicates(@race) ], [], 'race: no ID handed out twice');
is_deeply([ sort { big($a) <=> big($b) } @race ],
	[ range_str($MAX - 1000, 1000) ],
	'race: exactly the 1000 remaining IDs were handed out');
$r = try_sql($node, 'postgres', "SELECT leaf_segment_next('race')");
is($r->{sqlstate}, '2200H', 'race: the tag is exhausted afterwards (2200H)');

$node->stop;
done_testing();
