# leaf_id on Citus: segment IDs go on while a node is dead.
#
# A refill through Citus needs every copy of leaf_alloc. While the cluster
# is whole, each refill also keeps leaf_id.citus_reserve segments in the
# server's reserve (a file of its data directory, bound to its owner token).
# worker2 is killed (kill -9) under segment load on the coordinator and
# worker1:
#  - both go on without a refusal, from their reserves; a copy of worker1's
#    data directory, started beside it on worker1's port (on 127.0.0.2: the
#    same boot, port and system identifier, only the data directory's device
#    and inode differ), has worker1's reserve file but another owner token:
#    it issues nothing from it;
#  - the coordinator, restarted while worker2 is dead, goes on from its
#    reserve (a restart of the same data directory keeps its token);
#  - once a reserve is used up, every call fails within
#    leaf_id.refill_timeout with a clear SQLSTATE;
#  - worker2 back: refills through Citus go on by themselves;
#  - worker1's reserve file put back as an earlier snapshot of the running
#    server had it (a restore in place), after worker1 took from the reserve
#    meanwhile: the file is not the write its record outside the data
#    directory names, so worker1 issues nothing from it;
#  - no ID twice, over all nodes and phases.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use CitusTap;
use SegmentTap qw(try_sql wait_until);

my $reserve_segments = $ENV{LEAF_ID_TEST_CITUS_RESERVE} // 30;
my ($coord, $w1, $w2) = citus_cluster(
	conf => "leaf_id.refill_timeout = 3000\nleaf_id.max_step = 100\nleaf_id.citus_reserve = $reserve_segments\n");
$coord->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('dn', 10)});
$_->safe_psql('postgres', DRAWLOG_SQL . 'CREATE TABLE extra_ids (id bigint);') for ($coord, $w1, $w2);
my @survivors = ([ $coord, 'coord' ], [ $w1, 'w1' ]);

# The ranges in a node's reserve file for the database postgres, per tag:
# { tag => [ [start, end], ... ] }
sub reserve_ranges
{
	my ($node) = @_;
	my $dboid = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
	my $file = $node->data_dir . "/pgsql_tmp_leaf_id_reserve_$dboid";
	my (%ranges, $tag);
	return \%ranges unless -e $file;
	for (split /\n/, slurp_file($file))
	{
		$tag = pack('H*', $1) if /^tag ([0-9a-f]+) /;
		push @{ $ranges{$tag} }, [ $1, $2 ] if /^range (\d+) (\d+)$/;
	}
	return \%ranges;
}

