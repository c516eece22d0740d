# leaf_id snowflake mode, what operators and settings may do while the
# server runs:
#  - a released row with a later mark, taken back in the same server
#    lifetime: its mark counts (no millisecond at or below it is issued);
#  - the lease in shared memory never runs ahead of the persisted mark: read
#    while a renewal pauses between the commit of the row's new mark and the
#    move of the lease (leaf_id.test_fault_point = slow_lease_move), and
#    after lease_ahead shrinks and an operator lowers the row;
#  - a reload that changes leaf_id.node_name or leaf_id.worker_id re-claims
#    (IDs go on with the new id; the old id's row is released);
#  - lease_ahead <= heartbeat_interval is refused with 22023;
#  - two databases of one server never issue with one worker id.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap qw(try_sql wait_until);
use SnowflakeTap;
use Test::More;
use Time::HiRes qw(usleep);

my $conf = "log_min_messages = warning\nlc_messages = 'C'\n";
# part 1 leaves its node refusing for 10 minutes: a node of its own
my $node = snowflake_node('sfrelease', $conf);
my $now_ms = q{(extract(epoch FROM clock_timestamp()) * 1000)::bigint};

sub worker_pid
{
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'leaf_id snowflake worker'");
}

sub terminate_worker
{
	my $pid = worker_pid();
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	ok(wait_until(20, sub { my $p = worker_pid(); $p eq '' || $p ne $pid }),
		'the worker exited');
}

sub draw_one
{
	return try_sql($node, 'postgres',
		'SET leaf_id.refill_timeout = 5000; SELECT leaf_snowflake_next()');
}

sub status
{
	my ($col) = @_;
	return $node->safe_psql('postgres', "SELECT $col FROM leaf_snowflake_status");
}

my $r = draw_one();
like($r->{out}, qr/^\d+$/, 'snowflake works');
is(status('worker_id'), '0', 'premise: the node claimed worker id 0');

# ---------------------------------------------------------------------------
# 1. release the row with a mark 10 minutes ahead, then the worker restarts
# and takes id 0 back in the same server lifetime
$node->safe_psql('postgres',
	"UPDATE leaf_id_catalog.leaf_worker SET node_name = 'released:0', last_timestamp = $now_ms + 600000 WHERE worker_id = 0"
);
terminate_worker();
# the exiting worker's close matched no row (it was released): said, not ignored
ok( $node->wait_for_log(
		qr/WARNING:  leaf_id: could not persist the last snowflake millisecond: the leaf_worker row of worker id 0/),
	'a close that matches no row is logged as a WARNING');
$r = draw_one();
is($r->{sqlstate}, '58000',
	'the row mark 10 minutes ahead is honoured: refused with 58000')
  or diag "got: $r->{out} $r->{err}";
like($r->{err}, BEHIND_MARK_RE, 'refused as behind the persisted mark');
is($r->{out}, '', 'no ID below the mark');
is( $node->safe_psql('postgres',
		"SELECT worker_id FROM leaf_id_catalog.leaf_worker WHERE node_name = '"
		  . default_node_name($node) . "'"),
	'0',
	'premise: the node took id 0 back');
$node->stop('immediate');
$node = snowflake_node('sfhard', $conf);
like(draw_one()->{out}, qr/^\d+$/, 'a fresh node issues');

# ---------------------------------------------------------------------------
# 2. the lease never runs ahead of the row
sub lease_within_row
{
	my ($what) = @_;
	# a sample at a random instant, almost never inside a renewal (the
	# order of its commit and the lease's move is checked in the pause
	# below): the lease first, so that a renewal between the two reads
	# cannot show a lease above the older row (the test's race, not the
	# worker's)
	my $lease = $node->safe_psql('postgres',
		"SELECT (extract(epoch FROM persisted_mark) * 1000)::bigint FROM leaf_snowflake_status");
	my $row = $node->safe_psql('postgres',
		"SELECT last_timestamp FROM leaf_id_catalog.leaf_worker WHERE worker_id = (SELECT worker_id FROM leaf_snowflake_status)");
	ok($lease ne '' && $row ne '' && $lease <= $row,
		"$what: the lease ($lease) is not above the row's mark ($row)");
}
$node->safe_psql('postgres',
	"ALTER SYSTEM SET leaf_id.lease_ahead = '60s'; SELECT pg_reload_conf()");
ok( wait_until(
		20,
		sub {
			draw_one();
			status("persisted_mark > clock_timestamp() + interval '30 s'") eq 't';
		}),
	'lease 60 s ahead');
lease_within_row('lease 60 s ahead');

# the renewal commits the row's new mark, then moves the lease: read both
# while the worker pauses between the two (3 s, at every renewal while the
# fault point is set). Outside that window they are equal whatever the
# order, so only a read inside it can catch a lease moved before the commit.
# (With lease_ahead 60 s each renewal's mark is a heartbeat above the last.)
my $offset = -s $node->logfile;
$node->safe_psql('postgres',
	"ALTER SYSTEM SET leaf_id.test_fault_point = 'slow_lease_move'; SELECT pg_reload_conf()");
$node->wait_for_log(
	qr/leaf_id\.test_fault_point = slow_lease_move: pausing 3000 ms after the renewal's commit, before the lease moves/,
	$offset);
# when the pause began: the log line's time stamp (log_line_prefix %m)
my ($paused_at) = slurp_file($node->logfile, $offset)
  =~ /^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+) .*test_fault_point = slow_lease_move: pausing/m;
