# leaf_id opaque IDs: 8 sessions draw from an opaque tag with
# small segments while a client backend and then the leaf_id worker are
# killed with kill -9 (the postmaster reinitializes shared memory and runs
# crash recovery). No ID is received twice over all rounds, every ID is in
# the domain and decodes to a counter below leaf_alloc.max_id, the counters
# after each crash are above every counter before it, and the IDs are no
# counter values (the tag is really opaque).

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;
use Time::HiRes ();

my $node = leaf_node(
	'opaque_crash', q{
restart_after_crash = on
leaf_id.max_step = 40
});
$node->safe_psql(
	'postgres', q{
SELECT leaf_opaque_create('crash_domain', bits => 40);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, opaque_domain, opaque_grant) VALUES ('opq', 1, 7, 'crash_domain', leaf_opaque_grant('crash_domain', 'opq', 1));
});

my $max_id = sub {
	$node->safe_psql('postgres', "SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'opq'");
};
# counters of IDs: one query for many
my $decode = sub {
	my @ids = @_;
	return () unless @ids;
	return split /\n/,
	  $node->safe_psql('postgres',
		"SELECT leaf_opaque_decode('crash_domain', id) FROM unnest('{"
		  . join(',', @ids)
		  . "}'::bigint[]) AS id");
};

my (@all, %seen_before);
my $max_counter_before = 0;
my @rounds = (
	[ 'client backend', sub { backend_pid($node, 'postgres', "r$_[0]_c1") } ],
	[ 'leaf_id segment worker', sub { worker_pid($node, 'postgres', 'segment') } ],
	[ 'client backend', sub { backend_pid($node, 'postgres', "r$_[0]_c5") } ],
	[ 'leaf_id segment worker', sub { worker_pid($node, 'postgres', 'segment') } ],
);
my $round = 0;
for my $r (@rounds)
{
	my ($what, $find) = @$r;
	$round++;
	my @clients = map {
		start_client($node, 'postgres', "r${round}_c$_",
			"SELECT leaf_segment_next('opq') FROM generate_series(1, 5);\n" x 20_000)
	} 1 .. 8;
	ok(wait_until(60, sub { !grep { !-s $_->{out} } @clients }),
		"round $round: all 8 sessions draw opaque IDs");
	usleep_random();
	my $pid = $find->($round);
	like($pid, qr/^\d+$/, "round $round: found the $what (pid $pid)");
	my $log_offset = -s $node->logfile;
	ok(kill('KILL', $pid), "round $round: kill -9 $what");
	finish_clients(90, @clients);
	ok(wait_for_server($node), "round $round: server is back");
	ok($node->log_contains(qr/all server processes terminated; reinitializing/, $log_offset),
		"round $round: postmaster reinitialized");

	my @received = map { client_ids($_) } @clients;
	cmp_ok(scalar @received, '>', 100, "round $round: " . scalar(@received) . ' IDs before the crash');
	is_deeply([ duplicates(@received) ], [], "round $round: no ID received twice");
	is_deeply([ grep { $seen_before{$_} } @received ], [], "round $round: no ID of an earlier round again");

	my @counters = $decode->(@received);
	my $max = $max_id->();
	is(scalar(grep { $_ >= $max || $_ < 1 } @counters), 0,
		"round $round: every ID decodes to a counter below leaf_alloc.max_id ($max)");
	is(scalar(grep { $_ < 0 || $_ >= 2**40 } @received), 0, "round $round: every ID is in the 40-bit domain");
	my $counted = scalar(grep { $_ <= $max_counter_before } @counters);
	is($counted, 0, "round $round: every counter is above every counter before the crash");
	my %is_counter = map { $_ => 1 } @counters;
	cmp_ok(scalar(grep { $is_counter{$_} } @received), '<', 3,
		"round $round: the IDs are not the counters");
	$seen_before{$_} = 1 for @received;
	$max_counter_before = max_of($max_counter_before, @counters);
	push @all, @received;
}

# after the last crash, more IDs: none seen before
my @after = split /\n/,
  $node->safe_psql('postgres', "SELECT leaf_segment_next('opq') FROM generate_series(1, 500)");
is(scalar(grep { $seen_before{$_} } @after), 0, '500 IDs after the last recovery: none seen before');
cmp_ok(min_of($decode->(@after)), '>', $max_counter_before, '... their counters above every earlier one');
is_deeply([ duplicates(@all, @after) ], [], 'no opaque ID handed out twice over all rounds');

$node->stop;
done_testing();

sub usleep_random { Time::HiRes::usleep(200_000 + int(rand(800_000))) }
