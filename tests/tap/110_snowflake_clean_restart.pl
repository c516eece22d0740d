# leaf_id snowflake mode: a clean restart persists the exact last issued
# millisecond instead of the lease (set leaf_id.lease_ahead ahead of the
# clock), so IDs are not refused after it; an immediate shutdown keeps the
# lease, so IDs are refused until the clock passes it. Either way every new
# ID is above every old one. A worker terminated on its own (not a restart)
# closes the generator too, and the next worker goes on from the same place.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SnowflakeTap;

# a long lease makes the difference plain: 20 s of refusals after a crash
my $node = snowflake_node('snowflake_clean_restart', qq{
leaf_id.lease_ahead = 20000
leaf_id.heartbeat_interval = 1000
lc_messages = 'C'
});

my $max_old = $node->safe_psql('postgres',
	'SELECT max(leaf_snowflake_next()) FROM generate_series(1, 50000)');
my $mark_before = persisted_mark($node, 0);
cmp_ok($mark_before, '>', time() * 1000 + 10_000, 'while running, the persisted mark is the lease, far ahead');

# clean restart (fast shutdown)
$node->restart;
my $mark_after = persisted_mark($node, 0);
my $last_ms = $node->safe_psql('postgres',
	"SELECT (($max_old >> 22) + " . LEAF_EPOCH_MS . ")");
cmp_ok($mark_after, '>=', $last_ms, 'the mark persisted at shutdown covers the last issued millisecond');
cmp_ok($mark_after, '<', $mark_before, 'and is below the lease it replaced');
my $r = try_sql($node, 'postgres', 'SELECT min(leaf_snowflake_next()) FROM generate_series(1, 1000)');
ok(!$r->{sqlstate}, 'after a clean restart IDs are issued at once')
  or diag $r->{err};
(my $min_new = $r->{out}) =~ s/\s+//g;
cmp_ok($min_new, '>', $max_old, 'every new ID is above every ID before the restart');

# a worker terminated while the server runs: callers wait for the next one
my $max_mid = $node->safe_psql('postgres',
	'SELECT max(leaf_snowflake_next()) FROM generate_series(1, 10000)');
$node->safe_psql('postgres',
	"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'leaf_id snowflake worker'");
$r = try_sql($node, 'postgres', 'SELECT min(leaf_snowflake_next()) FROM generate_series(1, 1000)');
ok(!$r->{sqlstate}, 'after the worker was terminated, the next worker reopens the generator')
  or diag $r->{err};
(my $min_mid = $r->{out}) =~ s/\s+//g;
cmp_ok($min_mid, '>', $max_mid, 'and IDs go on above the earlier ones');

# immediate shutdown: no handshake, the lease stays, so IDs are refused
my $max_crash = $node->safe_psql('postgres',
	'SELECT max(leaf_snowflake_next()) FROM generate_series(1, 10000)');
$node->stop('immediate');
$node->start;
$r = try_sql($node, 'postgres', 'SELECT leaf_snowflake_next()');
is($r->{sqlstate}, '58000', 'after an immediate shutdown IDs are refused until the clock passes the lease');
like($r->{err}, BEHIND_MARK_RE, 'with the behind-the-mark message');
cmp_ok(persisted_mark($node, 0), '>', time() * 1000 + 5_000, 'the lease is still the persisted mark');

$node->stop;
done_testing();
