# leaf_id snowflake mode: changing leaf_id.epoch_ms between restarts.
#
# The persisted high-water mark (leaf_worker.last_timestamp) is in Unix ms, so
# it bounds the clock, not the ID values. Moving the epoch later by D ms makes
# the IDs of "now" equal to the IDs issued D ms ago under the same worker id.
# THE RULE: no ID is handed out twice per worker id - after such a change the
# calls are refused (58000, behind the mark, which moved with the epoch) until
# the clock passes the moved mark; then the new IDs are above the earlier ones.
#
# leaf_id.random_sequence_start = off: every millisecond starts at sequence 0,
# so a millisecond value issued twice yields a literal duplicate.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SnowflakeTap;

my $node = snowflake_node('snowflake_epoch', <<'CONF', <<'SQL');
log_statement = none
leaf_id.random_sequence_start = off
leaf_id.worker_id = 3
CONF
CREATE TABLE ids (phase int NOT NULL, id bigint NOT NULL);
SQL

# phase 1: IDs over about 2 s
draw_spread($node, 1, 30, 2000, 0.05);
my ($p1_min_ms, $p1_max_ms) = phase_ms_range($node, 1);

# Restart with the epoch moved later, so that the first IDs after the restart
# (issued once the clock passes the persisted mark M) encode like phase 1:
# shift = M - start of phase 1 (+ a margin; M may grow by one more renewal).
my $mark = persisted_mark($node, 3);
my $shift = $mark - $p1_min_ms + 300;
my $new_epoch = LEAF_EPOCH_MS + $shift;
note "epoch moved later by $shift ms";
$node->append_conf('postgresql.conf', "leaf_id.epoch_ms = '$new_epoch'\n");
$node->restart;

issued_after_restart($node,
	'INSERT INTO ids SELECT 2, leaf_snowflake_next() FROM generate_series(1, 20000)',
	'after the epoch change (behind the moved mark at first)',
	seconds => 20, successes => 25);
is(snowflake_status($node, 'worker_id, worker_id_source'),
	'3|setting', 'after the epoch change: still worker id 3 from the setting');
# (Unix ms) the last millisecond of phase 1, shifted by the epoch change,
# encodes like phase 1's last IDs: the restart floor must be at least that
my $moved = $p1_max_ms + $shift;
is( snowflake_status(
		$node, qq{(extract(epoch FROM restart_floor) * 1000)::bigint >= $moved}),
	't',
	'after the epoch change: the restart floor moved with the epoch');

is(shared_ids($node, 1, 2),
	'0', 'no ID of before the epoch change was handed out again');
is(phase_above($node, 2, 1),
	't',
	'IDs after the epoch change are above the IDs before it');

$node->stop;
done_testing();
