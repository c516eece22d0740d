# leaf_id snowflake mode: immediate shutdown while several clients insert
# leaf_snowflake_next() rows in autocommit (pgbench), twice, then restart.
#
# Every committed row survives the crash; after each restart no ID repeats an
# earlier one, every new ID is larger than every ID committed before, the old
# IDs are at or below the restart floor (the mark persisted before the crash)
# and the new ones above it. (An immediate shutdown and restart; kill -9 of
# one process, after which the postmaster reinitializes shared memory in
# place, is 111.)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SnowflakeTap;

my $node = snowflake_node('snowflake_crash', <<'CONF', <<'SQL');
log_statement = none
leaf_id.lease_ahead = 3000
leaf_id.heartbeat_interval = 1000
CONF
CREATE TABLE ids (phase int NOT NULL, id bigint NOT NULL);
SQL

# pgbench scripts, one per phase
for my $phase (1 .. 3)
{
	PostgreSQL::Test::Utils::append_to_file($node->basedir . "/insert_$phase.sql",
		"INSERT INTO ids VALUES ($phase, leaf_snowflake_next());\n");
}

sub start_pgbench
{
	my ($phase, $seconds) = @_;
	my ($out, $err) = ('', '');
	my $cmd = pgbench_command($node, $node->basedir . "/insert_$phase.sql",
		'-c', '4', '-j', '2', '-T', $seconds, '-M', 'prepared');
	my $h = IPC::Run::start($cmd, '>', \$out, '2>', \$err,
		IPC::Run::timeout($seconds + 60));
	return ($h, \$out, \$err);
}

sub count_phase
{
	my $phase = shift;
	return $node->safe_psql('postgres', "SELECT count(*) FROM ids WHERE phase = $phase");
}

# Load, then an immediate shutdown in the middle of it.
sub load_and_crash
{
	my $phase = shift;
	my ($h, $out, $err) = start_pgbench($phase, 60);
	my $t0 = time;
	usleep(200_000) while count_phase($phase) < 5000 && time - $t0 < 30;
	usleep(1_500_000);    # a heartbeat or two under load
	my $committed_before = count_phase($phase);
	$node->stop('immediate');
	eval { $h->finish; 1 } or do { $h->kill_kill; };
	note "phase $phase: pgbench ended after the shutdown; stderr tail: "
	  . substr($$err, -300);
	cmp_ok($committed_before, '>=', 5000, "phase $phase: at least 5000 rows committed under load before the crash");
	return $committed_before;
}

# After a restart: retry the first insert (it may be refused until the clock
# passes the mark persisted before the crash, at most lease_ahead ms).
sub first_insert_after_restart
{
	my $phase = shift;
	issued_after_restart($node, "INSERT INTO ids VALUES ($phase, leaf_snowflake_next())",
		"phase $phase: first insert after the restart", seconds => 15);
	return;
}

sub check_after_restart
{
	my ($phase, $committed_before) = @_;
	my $prev = $phase - 1;
	cmp_ok(count_phase($prev), '>=', $committed_before,
		"phase $prev: every row committed before the crash survived");
	my ($ok_floor) = snowflake_status(
		$node, qq{
restart_floor IS NOT NULL
   AND (SELECT max(id) FROM ids WHERE phase = $prev) >> 22
       <= (extract(epoch FROM restart_floor) * 1000)::bigint - @{[LEAF_EPOCH_MS]}});
	is($ok_floor, 't', "phase $prev: its IDs are at or below the restart floor (the mark persisted before the crash)");
}

# --- two crashes under load ------------------------------------------------
my $committed = load_and_crash(1);
$node->start;
first_insert_after_restart(2);
check_after_restart(2, $committed);

$committed = load_and_crash(2);
$node->start;
first_insert_after_restart(3);
check_after_restart(3, $committed);

# --- a clean run after the second crash --------------------------------------
my ($h, $out, $err) = start_pgbench(3, 3);
my $finished = eval { $h->finish; 1 };
ok($finished && $h->result(0) == 0, 'phase 3: pgbench without errors after the restart')
  or diag "pgbench stderr: $$err";

# --- over all phases ---------------------------------------------------------
my $counts = $node->safe_psql('postgres',
	q{SELECT string_agg(phase || ':' || n, ' ' ORDER BY phase) FROM (SELECT phase, count(*) n FROM ids GROUP BY phase) s});
note "rows per phase: $counts";
is(repeated_ids($node), '0', 'no ID was issued twice over the crashes');
for my $phase (2 .. 3)
{
	my $prev = $phase - 1;
	is(phase_above($node, $phase, 1 .. $prev),
		't',
		"every ID of phase $phase (after crash $prev) is larger than every ID before");
}
my $floor_ok = snowflake_status(
	$node, qq{
(SELECT min(id) FROM ids WHERE phase = 3) >> 22
       > (extract(epoch FROM restart_floor) * 1000)::bigint - @{[LEAF_EPOCH_MS]}});
is($floor_ok, 't', 'IDs after the last restart are above its restart floor');
is($node->safe_psql('postgres',
		'SELECT count(DISTINCT d.worker_id) FROM ids, LATERAL leaf_snowflake_decode(id) d'),
	'1', 'all IDs carry the same worker id');

$node->stop;
done_testing();
