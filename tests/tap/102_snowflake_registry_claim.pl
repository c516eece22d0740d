# leaf_id snowflake mode: worker ids claimed from the leaf_worker registry
# (leaf_id.worker_id = -1, the default).
#
# - a new node claims the lowest free id (0 and 1 are taken -> 2);
# - after a restart the same node gets the same id back, and its new IDs are
#   above everything it issued before (the first calls may be refused, 58000,
#   until the clock passes the persisted mark: bounded retry);
# - another node name claims the next free id (3);
# - switching back to the first name gets 2 again, still above its old IDs;
# - its row deleted while it issues, it claims another id (4) and goes on.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SnowflakeTap;
use Time::HiRes qw(usleep);

use constant LEASE_AHEAD_MS => 3000;

# After a restart: the first call may be refused while the clock is below the
# mark persisted before (at most lease_ahead ms); anything else is a failure.
sub first_ids_after_restart
{
	my ($node, $phase, $what) = @_;
	my $r = repeat_sql($node,
		"INSERT INTO ids SELECT $phase, leaf_snowflake_next() RETURNING id",
		seconds => (LEASE_AHEAD_MS + 7000) / 1000);
	my $out = $r->{ok} ? $r->{last}{out} : undef;
	ok(defined $out && $out =~ /^\d+$/, "$what: an ID is issued within the retry budget")
	  or diag explain $r->{errors};
	only_behind_mark_refusals($r->{errors},
		"$what: the only refusals were 58000 'behind the persisted mark'");
	note sprintf("%s: %d refusal(s), first ID after %.0f ms",
		$what, scalar(@{ $r->{errors} }), $r->{seconds} * 1000);
	return $out;
}

# Draw 5000 IDs for $phase; the worker ids they decode to.
sub draw_phase
{
	my ($node, $phase) = @_;
	$node->safe_psql('postgres',
		"INSERT INTO ids SELECT $phase, leaf_snowflake_next() FROM generate_series(1, 5000)");
	return $node->safe_psql(
		'postgres', qq{
SELECT string_agg(DISTINCT d.worker_id::text, ',')
FROM ids, LATERAL leaf_snowflake_decode(id) d WHERE phase = $phase});
}

sub check_phase_above
{
	my ($node, $phase, $prev_phases, $what) = @_;
	is(phase_above($node, $phase, $prev_phases),
		't',
		"$what: every new ID is larger than every earlier ID of this worker id");
}

my $node = snowflake_node('snowflake_registry', <<'CONF', <<'SQL');
leaf_id.lease_ahead = 3000
leaf_id.heartbeat_interval = 1000
CONF
INSERT INTO leaf_id_catalog.leaf_worker (worker_id, node_name) VALUES (0, 'other-a'), (1, 'other-b');
CREATE TABLE ids (phase int NOT NULL, id bigint NOT NULL);
SQL
my $default_node = default_node_name($node);

# --- phase 1: first claim takes the lowest free id -------------------------
is(draw_phase($node, 1),
	'2',
	'ids 0 and 1 taken: the node claims worker id 2 (decode)');
is(snowflake_status($node, 'state, worker_id, worker_id_source, node_name'),
	"ready|2|leaf_worker|$default_node",
	'status: worker id 2 from leaf_worker, default node name <system identifier>:<port>');
is( $node->safe_psql(
		'postgres',
		q{SELECT worker_id, node_name, last_timestamp IS NOT NULL FROM leaf_id_catalog.leaf_worker ORDER BY worker_id}),
	"0|other-a|f\n1|other-b|f\n2|$default_node|t",
	'leaf_worker: the other rows untouched, row 2 for this node with a persisted mark');
is(ids_within_mark($node, 2),
	't',
	'no issued millisecond is beyond the persisted mark');

# --- phase 2: restart, same node gets the same id back ---------------------
$node->restart;
first_ids_after_restart($node, 2, 'after restart');
is(draw_phase($node, 2),
	'2',
	'after restart: the same node gets worker id 2 back (decode)');
is(snowflake_status($node, 'worker_id, worker_id_source, node_name'),
	"2|leaf_worker|$default_node", 'after restart: status worker id 2 from leaf_worker');
check_phase_above($node, 2, '1', 'after restart');
is( snowflake_status(
		$node, qq{
restart_floor IS NOT NULL
   AND (SELECT max(id) FROM ids WHERE phase = 1) >> 22
       <= (extract(epoch FROM restart_floor) * 1000)::bigint - @{[LEAF_EPOCH_MS]}
   AND (SELECT min(id) FROM ids WHERE phase = 2) >> 22
       > (extract(epoch FROM restart_floor) * 1000)::bigint - @{[LEAF_EPOCH_MS]}}),
	't',
	'after restart: old IDs are at or below restart_floor, new IDs above it');
is($node->safe_psql('postgres', 'SELECT count(*) FROM leaf_id_catalog.leaf_worker'), '3', 'after restart: no new leaf_worker row');

# --- phase 3: another node name claims the next free id --------------------
$node->append_conf('postgresql.conf', "leaf_id.node_name = 'second-node'\n");
$node->restart;
first_ids_after_restart($node, 3, 'second node name');
is(draw_phase($node, 3),
	'3',
	'another node name claims the next free worker id, 3 (decode)');
is(snowflake_status($node, 'worker_id, worker_id_source, node_name'),
	"3|leaf_worker|second-node", 'second node name: status worker id 3, node name second-node');
is( $node->safe_psql(
		'postgres', q{SELECT worker_id, node_name FROM leaf_id_catalog.leaf_worker ORDER BY worker_id}),
	"0|other-a\n1|other-b\n2|$default_node\n3|second-node",
	'leaf_worker: worker id 2 still belongs to the first name, 3 to the second');

# --- phase 4: back to the default name: worker id 2 again, above its old IDs
$node->append_conf('postgresql.conf', "leaf_id.node_name = ''\n");
$node->restart;
first_ids_after_restart($node, 4, 'back to the first name');
is(draw_phase($node, 4),
	'2',
	'back to the first name: worker id 2 again');
check_phase_above($node, 4, '1, 2', 'back to the first name');

# --- phase 5: the node's row deleted while it issues: its renewal finds no
# row (it failed with 55000 at every renewal until a restart); it claims
# again, another id than the one it lost (as after a takeover: the lowest
# free one but 2, so 4), and goes on
$node->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_worker WHERE worker_id = 2");
my $mine = $node->safe_psql('postgres', 'SELECT quote_literal(node_name) FROM leaf_snowflake_status');
my $back = '';
for (1 .. 100)
{
	$back = $node->safe_psql('postgres', "SELECT string_agg(worker_id::text, ',') FROM leaf_id_catalog.leaf_worker WHERE node_name = $mine");
	last if $back ne '';
	usleep(100_000);
}
is($back, '4', 'its row deleted: the node claims again within seconds, worker id 4');
my $r = repeat_sql($node, "INSERT INTO ids SELECT 5, leaf_snowflake_next() FROM generate_series(1, 100) RETURNING 1",
	seconds => 5);
ok($r->{ok}, 'its row deleted: the node goes on issuing') or diag explain $r->{errors};
is(draw_phase($node, 5), '4', 'its row deleted: it issues with worker id 4');
check_phase_above($node, 5, '1, 2, 3, 4', 'its row deleted');

is(repeated_ids($node), '0', 'no ID was issued twice over all phases');

$node->stop;
done_testing();
