# leaf_id segment mode: immediate shutdown (pg_ctl -m immediate, no
# checkpoint, recovery at the next start) while several clients draw IDs.
# After the restart, leaf_alloc.max_id must be above every ID handed out
# before, and every new ID too. Rounds 3 and 4 run with synchronous_commit =
# off and a slow WAL writer for everybody: the worker must still commit its
# reservations synchronously (an asynchronous commit still in the WAL buffers
# is lost by an immediate shutdown).

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node(
	'immediate', q{
leaf_id.max_step = 60
});

$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('load', 1, 5), ('other', 5000, 3);
CREATE TABLE issued (id bigint NOT NULL, client text NOT NULL);
});

my %before;          # every ID handed out so far
my @all_received;    # every ID a client received (each must occur once)

sub table_ids
{
	return split /\n/,
	  $node->safe_psql('postgres', 'SELECT id FROM issued ORDER BY id');
}

sub max_id
{
	my ($tag) = @_;
	return $node->safe_psql('postgres',
		"SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = '$tag'");
}

my %other_before;
for my $round (1 .. 4)
{
	if ($round == 3)
	{
		$node->append_conf('postgresql.conf',
			"synchronous_commit = off\nwal_writer_delay = '10s'\n");
		$node->reload;
		ok( wait_until(10,
				sub { $node->safe_psql('postgres', 'SHOW synchronous_commit') eq 'off' }),
			'synchronous_commit is off from round 3 on');
	}
	my $n0 = issued_count($node);
	my @clients = start_load($node, "r$round", 'load');
	# a second tag, drawn at the same time
	push @clients,
	  start_client($node, 'postgres', "r${round}_other",
		"SELECT leaf_segment_next('other');\n" x 40_000);
	my $rows = 300 + int(rand(3000));
	ok( wait_until(60, sub { issued_count($node) >= $n0 + $rows }),
		"round $round: load is running ($rows rows committed)");
	ok( wait_until(30, sub { !grep { !-s $_->{out} } @clients }),
		"round $round: every client has drawn IDs");

	$node->stop('immediate');
	finish_clients(60, @clients);
	for my $c (@clients)
	{
		ok(!$c->{killed} && $c->{rc} != 0,
			"round $round: client $c->{name} was cut off by the shutdown (exit $c->{rc})"
		);
	}
	my $log_offset = -s $node->logfile;
	$node->start;
	ok( $node->log_contains(
			qr/database system was interrupted|not properly shut down; automatic recovery in progress/,
			$log_offset),
		"round $round: the start ran crash recovery");

	my @received = map { client_ids($_) } grep { $_->{name} !~ /_other$/ } @clients;
	my ($other) = grep { $_->{name} =~ /_other$/ } @clients;
	my @other_received = client_ids($other);
	cmp_ok(scalar(@received), '>', 300,
		"round $round: clients received IDs before the shutdown");
	cmp_ok(scalar(@other_received), '>', 0,
		"round $round: the second tag's client received IDs");
	is_deeply([ duplicates(@received) ], [],
		"round $round: no ID received twice before the shutdown");
	is_deeply([ duplicates(@other_received) ], [],
		"round $round: no ID of the second tag received twice");
	is_deeply([ grep { $before{$_} } @received ], [],
		"round $round: no ID of an earlier round handed out again");
	is_deeply([ grep { $other_before{$_} } @other_received ], [],
		"round $round: no ID of the second tag of an earlier round handed out again");
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM issued WHERE client = 'r${round}_opentx'"),
		'0',
		"round $round: rows of the never-committed transaction are gone");

	$before{$_} = 1 for @received, table_ids();
	push @all_received, @received;
	$other_before{$_} = 1 for @other_received;
	my $max_before = max_of(keys %before);
	my $other_max = max_of(keys %other_before);

	# before any new ID is drawn: the reservations survived the shutdown
	cmp_ok(max_id('load'), '>', $max_before,
		"round $round: leaf_alloc.max_id is above every ID issued before the shutdown"
	);
	cmp_ok(max_id('other'), '>', $other_max,
		"round $round: same for the second tag");

	my @new = draw_ids($node, 'postgres', 'load', 200);
	is(scalar @new, 200, "round $round: 200 new IDs after the restart");
	cmp_ok(min_of(@new), '>', $max_before,
		"round $round: every new ID is above every ID issued before the shutdown"
	);
	my @new_other = draw_ids($node, 'postgres', 'other', 20);
	cmp_ok(min_of(@new_other), '>', $other_max,
		"round $round: same for the second tag");
	$before{$_} = 1 for @new;
	push @all_received, @new;
	$other_before{$_} = 1 for @new_other;
}

no_duplicates_over_all_rounds($node, @all_received);

$node->stop;
done_testing();
