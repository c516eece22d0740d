# leaf_id: a worker without work leaves its database after
# leaf_id.worker_idle_timeout, closing the snowflake generator as a clean
# shutdown does, so that the operator's DROP DATABASE (without FORCE),
# CREATE DATABASE ... TEMPLATE and ALTER DATABASE ... RENAME work on a
# database that used both modes; the next call starts it again. IDs go on
# after each, none repeated; a template copy claims its own snowflake worker
# id; calls made around the moment the worker leaves are served; with
# worker_idle_timeout = 0 the worker stays. Placed by a test fault point: a
# segment call that lands while the worker leaves is served by the next
# worker, after its tag slot was freed under it and while the leaving
# worker's background worker slot was still taken (the call tries again).

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;
use Time::HiRes qw(time);

use constant LEAF_EPOCH_MS => 1288834974657;

# a long lease: the mark written when the worker leaves (the last issued
# millisecond) is then far from the lease it replaces
my $node = leaf_node(
	'idle_worker', q{
leaf_id.worker_idle_timeout = 1000
leaf_id.lease_ahead = 20000
log_min_messages = log
});

my $r = $node->safe_psql('postgres',
	"SELECT unit, boot_val, context, short_desc <> '' FROM pg_settings WHERE name = 'leaf_id.worker_idle_timeout'"
);
is($r, 'ms|60000|sighup|t',
	'leaf_id.worker_idle_timeout: ms, 60 s by default, reload, described');

sub worker_gone
{
	my ($db, $seconds) = @_;
	return wait_until($seconds // 20, sub { worker_pid($node, $db) eq '' });
}

# $n IDs of each mode into the database's table "ids", marked with $phase
sub draw
{
	my ($db, $phase, $n) = @_;
	$node->safe_psql($db,
		    "INSERT INTO ids SELECT '$phase', 'seg', leaf_segment_next('t') FROM generate_series(1, $n);"
		  . "INSERT INTO ids SELECT '$phase', 'sf', leaf_snowflake_next() FROM generate_series(1, $n);"
	);
}

sub one
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $sql);
}

sub ids_of
{
	my ($db, $mode) = @_;
	return split /\n/, one($db, "SELECT id FROM ids WHERE mode = '$mode' ORDER BY id");
}

# snowflake worker id of the IDs of a phase (one value, or several joined)
sub sf_worker_ids
{
	my ($db, $phase) = @_;
	return one($db,
		"SELECT string_agg(DISTINCT ((id >> 12) & 1023)::text, ',') FROM ids WHERE mode = 'sf' AND phase = '$phase'"
	);
}

# duplicates of a mode in the database's table
sub repeats
{
	my ($db, $mode) = @_;
	return one($db,
		"SELECT count(*) - count(DISTINCT id) FROM ids WHERE mode = '$mode'");
}

# 't' if every ID of the mode in $phase is above every one of other phases
# drawn before it (@earlier)
sub above
{
	my ($db, $mode, $phase, @earlier) = @_;
	my $list = join ',', map { "'$_'" } @earlier;
	return one($db,
		"SELECT (SELECT min(id) FROM ids WHERE mode = '$mode' AND phase = '$phase') > "
		  . "(SELECT max(id) FROM ids WHERE mode = '$mode' AND phase IN ($list))");
}

$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('t', 1, 100);
CREATE TABLE ids (phase text, mode text, id bigint);
});

# --- both modes used, then the worker leaves ---------------------------
draw('app', 'before', 500);
my $wid = one('app', "SELECT worker_id FROM leaf_snowflake_status");
is(sf_worker_ids('app', 'before'), $wid, "app issues snowflake IDs with worker id $wid");
ok(worker_pid($node, 'app') ne '', 'the worker runs after the calls');
my $lease = one('app', "SELECT last_timestamp FROM leaf_id_catalog.leaf_worker WHERE worker_id = $wid");
ok(worker_gone('app'), 'idle for leaf_id.worker_idle_timeout, the worker leaves the database');
ok($node->log_contains(qr/leaf_id \w+ worker for database \d+ leaves it: idle/),
	'the server log says why');

# it closed the generator as a clean shutdown does: the exact last millisecond
my $mark = one('app', "SELECT last_timestamp FROM leaf_id_catalog.leaf_worker WHERE worker_id = $wid");
my $last_ms = one('app',
	"SELECT (max(id) >> 22) + " . LEAF_EPOCH_MS . " FROM ids WHERE mode = 'sf'");