# IDs left in a node's reserve for tag $tag ('dn' by default)
sub reserve_left
{
	my ($node, $tag) = @_;
	my $left = 0;
	$left += $_->[1] - $_->[0] for @{ reserve_ranges($node)->{ $tag // 'dn' } // [] };
	return $left;
}

# --- the cluster is whole: the reserves fill ---------------------------------------
start_drawing($_->[0], "$_->[1]_warm", 'segment') for @survivors;
sleep_full(3);
stop_drawing();
for my $s (@survivors)
{
	# the step grows from 10 to 100 meanwhile; each refill tops the reserve
	# up to $reserve_segments segments of its step
	cmp_ok(reserve_left($s->[0]), '>=', $reserve_segments * 10,
		"$s->[1] keeps segments in reserve (" . reserve_left($s->[0]) . ' IDs)')
	  if $reserve_segments;
}

# --- worker2 dies, and a copy of worker1 starts --------------------------------------
# worker1 is copied while it is stopped (no refill can change leaf_alloc
# meanwhile: every refill needs worker1's copy), so the copy's leaf_alloc
# equals every other copy, and it has worker1's reserve file; it runs on
# worker1's port on 127.0.0.2, so only its data directory tells it from
# worker1, and that gives it an owner token of its own
$w1->stop;
$w1->backup_fs_cold('w1cold');
my $copy = PostgreSQL::Test::Cluster->new('w1copy', port => $w1->port, own_host => 1);
$copy->init_from_backup($w1, 'w1cold');
$copy->append_conf('postgresql.conf', "listen_addresses = '127.0.0.2'\n");
# Citus made a key for SSL; the copy of the backup loosened its mode
chmod(0600, $copy->data_dir . '/server.key') if -e $copy->data_dir . '/server.key';
$w2->kill9;
my $t_kill = time;
$w1->start;
$copy->start;
my $dboid = $w1->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
ok(-e $copy->data_dir . "/pgsql_tmp_leaf_id_reserve_$dboid", "premise: the copy has worker1's reserve file");
start_drawing($_->[0], "$_->[1]_dead", 'segment') for (@survivors, [ $copy, 'copy' ]);
sleep_full(4);
stop_drawing();
my $t_after = time;
for my $s (@survivors)
{
	my $r = summary($s->[0], "$s->[1]_dead", $t_kill, $t_after);
	note sprintf('%s with worker2 dead: %d IDs, the last %.2f s after the kill; %d refusals; %s',
		"$s->[1]_dead", $r->{ok}, $r->{last_ok} - $t_kill, $r->{errors}, $r->{states});
	is($r->{errors}, 0, "$s->[1]: no segment call refused while worker2 is dead (the reserve serves)")
	  or diag $r->{states};
	cmp_ok($r->{last_ok} - $t_kill, '>', 3.5, "$s->[1]: it keeps issuing while worker2 is dead");
}
my $c = summary($copy, 'copy_dead', $t_kill, $t_after);
note sprintf('the copy with worker2 dead: %d IDs, %d refusals; %s', $c->{ok}, $c->{errors}, $c->{states});
is($c->{ok}, 0, "the copy issues no segment ID from worker1's reserve (another owner token)");
cmp_ok($c->{errors}, '>', 0, 'the copy was refused (it drew)');
my @copy_other = grep { !/^08006 / } split / \| /, $c->{states};
is(scalar @copy_other, 0, 'every refusal of the copy is 08006') or diag explain \@copy_other;
cmp_ok($c->{errors}, '>', 0, '... its calls are refused');
my @copy_ids = split /\n/,
  $copy->safe_psql('postgres', q{SELECT id FROM drawlog WHERE session = 'copy_dead' AND id IS NOT NULL});
$copy->stop;

# --- the coordinator restarts while worker2 is dead ---------------------------------------
$coord->restart;
my $r = try_sql($coord, 'postgres',
	q{INSERT INTO extra_ids SELECT leaf_segment_next('dn') FROM generate_series(1, 200)});
is($r->{ret}, 0, 'the restarted coordinator issues segment IDs from its reserve while worker2 is dead')
  or diag $r->{err};

# --- the reserves run out ---------------------------------------------------------------
my $t_drain = time;
start_drawing($_->[0], "$_->[1]_drain", 'segment') for @survivors;
for my $s (@survivors)
{
	ok( wait_until(
			60,
			sub {
				$s->[0]->safe_psql('postgres',
					"SELECT count(*) FROM drawlog WHERE session = '$s->[1]_drain' AND id IS NULL") > 0;
			}),
		"$s->[1]: refused once its reserve is used up");
}
sleep_full(1);
stop_drawing();
for my $s (@survivors)
{
	my $r = summary($s->[0], "$s->[1]_drain", $t_drain, time);
	note sprintf('%s: %d IDs, then %d refusals (%s), longest wait %.0f ms', "$s->[1]_drain", $r->{ok},
		$r->{errors}, $r->{states}, $r->{max_err_ms});
	cmp_ok($r->{max_err_ms}, '<', 3600, "$s->[1]: a refused call waits at most leaf_id.refill_timeout (3 s)");
	my @other = grep { !/^(55P03|08006) / } split / \| /, $r->{states};
	is(scalar @other, 0, "$s->[1]: every refusal is 08006 or 55P03") or diag explain \@other;
	is(reserve_left($s->[0]), 0, "$s->[1]: its reserve is used up") if $reserve_segments;
}

# --- worker2 returns -------------------------------------------------------------------
ok(start_after_kill9($w2), 'worker2 starts again');
my $t_back = time;
start_drawing($_->[0], "$_->[1]_back", 'segment') for ([ $coord, 'coord' ], [ $w1, 'w1' ], [ $w2, 'w2' ]);
for my $s ([ $coord, 'coord' ], [ $w1, 'w1' ], [ $w2, 'w2' ])
{
	my $first = 0;
	ok( wait_until(
			40,
			sub { ($first = first_ok_after($s->[0], "$s->[1]_back", $t_back)) > 0 }),
		"$s->[1] issues segment IDs again by itself once worker2 is back");
}
sleep_full(2);
stop_drawing();
for my $s (@survivors)
{
	cmp_ok(reserve_left($s->[0]), '>', 0, "$s->[1]: refills through Citus fill its reserve again")
	  if $reserve_segments;
}

# --- a tag deleted and inserted again below a node's reserve ----------------------
# (max_id = max(id) + 1): the node's next refill sees max_id below its
# reservations and drops the tag's reserve, whose IDs others may now hand out
$coord->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('rc', 10)});
my $last_rc = $w1->safe_psql('postgres', q{SELECT max(leaf_segment_next('rc')) FROM generate_series(1, 50)});
my $old_ranges = reserve_ranges($w1)->{rc} // [];
cmp_ok(scalar @$old_ranges, '>', 0, "premise: worker1 keeps a reserve of tag 'rc'");
$coord->safe_psql('postgres',
	"DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'rc'; INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('rc', 10, $last_rc + 1)");
