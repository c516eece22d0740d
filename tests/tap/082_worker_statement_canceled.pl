# A cancel of the background worker's own statement is not the callers'
# (the Citus suite met it: citus_activate_node canceled the coordinator's
# refill, and the session waiting for it died with 57014, "canceling
# statement due to user request", which PL/pgSQL's WHEN OTHERS cannot
# catch):
#  A. segment: a refill blocked on a row lock is canceled with
#     pg_cancel_backend; the waiting call must not get 57014: the worker
#     retries, and the call gets its ID once the lock is gone;
#  B. snowflake: a worker id claim blocked on a table lock is canceled; the
#     waiting call gets 55P03 naming the worker's canceled statement (not
#     57014), and a later call gets an ID;
#  C. segment: a refill blocked on a row lock longer than the worker's own
#     lock_timeout (5 s): the waiting call gets 55P03 saying that the
#     worker waited for a lock, not a bare "canceling statement due to lock
#     timeout" about a statement it did not run.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;
use Time::HiRes qw(usleep time);

my $node = leaf_node('worker_canceled', "leaf_id.refill_timeout = 20000\n");

# the pid of this database's worker of a mode, once it waits on a lock
sub worker_waiting_on_lock
{
	my ($mode) = @_;
	my $pid = '';
	my $deadline = time + 20;
	while (time < $deadline)
	{
		$pid = $node->safe_psql('postgres', qq{
SELECT s.pid FROM leaf_id_worker_status s JOIN pg_stat_activity a USING (pid)
WHERE s.mode = '$mode' AND a.wait_event_type = 'Lock'});
		last if $pid ne '';
		usleep(100_000);
	}
	return $pid;
}

# --- A: a canceled refill ----------------------------------------------------
$node->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('c', 10, 100)});
my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN; SELECT * FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'c' FOR UPDATE});
my $offset = -s $node->logfile;
my $call = SegmentTap::start_client($node, 'postgres', 'a_call', "SELECT leaf_segment_next('c');\n");
my $pid = worker_waiting_on_lock('segment');
isnt($pid, '', 'A: the refill waits for the row lock');
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"), 't', 'A: the worker\'s statement is canceled');
ok($node->wait_for_log(qr/refill of tag "c" failed: canceling statement due to user request/, $offset),
	'A: the worker logs the canceled refill');
usleep(500_000);    # the call would have been answered by now
$holder->query_safe('COMMIT');
SegmentTap::finish_clients(30, $call);
is($call->{rc}, 0, 'A: the waiting call is not told of the worker\'s cancel') or diag $call->{stderr};
like(slurp_file($call->{out}), qr/^100$/m, 'A: it gets the tag\'s first ID after the retry');

# --- B: a canceled worker id claim ------------------------------------------------
$holder->query_safe(q{BEGIN; LOCK TABLE leaf_id_catalog.leaf_worker IN ACCESS EXCLUSIVE MODE});
$offset = -s $node->logfile;
$call = SegmentTap::start_client($node, 'postgres', 'b_call', "\\set VERBOSITY verbose\nSELECT leaf_snowflake_next();\n");
$pid = worker_waiting_on_lock('snowflake');
isnt($pid, '', 'B: the claim waits for the table lock');
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"), 't', 'B: the worker\'s statement is canceled');
SegmentTap::finish_clients(30, $call);
isnt($call->{rc}, 0, 'B: the waiting call is refused');
unlike($call->{stderr}, qr/57014/, 'B: not with 57014');
like($call->{stderr}, qr/ERROR:  55P03: the leaf_id background worker's statement was canceled \(canceling statement due to user request\); it retries/,
	'B: with 55P03, naming the worker\'s canceled statement');
$holder->query_safe('COMMIT');
$holder->quit;
my $r = try_sql($node, 'postgres', 'SET leaf_id.refill_timeout = 20000; SELECT leaf_snowflake_next()');
like($r->{out}, qr/^\d+$/, 'B: a later call gets an ID') or diag $r->{err};

# --- C: the worker's own lock timeout ------------------------------------------
$node->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('l', 10, 100)});
$holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN; SELECT * FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'l' FOR UPDATE});
$r = try_sql($node, 'postgres', "SELECT leaf_segment_next('l')", timeout => 60);
$holder->query_safe('COMMIT');
$holder->quit;
is($r->{sqlstate}, '55P03', 'C: a refill held past the worker\'s lock_timeout: the call gets 55P03') or diag $r->{err};
like($r->{err}, qr/the leaf_id background worker waited longer than its lock_timeout \(5s\) for a lock that another transaction holds/,
	'C: saying that the worker waited for a lock') or diag $r->{err};
$r = try_sql($node, 'postgres', "SELECT leaf_segment_next('l')");
is($r->{out}, '100', 'C: with the lock gone the tag gives its first ID') or diag $r->{err};

$node->stop;
done_testing();