is($mark, $last_ms,
	'leaving persisted the last issued millisecond as the mark (not the lease)');
cmp_ok($lease, '>', $mark, 'which is below the lease it replaced');
is(one('app', "SELECT state FROM leaf_snowflake_status"),
	'not started', 'the generator is no longer ready without a worker');

# --- ALTER DATABASE ... RENAME ------------------------------------------
$r = try_sql($node, 'postgres', 'ALTER DATABASE app RENAME TO app_renamed');
is($r->{ret}, 0, 'ALTER DATABASE ... RENAME works once the worker left')
  or diag $r->{err};
draw('app_renamed', 'renamed', 500);
ok(worker_pid($node, 'app_renamed') ne '', 'the next call started the worker again');
is(repeats('app_renamed', $_), 0, "renamed: no $_ ID repeated") for qw(seg sf);
is(above('app_renamed', $_, 'renamed', 'before'), 't',
	"renamed: every $_ ID is above every one drawn before")
  for qw(seg sf);
is(sf_worker_ids('app_renamed', 'renamed'), $wid,
	'renamed: the same snowflake worker id goes on');

# --- CREATE DATABASE ... TEMPLATE -----------------------------------------
ok(worker_gone('app_renamed'), 'the worker leaves again');
$r = try_sql($node, 'postgres',
	'CREATE DATABASE app_copy TEMPLATE app_renamed');
is($r->{ret}, 0, 'CREATE DATABASE ... TEMPLATE works once the worker left')
  or diag $r->{err};

# the copy has copies of leaf_alloc and leaf_worker (and of "ids"); the
# source is used again at the same time
draw('app_copy', 'copy', 500);
draw('app_renamed', 'source_after_copy', 500);
my $copy_wid = sf_worker_ids('app_copy', 'copy');
like($copy_wid, qr/^\d+$/, 'the copy issues snowflake IDs with one worker id');
isnt($copy_wid, $wid,
	"the copy does not issue with the source's worker id $wid, which the source uses on this server");
is(sf_worker_ids('app_renamed', 'source_after_copy'), $wid,
	'the source keeps its worker id');
is( one('app_copy',
		"SELECT node_name FROM leaf_id_catalog.leaf_worker WHERE worker_id = $wid"),
	"released:$wid",
	"the copy's registry keeps the source's row, released (with its mark)");
is(repeats('app_copy', $_), 0, "copy: no $_ ID repeated (also against the copied ones)")
  for qw(seg sf);
is(above('app_copy', 'seg', 'copy', 'before', 'renamed'), 't',
	'copy: its segment IDs are above every one the source drew before the copy');
my %in_source = map { $_ => 1 } ids_of('app_renamed', 'sf');
my @shared = grep { $in_source{$_} } map { $_ } split /\n/,
  one('app_copy', "SELECT id FROM ids WHERE mode = 'sf' AND phase = 'copy'");
is(scalar @shared, 0, 'no snowflake ID of the copy was issued by the source');
is(repeats('app_renamed', $_), 0, "source after the copy: no $_ ID repeated")
  for qw(seg sf);

# --- DROP DATABASE without FORCE ---------------------------------------------
ok(worker_gone('app_renamed'), "the source's worker leaves");
$r = try_sql($node, 'postgres', 'DROP DATABASE app_renamed');
is($r->{ret}, 0, 'DROP DATABASE without FORCE works once the worker left')
  or diag $r->{err};
draw('app_copy', 'copy_after_drop', 200);
is(repeats('app_copy', $_), 0, "copy after the drop: no $_ ID repeated") for qw(seg sf);
is(above('app_copy', $_, 'copy_after_drop', 'before', 'renamed', 'copy'),
	't', "copy after the drop: $_ IDs go on above the earlier ones")
  for qw(seg sf);

# --- calls around the moment the worker leaves are served --------------------
# one session calls both modes 0.95 to 1.6 s apart: the worker leaves 1.0 to
# 1.5 s after the last call it sees (it looks at least every 0.5 s), so calls
# land before, while and after it leaves (its generator closed, its slots
# being freed); every one must be served, by the same worker or the next one
my $sql = '';
for my $i (1 .. 24)
{
	$sql .=
	    "WITH a AS MATERIALIZED (SELECT leaf_segment_next('t') s, leaf_snowflake_next() f) "
	  . "SELECT s || ' ' || f || ' ' || coalesce((SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity "
	  . "WHERE backend_type LIKE 'leaf_id % worker' AND datname = current_database()), '0') FROM a;\n"
	  . "DO \$\$ BEGIN PERFORM pg_sleep(0.95 + random() * 0.65); END \$\$;\n";
}
my $c = start_client($node, 'app_copy', 'around', $sql);
finish_clients(120, $c);
my (@seg, @sf, %pids);
is($c->{rc}, 0, 'every call around the idle deadline succeeded')
  or diag $c->{stderr};
