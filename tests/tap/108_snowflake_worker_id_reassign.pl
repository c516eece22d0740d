# leaf_id snowflake mode: the high-water mark of a worker id must not be lost
# when a node moves from a claimed worker id to a configured one.
#
# Node "<sysid>:<port>" claims worker id 0 from leaf_worker and issues IDs.
# It is then configured with leaf_id.worker_id = 5: its registry row moves to
# 5, so worker id 0 looks free. A node whose clock lags a few seconds (another
# node name, leaf_id.test_clock_offset_ms in postgresql.conf) then claims the
# lowest free id, 0. THE RULE: it must not hand out worker-0 IDs that were
# handed out before. It inherits the mark of released:0, so its calls are
# refused (58000, behind the mark) until its clock passes the mark; then its
# IDs are above the earlier ones.
#
# leaf_id.random_sequence_start = off makes every millisecond start at
# sequence 0, so any millisecond issued twice under worker id 0 yields a
# literal duplicate ID.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SnowflakeTap;

my $node = snowflake_node('snowflake_reassign', <<'CONF', <<'SQL');
log_statement = none
leaf_id.random_sequence_start = off
CONF
CREATE TABLE ids (phase int NOT NULL, id bigint NOT NULL);
SQL
my $first_node = default_node_name($node);

# --- phase 1: claimed worker id 0, IDs over about 3 s -----------------------
draw_spread($node, 1, 40, 2000, 0.05);
is(snowflake_status($node, 'worker_id, worker_id_source'),
	'0|leaf_worker', 'phase 1: worker id 0 claimed from leaf_worker');
my ($p1_min_ms, $p1_max_ms) = phase_ms_range($node, 1);
note sprintf('phase 1 spans %d ms', $p1_max_ms - $p1_min_ms);

# --- phase 2: the same node, now configured with worker id 5 -----------------
$node->append_conf('postgresql.conf', "leaf_id.worker_id = 5\n");
$node->restart;
issued_after_restart($node, 'INSERT INTO ids SELECT 2, leaf_snowflake_next()',
	'phase 2: configured worker id 5', seconds => 15);
is(snowflake_status($node, 'worker_id, worker_id_source'),
	'5|setting', 'phase 2: worker id 5 from the setting');
my $registry = $node->safe_psql('postgres', 'SELECT worker_id, node_name, last_timestamp FROM leaf_id_catalog.leaf_worker ORDER BY 1');
note "leaf_worker after the move:\n$registry";
# README: the old row is not deleted but renamed released:<id>, with its mark
is($node->safe_psql('postgres', 'SELECT worker_id, node_name FROM leaf_id_catalog.leaf_worker ORDER BY 1'),
	"0|released:0\n5|$first_node",
	'phase 2: the old row of worker id 0 is kept as released:0, the node owns 5');
cmp_ok(persisted_mark($node, 0), '>=', $p1_max_ms,
	'phase 2: released:0 keeps the mark, at or above the last millisecond of phase 1');

# --- phase 3: a lagging node claims the lowest free id ----------------------
# Its clock is set back so that it lands inside the milliseconds of phase 1.
my $now_ms = int(time * 1000);
my $offset = -($now_ms - $p1_min_ms) - 300;
note "lagging node: clock offset $offset ms";
$node->adjust_conf('postgresql.conf', 'leaf_id.worker_id', '-1');
$node->append_conf('postgresql.conf',
	"leaf_id.node_name = 'lagging-node'\nleaf_id.test_clock_offset_ms = $offset\n");
$node->restart;

issued_after_restart($node,
	'INSERT INTO ids SELECT 3, leaf_snowflake_next() FROM generate_series(1, 20000)',
	'phase 3: the lagging node (behind the inherited mark at first)',
	seconds => 20, successes => 25);
# the premise: the lagging node took over worker id 0 and inherited its mark
is(snowflake_status($node, 'worker_id, worker_id_source'),
	'0|leaf_worker', 'phase 3: the lagging node claimed worker id 0 (the released one)');
is($node->safe_psql('postgres', 'SELECT node_name FROM leaf_id_catalog.leaf_worker WHERE worker_id = 0'),
	'lagging-node', 'phase 3: the row of worker id 0 now names the lagging node');
is( snowflake_status(
		$node, qq{(extract(epoch FROM restart_floor) * 1000)::bigint >= $p1_max_ms}),
	't',
	'phase 3: its restart floor (the inherited mark) is at or above the last millisecond of phase 1');

is(shared_ids($node, 1, 3), '0', 'no ID of phase 1 was handed out again by the node that took over worker id 0');
is(phase_above($node, 3, 1),
	't',
	'worker id 0 again: its new IDs are all above the IDs it issued before');

$node->stop;
done_testing();
