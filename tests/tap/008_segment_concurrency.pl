# leaf_id segment mode under contention: many sessions draw IDs of tags with
# tiny segments (a refill every few IDs, so the double buffer switches and
# waits all the time), while the leaf_id worker is terminated (SIGTERM, no
# crash: a new worker takes over and drops the cached ranges) and the table's
# step is changed. Every ID must be handed out once.

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;
use Time::HiRes qw(usleep);

my $node = leaf_node(
	'concurrency', q{
leaf_id.max_step = 3
leaf_id.refill_timeout = '20s'
});

$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('tiny', 1, 1), ('small', 1, 5);
});

my $per_statement = 5;
my $statements = 1500;
my @clients;
for my $i (1 .. 5)
{
	push @clients,
	  start_client($node, 'postgres', "tiny$i",
		"SELECT leaf_segment_next('tiny') FROM generate_series(1, $per_statement);\n"
		  x $statements);
}
for my $i (1 .. 2)
{
	push @clients,
	  start_client($node, 'postgres', "small$i",
		"SELECT leaf_segment_next('small') FROM generate_series(1, $per_statement);\n"
		  x $statements);
}

# disturb the worker while the clients run
my $worker_pid = sub {
	$node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'leaf_id segment worker' AND datname = 'postgres'"
	);
};
my $terminated = 0;
for my $round (1 .. 4)
{
	usleep(300_000 + int(rand(300_000)));
	last unless grep { $_->{h}->pumpable } @clients;
	my $pid = $worker_pid->();
	next if $pid eq '';
	next
	  unless $node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)")
	  eq 't';
	$terminated++;
	$node->safe_psql('postgres',
		"UPDATE leaf_id_catalog.leaf_alloc SET step = 1 + $round % 2 WHERE biz_tag = 'tiny'");
	# the clients still wait for IDs: a new worker must take over
	ok( wait_until(
			15,
			sub {
				my $now = $worker_pid->();
				($now ne '' && $now ne $pid)
				  || !grep { $_->{h}->pumpable } @clients;
			}),
		"round $round: a new worker took over after SIGTERM of worker $pid");
}
cmp_ok($terminated, '>=', 2, "terminated the worker $terminated times during the load");

finish_clients(180, @clients);
my (@tiny, @small);
for my $c (@clients)
{
	is($c->{rc}, 0, "client $c->{name} drew all its IDs without an error")
	  or diag $c->{stderr};
	if ($c->{name} =~ /^tiny/) { push @tiny, client_ids($c) }
	else { push @small, client_ids($c) }
}
is(scalar @tiny, 5 * $per_statement * $statements, 'tiny: all IDs received');
is(scalar @small, 2 * $per_statement * $statements, 'small: all IDs received');
my @dt = duplicates(@tiny);
is_deeply(\@dt, [], 'tiny: no ID handed out twice')
  or diag 'duplicated: ' . join(' ', @dt[ 0 .. ($#dt < 9 ? $#dt : 9) ]);
my @ds = duplicates(@small);
is_deeply(\@ds, [], 'small: no ID handed out twice')
  or diag 'duplicated: ' . join(' ', @ds[ 0 .. ($#ds < 9 ? $#ds : 9) ]);

my ($tiny_max) = $node->safe_psql('postgres',
	"SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'tiny'");
cmp_ok($tiny_max, '>', max_of(@tiny), 'tiny: max_id is above every issued ID');
my $refills = $node->safe_psql('postgres',
	"SELECT refills FROM leaf_segment_status WHERE tag = 'tiny'");
note "tiny: $refills refills since the last worker start";

$node->stop;
done_testing();
