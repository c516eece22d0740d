# leaf_id snowflake mode: the server restarts (after an immediate shutdown)
# with its clock behind the high-water mark persisted before.
#
# leaf_id.test_clock_offset_ms = -60000 in postgresql.conf moves the clock of
# the backends and of the background worker 60 s back. Until the clock passes
# the persisted mark, calls are refused with SQLSTATE 58000 saying by how many
# ms the clock is behind; once the offset is removed (reload) and the clock
# passes the mark, calls succeed and every new ID is larger than every ID
# issued before the restart. (The mark is at most leaf_id.lease_ahead, 3 s,
# ahead of the clock, so the shifted clock stays behind it for about a
# minute: a slow restart cannot end the refusals early.)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SnowflakeTap;
use Time::HiRes qw(time);

use constant OFFSET_MS => 60000;

my $node = snowflake_node('snowflake_behind_mark', <<'CONF', <<'SQL');
leaf_id.lease_ahead = 3000
leaf_id.heartbeat_interval = 1000
CONF
CREATE TABLE ids (phase int NOT NULL, id bigint NOT NULL);
SQL

# Draw IDs over about 1.5 s, so that the worker renews the mark meanwhile.
draw_spread($node, 1, 5, 4000, 0.3);
my $worker_id = snowflake_status($node, 'worker_id');
my (undef, $max1_ms) = phase_ms_range($node, 1);
my $mark_before = persisted_mark($node, $worker_id);
cmp_ok($max1_ms, '<=', $mark_before, 'before the restart: no issued ms beyond the persisted mark');

$node->stop('immediate');
$node->append_conf('postgresql.conf', "leaf_id.test_clock_offset_ms = -@{[OFFSET_MS]}\n");
$node->start;

# --- clock 60 s behind: refused --------------------------------------------
my $t0 = time;
my $r = try_sql($node, 'postgres', 'SELECT leaf_snowflake_next()');
isnt($r->{ret}, 0, 'clock behind the persisted mark: leaf_snowflake_next() fails');
is($r->{sqlstate}, '58000', 'clock behind the persisted mark: SQLSTATE 58000') or diag $r->{err};
my ($n) = $r->{err} =~ BEHIND_MARK_RE;
ok(defined $n, 'the message says the clock is N ms behind the persisted mark') or diag $r->{err};
is($r->{out}, '', 'no ID is returned');

my ($floor_ms, $expected) = split /\|/, snowflake_status(
	$node, qq{
       (extract(epoch FROM restart_floor) * 1000)::bigint,
       (extract(epoch FROM restart_floor) * 1000)::bigint
       - ((extract(epoch FROM clock_timestamp()) * 1000)::bigint - @{[OFFSET_MS]})});
# the message was computed before $expected, by at most the time both took
my $between_ms = (time - $t0) * 1000;
note "behind by $n ms in the message; restart_floor $floor_ms, now (shifted) behind it by $expected ms";
ok(defined $n && $n > 0 && $n - $expected >= -2 && $n - $expected <= $between_ms + 2,
	"the ms behind in the message ($n) match restart_floor - shifted clock ($expected) "
	  . sprintf('up to the %.0f ms between the two', $between_ms));
cmp_ok($floor_ms, '>=', $mark_before, 'restart_floor is the mark persisted before the shutdown (or later)');
is(snowflake_status($node, 'worker_id'),
	$worker_id, 'the same worker id was claimed again');

# Still refused a second later, also inside an INSERT (nothing inserted).
sleep 1;
$r = try_sql($node, 'postgres',
	'INSERT INTO ids SELECT 2, leaf_snowflake_next() FROM generate_series(1, 100)');
is($r->{sqlstate}, '58000', 'a second later, still refused with 58000') or diag $r->{err};
like($r->{err}, BEHIND_MARK_RE, 'a second later: same message');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ids WHERE phase = 2'), '0', 'nothing was inserted');

# --- clock back on time (reload): succeeds once past the mark --------------
$node->adjust_conf('postgresql.conf', 'leaf_id.test_clock_offset_ms', '0');
$node->reload;

my $retry = repeat_sql($node, 'INSERT INTO ids SELECT 2, leaf_snowflake_next() RETURNING id',
	seconds => 60);
my $first = $retry->{ok} ? $retry->{last}{out} : undef;
ok(defined $first, sprintf('offset removed: an ID is issued within 60 s (after %.1f s, %d refusals)',
	$retry->{seconds}, scalar @{ $retry->{errors} }));
only_behind_mark_refusals($retry->{errors},
	'offset removed: the only refusals meanwhile were 58000 behind the persisted mark');
$first //= 0;
cmp_ok(($first >> 22) + LEAF_EPOCH_MS, '>', $floor_ms,
	'the first new ID is of a millisecond after restart_floor');

$node->safe_psql('postgres',
	'INSERT INTO ids SELECT 2, leaf_snowflake_next() FROM generate_series(1, 20000)');
is(phase_above($node, 2, 1),
	't',
	'every ID after the restart is larger than every ID before it');
is(repeated_ids($node), '0', 'no ID was issued twice');
is( $node->safe_psql(
		'postgres', q{SELECT count(DISTINCT d.worker_id) FROM ids, LATERAL leaf_snowflake_decode(id) d}),
	'1', 'all IDs carry the same worker id');

$node->stop;
done_testing();