for (split /\n/, slurp_file($c->{out}))
{
	my ($s, $f, $pid) = split / /;
	push @seg, $s;
	push @sf, $f;
	$pids{$pid} = 1 if $pid;
}
is(scalar @seg, 24, 'all 24 calls returned IDs');
cmp_ok(scalar keys %pids, '>=', 4,
	'the calls were served by several workers in turn (the worker left between them: '
	  . scalar(keys %pids) . ' workers)');
my %before_seg = map { $_ => 1 } ids_of('app_copy', 'seg');
my %before_sf = map { $_ => 1 } ids_of('app_copy', 'sf');
is_deeply([ duplicates(@seg) ], [], 'segment IDs of the calls: none twice');
is_deeply([ duplicates(@sf) ], [], 'snowflake IDs of the calls: none twice');
is(scalar(grep { $before_seg{$_} } @seg), 0, 'nor one drawn before');
is(scalar(grep { $before_sf{$_} } @sf), 0, 'nor one drawn before (snowflake)');

# --- worker_idle_timeout = 0: the worker stays -------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE stay');
$node->safe_psql('stay', q{
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('t', 1, 100);
CREATE TABLE ids (phase text, mode text, id bigint);
});
$node->safe_psql('postgres',
	'ALTER SYSTEM SET leaf_id.worker_idle_timeout = 0; SELECT pg_reload_conf()');
draw('stay', 'stay', 100);
my $stay_pid = worker_pid($node, 'stay');
ok($stay_pid ne '', 'worker_idle_timeout = 0: the worker runs');
ok(!worker_gone('stay', 4), 'and is still there after 4 times the test timeout');
is(worker_pid($node, 'stay'), $stay_pid, 'the same worker');
$r = try_sql($node, 'postgres', 'DROP DATABASE stay');
is($r->{sqlstate}, '55006',
	'DROP DATABASE without FORCE fails while the worker is connected')
  or diag $r->{err};
$node->safe_psql('postgres',
	'ALTER SYSTEM RESET leaf_id.worker_idle_timeout; SELECT pg_reload_conf()');
ok(worker_gone('stay'), 'after a reload back to 1 s the worker leaves');
$r = try_sql($node, 'postgres', 'DROP DATABASE stay');
is($r->{ret}, 0, 'and DROP DATABASE works') or diag $r->{err};

$node->stop;

# --- one background worker slot per mode in all (two: segment, snowflake):
# the worker that left gives its slot to the next one (a call right after it
# left may find the slot not yet given back by the postmaster, and tries
# again for a moment)
my $tight = leaf_node(
	'idle_worker_one_slot', q{
leaf_id.worker_idle_timeout = 300
max_worker_processes = 2
max_parallel_workers = 0
max_logical_replication_workers = 0
log_min_messages = log
leaf_id.heartbeat_interval = 60000
leaf_id.lease_ahead = 120000
});
$tight->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('t', 1, 100)");
$sql = '';
for my $i (1 .. 20)
{
	$sql .=
	    "SELECT leaf_segment_next('t') || ' ' || leaf_snowflake_next();\n"
	  . "DO \$\$ BEGIN PERFORM pg_sleep(0.25 + random() * 0.4); END \$\$;\n";
}
$c = start_client($tight, 'postgres', 'one_slot', $sql);
finish_clients(120, $c);
is($c->{rc}, 0, 'one worker slot per mode: every call around the idle deadline succeeded')
  or diag $c->{stderr};
my @pairs = split /\n/, slurp_file($c->{out});
is(scalar @pairs, 20, 'one worker slot per mode: all 20 calls returned IDs');
is_deeply([ duplicates(map { (split / /)[0] } @pairs) ], [],
	'one worker slot per mode: no segment ID twice');
is_deeply([ duplicates(map { (split / /)[1] } @pairs) ], [],
	'one worker slot per mode: no snowflake ID twice');
my $starts = () = slurp_file($tight->logfile) =~ /leaf_id \w+ worker started/g;
cmp_ok($starts, '>=', 4, "one worker slot per mode: the worker was started $starts times");