# through its cached segments to a refill
$w1->safe_psql('postgres', q{SELECT count(leaf_segment_next('rc')) FROM generate_series(1, 300)});
my $old_low = $old_ranges->[0][0];
my @still = grep { $_->[0] < $old_ranges->[-1][1] } @{ reserve_ranges($w1)->{rc} // [] };
is(scalar @still, 0, "worker1's reserve of 'rc' no longer holds the ranges from before (from $old_low)");
ok($w1->log_contains(qr/the reserve of tag "rc" was dropped: leaf_alloc.max_id is below the ranges this server reserved/),
	'the log says why');

# --- a reserve file restored in place -------------------------------------------------
my $rfile = $w1->data_dir . "/pgsql_tmp_leaf_id_reserve_$dboid";
my $snapshot = PostgreSQL::Test::Utils::tempdir() . '/reserve_snapshot';
system('cp', '-p', $rfile, $snapshot) == 0 or die "cp: $?";
my $left_at_snapshot = reserve_left($w1);
cmp_ok($left_at_snapshot, '>', 0, 'premise: the snapshot of worker1\'s reserve file holds ranges');
$w2->kill9;
my $t_snap = time;
start_drawing($w1, 'w1_after_snapshot', 'segment');
ok(wait_until(30, sub { reserve_left($w1) < $left_at_snapshot }),
	'worker2 dead: worker1 takes from its reserve after the snapshot');
stop_drawing();
my $taken = summary($w1, 'w1_after_snapshot', $t_snap, time);
note sprintf('worker1 after the snapshot: %d IDs, %d refusals', $taken->{ok}, $taken->{errors});
$w1->stop;
system('cp', '-p', $snapshot, $rfile) == 0 or die "cp: $?";
$w1->start;
my $t_rolled = time;
start_drawing($w1, 'w1_rolled_back', 'segment');
ok( wait_until(
		30,
		sub {
			$w1->safe_psql('postgres',
				"SELECT count(*) FROM drawlog WHERE session = 'w1_rolled_back' AND id IS NULL") > 0;
		}),
	'worker1 with the snapshot\'s reserve file put back: its calls are refused');
stop_drawing();
my $rolled = summary($w1, 'w1_rolled_back', $t_rolled, time);
note sprintf('worker1 with the old reserve file: %d IDs, %d refusals (%s)', $rolled->{ok}, $rolled->{errors},
	$rolled->{states});
is($rolled->{ok}, 0, 'worker1 issues no ID from the reserve file of an earlier write');
ok(start_after_kill9($w2), 'worker2 starts again');

# --- no ID twice ---------------------------------------------------------------------------
my (%seen, $dup);
for (@copy_ids) { $dup++ if $seen{$_}++ }
for my $n ($coord, $w1, $w2)
{
	for my $id (split /\n/,
		$n->safe_psql('postgres', 'SELECT id FROM drawlog WHERE id IS NOT NULL UNION ALL SELECT id FROM extra_ids'))
	{
		$dup++ if $seen{$id}++;
	}
}
note 'segment IDs issued: ' . scalar(keys %seen);
is($dup // 0, 0, 'no segment ID issued twice over the three nodes');

$_->stop for ($w2, $w1, $coord);
done_testing();