# both in one statement, the time last: inside the pause if it ended within
# 3 s of the pause's start
my ($lease, $row, $inside) = split /\|/, $node->safe_psql('postgres', qq{
SELECT (extract(epoch FROM s.persisted_mark) * 1000)::bigint, w.last_timestamp,
       statement_timestamp() >= '$paused_at'::timestamptz AND clock_timestamp() < '$paused_at'::timestamptz + interval '3 s'
FROM leaf_snowflake_status s JOIN leaf_id_catalog.leaf_worker w USING (worker_id)});
is($inside, 't', "premise: lease and row read while the renewal pauses after its commit (the pause began at $paused_at)");
ok($lease ne '' && $row ne '' && $lease <= $row,
	"during a renewal, after its commit, before the lease moves: the lease ($lease) is not above the row's mark ($row)");
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET leaf_id.test_fault_point; SELECT pg_reload_conf()");
$node->safe_psql('postgres',
	"ALTER SYSTEM SET leaf_id.lease_ahead = '2s'; SELECT pg_reload_conf()");
my $lowered_at = $node->safe_psql('postgres',
	"UPDATE leaf_id_catalog.leaf_worker SET last_timestamp = $now_ms WHERE worker_id = (SELECT worker_id FROM leaf_snowflake_status) RETURNING clock_timestamp()"
);
ok( wait_until(
		20,
		sub {
			$node->safe_psql('postgres',
				"SELECT heartbeat_at > '$lowered_at' FROM leaf_id_catalog.leaf_worker WHERE worker_id = (SELECT worker_id FROM leaf_snowflake_status)"
			) eq 't';
		}),
	'a renewal after the row was lowered');
lease_within_row('after lease_ahead shrank and the row was lowered');

# ---------------------------------------------------------------------------
# 3. node_name and worker_id changes take effect at a reload, by a re-claim
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET leaf_id.lease_ahead; ALTER SYSTEM SET leaf_id.node_name = 'renamed'; SELECT pg_reload_conf()"
);
ok(wait_until(20, sub { status('node_name') eq 'renamed' }),
	'a reload of leaf_id.node_name re-claims under the new name');
my $ok = 1;
for (1 .. 20)
{
	$r = draw_one();
	$ok = 0 unless $r->{out} =~ /^\d+$/;
	usleep(200_000);
}
ok($ok, 'IDs go on after the rename (renewals use the claimed name)')
  or diag $r->{err};
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM leaf_id_catalog.leaf_worker WHERE node_name = 'renamed' AND worker_id = (SELECT worker_id FROM leaf_snowflake_status)"),
	'1',
	'the registry row is the renamed node');
lease_within_row('after the rename');

$node->safe_psql('postgres',
	"ALTER SYSTEM SET leaf_id.worker_id = 5; SELECT pg_reload_conf()");
ok(wait_until(20, sub { status('worker_id') eq '5' }),
	'a reload of leaf_id.worker_id moves to id 5');
$r = draw_one();
is($node->safe_psql('postgres', "SELECT worker_id FROM leaf_snowflake_decode($r->{out})"),
	'5', 'IDs carry worker id 5');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM leaf_id_catalog.leaf_worker WHERE node_name LIKE 'released:%' AND worker_id <> 0"),
	'1',
	'the id left behind is released with its mark');
lease_within_row('after the move');

# ---------------------------------------------------------------------------
# 4. lease_ahead must exceed heartbeat_interval
$node->safe_psql('postgres',
	"ALTER SYSTEM SET leaf_id.lease_ahead = 500; ALTER SYSTEM SET leaf_id.heartbeat_interval = 1000; SELECT pg_reload_conf()"
);
my $refused;
ok( wait_until(
		20,
		sub {
			$r = draw_one();
			$refused = $r;
			($r->{sqlstate} // '') eq '22023';
		}),
	'lease_ahead <= heartbeat_interval is refused with 22023')
  or diag $refused->{err};
like($refused->{err}, qr/lease_ahead \(500 ms\) must be greater than leaf_id\.heartbeat_interval/,
	'and says so');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET leaf_id.lease_ahead; ALTER SYSTEM RESET leaf_id.heartbeat_interval; SELECT pg_reload_conf()"
);
ok(wait_until(20, sub { draw_one()->{out} =~ /^\d+$/ }), 'fixed: IDs again');

# ---------------------------------------------------------------------------
# 5. a second database with the same configured worker id is refused
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION leaf_id');
$r = try_sql($node, 'other',
	'SET leaf_id.refill_timeout = 5000; SELECT leaf_snowflake_next()');
is($r->{sqlstate}, '55000', 'database "other" with worker id 5 too: refused with 55000')
  or diag $r->{out} . $r->{err};
like($r->{err}, qr/worker id 5 is already used by another database of this server/,
	'and says why');
# with worker ids from the registries, the two databases get distinct ids
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET leaf_id.worker_id; SELECT pg_reload_conf()");
ok(wait_until(20, sub { status('worker_id_source') eq 'leaf_worker' }),
	'postgres claims from its registry again');
my $other;
ok( wait_until(
		20,
		sub {
			$other = try_sql($node, 'other',
				'SET leaf_id.refill_timeout = 5000; SELECT worker_id FROM leaf_snowflake_decode(leaf_snowflake_next())');
			$other->{out} =~ /^\d+$/;
		}),
	'database "other" claims from its own registry');
isnt($other->{out}, status('worker_id'), 'and its worker id differs from database postgres');

done_testing();