# a call that waits for the worker at the moment it leaves: a session holds
# leaf_worker's row lock, so the leaving worker, its generator already
# closed, waits to write its last millisecond; a snowflake call meanwhile
# finds the generator closed and waits. The lock goes, the worker writes and
# leaves, and the waiting call is served by the next snowflake worker. (No
# heartbeat in between: 60 s.)
$tight->safe_psql('postgres',
	'ALTER SYSTEM SET leaf_id.worker_idle_timeout = 3000; SELECT pg_reload_conf()');
my $worker_state = sub {
	$tight->safe_psql('postgres',
		"SELECT wait_event_type FROM pg_stat_activity WHERE backend_type = 'leaf_id snowflake worker'");
};
ok(wait_until(20, sub { worker_pid($tight, 'postgres') eq '' }),
	'one worker slot per mode: the worker left after the calls');
my $before = $tight->safe_psql('postgres',
	'SELECT max(leaf_snowflake_next()) FROM generate_series(1, 10)');
my $locker = session($tight, 'postgres');
session_query($locker, 'BEGIN; SELECT worker_id FROM leaf_id_catalog.leaf_worker FOR UPDATE;');
ok(wait_until(20, sub { $worker_state->() eq 'Lock' }),
	'the idle worker closed the generator and waits for the row lock to write its mark');
my $waiter = start_client($tight, 'postgres', 'waiter',
	"SELECT leaf_snowflake_next();\n");
ok( wait_until(
		4,
		sub {
			$tight->safe_psql('postgres',
				"SELECT wait_event_type FROM pg_stat_activity WHERE application_name = 'waiter'"
			) eq 'Extension';
		}),
	'a snowflake call waits for the worker meanwhile');
session_query($locker, 'ROLLBACK');
$locker->quit;
finish_clients(30, $waiter);
is($waiter->{rc}, 0, 'the call that waited while the worker left is served')
  or diag $waiter->{stderr};
my ($waited) = client_ids($waiter);
cmp_ok($waited // 0, '>', $before, 'with an ID above the ones before');
$tight->stop;

# --- a segment call that lands while the worker leaves ------------------------
# One background worker slot in all, segment mode only. With
# leaf_id.test_fault_point = slow_worker_exit the idle worker pauses 1.5 s
# after it decided to leave, and the calls land then: they find the worker
# still there, ask it and wait. It gives the database's tag slots back (the
# slot the call of the new tag waits on is freed under it: it takes a new
# one), then pauses 0.3 s with its background worker slot still taken: the
# first starts of the next worker fail, and the call tries again.
my $one = leaf_node(
	'idle_worker_leaving', q{
leaf_id.worker_idle_timeout = 1000
max_worker_processes = 1
max_parallel_workers = 0
max_logical_replication_workers = 0
log_min_messages = log
leaf_id.test_fault_point = 'slow_worker_exit'
});
$one->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('t', 1, 100), ('late', 1, 100)");
my @early = split /\n/,
  $one->safe_psql('postgres', "SELECT leaf_segment_next('t') FROM generate_series(1, 50)");
my $first_pid = worker_pid($one, 'postgres', 'segment');
ok($first_pid ne '', 'premise: the segment worker runs');
ok(wait_until(20, sub { $one->log_contains(qr/slow_worker_exit: pausing 1500 ms before leaving/) }),
	'the idle worker decided to leave, and pauses before it does');
my $late = start_client($one, 'postgres', 'late',
	"SELECT leaf_segment_next('late');\nSELECT leaf_segment_next('t');\n");
finish_clients(30, $late);
is($late->{rc}, 0, 'the calls that landed while the worker left were served')
  or diag $late->{stderr};
my @late_ids = split /\n/, slurp_file($late->{out});
is_deeply([ $late_ids[0] ], [1], "the new tag's call got its first ID");
cmp_ok($late_ids[1] // 0, '>', (sort { $a <=> $b } @early)[-1],
	"the old tag's call got an ID above the ones before (its cached segment became a gap)");
ok($one->log_contains(qr/slow_worker_exit: pausing 300 ms with its slot still taken/),
	'premise: the worker left and held its slot for a moment');
ok($one->log_contains(qr/started the leaf_id segment worker at attempt \d+ \(no background worker slot was free before\)/),
	'the call tried again until the background worker slot was free, and started the next worker');
my $next_pid = worker_pid($one, 'postgres', 'segment');
ok($next_pid ne '' && $next_pid ne $first_pid, 'another segment worker serves the database now');
$one->stop;
done_testing();
