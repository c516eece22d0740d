# The worker and a synchronous standby that never comes:
#  - a cancel (pg_cancel_backend) of the worker's wait commits locally but
#    not on the standby: that range is never handed out, not even to a call
#    that was waiting for it;
#  - the worker stops on SIGTERM like a backend, even while its commit
#    waits: `pg_ctl stop -m fast` completes, and after the restart every ID
#    is above what the cut-short commit reserved.
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
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('before', 10)");
is($node->safe_psql('postgres', "SELECT leaf_segment_next('before')"), '1', 'the worker runs');

# a synchronous standby that never comes, in force from the start (a reload
# reaches commits only once the checkpointer has seen it)
$node->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('waits', 10);
	 ALTER SYSTEM SET synchronous_standby_names = 'nobody'");
$node->restart;
# a cancel of the worker's wait: the committed-here range is not used
$node->safe_psql('postgres',
	"SET synchronous_commit = local; INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('cancelled', 10)");
my $caller = start_client($node, 'postgres', 'cancel_caller',
	"SET leaf_id.refill_timeout = 60000;\nSELECT leaf_segment_next('cancelled');\n");
ok( wait_until(
		30,
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leaf_id segment worker' AND wait_event = 'SyncRep'"
			) eq '1';
		}),
	'the worker waits for the standby with the first range of "cancelled"');
$node->safe_psql('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE backend_type = 'leaf_id segment worker'");
ok( $node->wait_for_log(qr/wait for the synchronous standby was cancelled: its commit is not used/),
	'the worker does not use the cancelled commit');
my $reserved = $node->safe_psql('postgres',
	"SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'cancelled'");
is($reserved, '11', 'premise: the cancelled commit reserved [1, 11) here');
# the standby requirement goes away: the worker's retry commits
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()");
finish_clients(60, $caller);
# the waiting caller got the worker's error (57014) or a later range's ID,
# never one of the cancelled range
my @got = client_ids($caller);
my $err = slurp_file($caller->{err});
ok((@got == 1 && $got[0] >= 11) || (!@got && $err =~ /its commit is not used/),
	'the waiting caller got no ID of the cancelled range (' . join(',', @got) . ')')
  or diag $err;
my $next = $node->safe_psql('postgres', "SELECT leaf_segment_next('cancelled')");
ok($next >= 11, "the next ID ($next) is above the cancelled range");
# that ID crossed its segment's prefetch threshold: let the prefetch finish
# before the standby is required again, so that the refill of "waits" is the
# worker's next commit (else the prefetch of "cancelled" waits for the
# standby instead). Finished means published and its step saved: the worker
# publishes a range, then saves the step in a transaction of its own, and
# that commit, were it to wait for the standby, would hold up the refill of
# "waits" (which then reserves nothing)
ok( wait_until(
		30,
		sub {
			$node->safe_psql('postgres',
				"SELECT s.next_ready AND NOT s.refill_in_flight
				        AND t.tuned_step IS NOT DISTINCT FROM s.dynamic_step
				   FROM leaf_segment_status s
				   LEFT JOIN leaf_id_catalog.leaf_alloc_tuning t ON t.biz_tag = s.tag
				  WHERE s.tag = 'cancelled'") eq 't';
		}),
	'premise: the prefetch of "cancelled" is done, its step saved');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'nobody'; SELECT pg_reload_conf()");
my $r;
ok( wait_until(
		30,
		sub {
			$r = try_sql($node, 'postgres',
				"SET leaf_id.refill_timeout = 2000; SELECT leaf_segment_next('waits')");
			($r->{sqlstate} // '') eq '55P03';
		}),
	'a refill waiting for the standby: the call times out with 55P03')
  or diag $r->{out} . $r->{err};
is($r->{out}, '', 'no ID handed out');
my $waiting = $node->safe_psql('postgres',
	"SELECT wait_event FROM pg_stat_activity WHERE backend_type = 'leaf_id segment worker'");
is($waiting, 'SyncRep', 'premise: the worker waits for the synchronous standby');
# and the commit that waits is the refill of "waits": its transaction still
# holds the row it updated
my $row = try_sql($node, 'postgres',
	"SELECT 1 FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'waits' FOR UPDATE NOWAIT");
is($row->{sqlstate}, '55P03', 'premise: the commit that waits is the refill of "waits" (its row is locked)')
  or diag $row->{out} . $row->{err};


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
# the cut-short commit is durable here: it reserved [1, 11) (read before any
# refill of this lifetime); the first ID of the restarted server is above it
is($node->safe_psql('postgres', "SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'waits'"),
	'11', 'the commit cut short by the stop is durable: [1, 11) was reserved');
my $first = $node->safe_psql('postgres', "SELECT leaf_segment_next('waits')");
cmp_ok($first, '>=', 11,
	"after the restart the first ID ($first) is above the range the cut-short commit reserved");

done_testing();
