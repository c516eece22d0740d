# leaf_id on Citus: snowflake goes on with one of three nodes down also when
# the workers had left for idleness before the node died.
#
# leaf_id.worker_idle_timeout = 2s: each node draws one snowflake ID and its
# snowflake worker leaves (idle). Then worker2 is stopped. The next call on
# the coordinator and on worker1 starts a new worker, which must take its
# own row back with a majority of the copies of leaf_worker (2 of 3): the
# idle exit keeps the row's owner token, so no write of every copy is
# needed. Each survivor's IDs carry its own worker id, no ID twice.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CitusTap;
use SegmentTap qw(try_sql wait_until);

my ($coord, $w1, $w2) = citus_cluster(conf => "leaf_id.worker_idle_timeout = 2000\n");
my %wid = map { $_->name => leaf_worker_id_of($_) } ($coord, $w1, $w2);
is(join(',', sort values %wid), '0,1,2', 'three nodes, three worker ids');

my $sf_worker = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leaf_id snowflake worker'};
for my $n ($coord, $w1, $w2)
{
	ok(wait_until(30, sub { $n->safe_psql('postgres', $sf_worker) eq '0' }),
		$n->name . ': its snowflake worker left (idle)');
}
$w2->stop('immediate');

my (%seen, $dup);
for my $n ($coord, $w1)
{
	my $r = try_sql($n, 'postgres',
		q{SELECT id, (leaf_snowflake_decode(id)).worker_id FROM leaf_snowflake_next(2000) id}, timeout => 60);
	is($r->{ret}, 0, $n->name . ': snowflake IDs with worker2 down after an idle exit') or diag $r->{err};
	my @rows = map { [ split /\|/ ] } split /\n/, $r->{out};
	is(scalar(grep { $_->[1] != $wid{ $n->name } } @rows), 0,
		$n->name . ': every ID carries its own worker id');
	$dup += grep { $seen{ $_->[0] }++ } @rows;
}
is($dup // 0, 0, 'no snowflake ID twice');
$w2->start;
$_->stop for ($w2, $w1, $coord);
done_testing();
