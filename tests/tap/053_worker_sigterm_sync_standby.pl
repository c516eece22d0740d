# The worker stops on SIGTERM like a backend, even while its commit waits
# for a synchronous standby that never comes: callers get 55P03 meanwhile,
# and `pg_ctl stop -m fast` completes. The refill whose commit was cut short
# is not handed out (it may not have reached a standby): after the restart
# every ID is above it.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node('syncwait', "wal_level = replica\nmax_wal_senders = 4\n");
$node->safe_psql('postgres',
	"INSERT INTO leaf_alloc (biz_tag, step) VALUES ('before', 10)");
is($node->safe_psql('postgres', "SELECT leaf_segment_next('before')"), '1', 'the worker runs');

# a synchronous standby that never comes, in force from the start (a reload
# reaches commits only once the checkpointer has seen it)
$node->safe_psql('postgres',
	"INSERT INTO leaf_alloc (biz_tag, step) VALUES ('waits', 10);
	 ALTER SYSTEM SET synchronous_standby_names = 'nobody'");
$node->restart;
my $r = try_sql($node, 'postgres',
	"SET leaf_id.refill_timeout = 2000; SELECT leaf_segment_next('waits')");
is($r->{sqlstate}, '55P03', 'a refill waiting for the standby: the call times out with 55P03')
  or diag $r->{out} . $r->{err};
is($r->{out}, '', 'no ID handed out');
my $waiting = $node->safe_psql('postgres',
	"SELECT wait_event FROM pg_stat_activity WHERE backend_type = 'leaf_id worker'");
is($waiting, 'SyncRep', 'premise: the worker waits for the synchronous standby');

# pg_ctl stop -m fast, bounded: a worker deaf to SIGTERM hangs it
my $stopped = system_log('pg_ctl', '-D', $node->data_dir, '-m', 'fast', '-t', '30', '-w', 'stop');
is($stopped, 0, 'pg_ctl stop -m fast completes');
if ($stopped != 0)
{
	system_log('pg_ctl', '-D', $node->data_dir, '-m', 'immediate', '-w', 'stop');
}
$node->_update_pid(0);

$node->append_conf('postgresql.conf', "synchronous_standby_names = ''\n");
$node->adjust_conf('postgresql.auto.conf', 'synchronous_standby_names', "''");
$node->start;
my $max_before = $node->safe_psql('postgres',
	"SELECT max_id FROM leaf_alloc WHERE biz_tag = 'waits'");
my $first = $node->safe_psql('postgres', "SELECT leaf_segment_next('waits')");
ok($first >= $max_before,
	"after the restart the first ID ($first) is not below leaf_alloc.max_id ($max_before)");

done_testing();
