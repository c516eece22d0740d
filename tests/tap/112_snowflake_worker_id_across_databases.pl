# A snowflake worker id that moves from one database of a server to another
# in one server lifetime starts above the lease the first database held:
# the second database's registry (a copy made from the first, or a fresh
# one) knows nothing of that lease. db1 draws IDs with worker id 5 for about
# 2 s and is dropped; db2 takes worker id 5 at once, with its clock 2 s
# behind (leaf_id.test_clock_offset_ms, less than what the generator would
# refuse as a rollback of its own, since db2's generator has no history): it
# must issue no ID that db1 issued.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap qw(leaf_node try_sql);
use Test::More;

my $node = leaf_node('idmove', "leaf_id.refill_timeout = 15000\n");
my $dir = $node->basedir;
for my $db ('db1', 'db2')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql('postgres', "ALTER DATABASE $db SET leaf_id.worker_id = 5");
	$node->safe_psql($db, 'CREATE EXTENSION leaf_id');
}
$node->safe_psql('postgres', "ALTER DATABASE db2 SET leaf_id.test_clock_offset_ms = -2000");

# db1 draws densely for about 2 s (every millisecond has IDs)
my $r = try_sql($node, 'db1', qq{
CREATE TABLE ids AS SELECT leaf_snowflake_next() AS id FROM generate_series(1, 2500000);
SELECT (leaf_snowflake_decode(max(id))).worker_id FROM ids;
COPY ids TO '$dir/db1_ids.txt';
}, timeout => 120);
is($r->{ret}, 0, 'db1 drew IDs with worker id 5') or diag $r->{err};
is($r->{out}, '5', 'premise: db1 issues with worker id 5');
$node->safe_psql('postgres', 'DROP DATABASE db1 WITH (FORCE)');

# db2 draws as soon as it can: calls refused meanwhile (its clock behind
# the lease db1 held, 58000) are what the rule asks for
my @refused;
my $t0 = time;
while (1)
{
	$r = try_sql($node, 'db2',
		'CREATE TABLE ids AS SELECT leaf_snowflake_next() AS id FROM generate_series(1, 200000)');
	last if $r->{ret} == 0 || time - $t0 > 30;
	push @refused, $r->{sqlstate} // 'none';
	select(undef, undef, undef, 0.2);
}
is($r->{ret}, 0, 'db2 drew IDs after db1 was dropped') or diag $r->{err};
note 'db2 calls refused before: ' . scalar(@refused) . ' (' . join(',', sort keys %{ { map { $_ => 1 } @refused } }) . ')';
is(scalar(grep { $_ ne '58000' } @refused), 0, 'the only refusals meanwhile: clock behind the mark (58000)');
$r = try_sql($node, 'db2', qq{
SELECT DISTINCT (leaf_snowflake_decode(id)).worker_id FROM ids;
CREATE TABLE db1_ids (id bigint);
COPY db1_ids FROM '$dir/db1_ids.txt';
SELECT count(*) FROM ids JOIN db1_ids USING (id);
}, timeout => 120);
note 'ms and sequences of db1, db2: ' . $node->safe_psql('db2', q{
SELECT string_agg(r, ' / ' ORDER BY k) FROM (
  SELECT k, format('%s..%s seq %s..%s', min(id >> 22), max(id >> 22), min(id & 4095), max(id & 4095)) AS r
  FROM (SELECT 1 AS k, id FROM db1_ids UNION ALL SELECT 2, id FROM ids) s GROUP BY k) t});
my ($wid, $common) = split /\n/, $r->{out};
is($wid, '5', 'premise: db2 issues with worker id 5, the one db1 had');
is($common, '0', 'no ID of db2 is one that db1 issued');

done_testing();
