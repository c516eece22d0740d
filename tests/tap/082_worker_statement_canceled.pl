# A cancel of the background worker's own statement, or its own lock_timeout,
# is not the callers' (the Citus suite met it: citus_activate_node canceled
# the coordinator's refill, and the session waiting for it died with 57014,
# "canceling statement due to user request", which PL/pgSQL's WHEN OTHERS
# cannot catch; and on Citus nodes that start together, one claim waited
# past the worker's lock_timeout and its callers failed after 5 s of their
# 10 s wait). Lock contention is retried; the callers wait on, up to their
# own leaf_id.refill_timeout, and are told what was waited for only then:
#  A. segment: a refill blocked on a row lock is canceled with
#     pg_cancel_backend; the waiting call must not get 57014: the worker
#     retries, and the call gets its ID once the lock is gone;
#  B. snowflake: a worker id claim blocked on a table lock is canceled; the
#     worker claims again, and the waiting call gets an ID once the lock is
#     gone (it got 55P03 naming the canceled statement);
#  C. segment: a refill blocked on a row lock longer than the worker's own
#     lock_timeout (5 s) is retried: a call that waits 12 s for a lock held
#     7 s gets its ID (it got 55P03 after 5 s); a call whose own wait (7 s)
#     runs out first gets 55P03 saying that the worker waits for a lock;
#  D. snowflake: the same for a claim held past the lock_timeout.
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
	my ($mode, $seconds) = @_;
	my $pid = '';
	my $deadline = time + ($seconds // 20);
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
ok(wait_until(20, sub { slurp_file($node->logfile, $offset) =~ /snowflake worker id claim retried after lock contention: canceling statement due to user request/ }),
	'B: the worker logs the canceled claim, which it retries');
isnt(worker_waiting_on_lock('snowflake', 5), '', 'B: the claim waits for the table lock again');
$holder->query_safe('COMMIT');
SegmentTap::finish_clients(30, $call);
is($call->{rc}, 0, 'B: the waiting call is not told of the worker\'s cancel') or diag $call->{stderr};
like(slurp_file($call->{out}), qr/^\d+$/m, 'B: it gets an ID after the retried claim');
my $r;

# --- C: the worker's own lock timeout ------------------------------------------
$node->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('l', 10, 100), ('m', 10, 500)});
$holder->query_safe(q{BEGIN; SELECT * FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'l' FOR UPDATE});
$offset = -s $node->logfile;
my $t0 = time;
$call = SegmentTap::start_client($node, 'postgres', 'c_call', "SET leaf_id.refill_timeout = 12000;\nSELECT leaf_segment_next('l');\n");
ok($node->wait_for_log(qr/refill of tag "l" failed: canceling statement due to lock timeout/, $offset),
	'C: the refill ran into the worker\'s lock_timeout');
Time::HiRes::sleep(7 - (time - $t0)) if time - $t0 < 7;
$holder->query_safe('COMMIT');
SegmentTap::finish_clients(30, $call);
my $took = time - $t0;
is($call->{rc}, 0, 'C: a call that waits 12 s for a lock held 7 s is not refused') or diag $call->{stderr};
like(slurp_file($call->{out}), qr/^100$/m, 'C: it gets the tag\'s first ID from the retried refill');
cmp_ok($took, '>', 6.5, sprintf('C: ... after the lock was gone (%.1f s)', $took));

$holder->query_safe(q{BEGIN; SELECT * FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'm' FOR UPDATE});
$t0 = time;
$r = try_sql($node, 'postgres', "SET leaf_id.refill_timeout = 7000; SELECT leaf_segment_next('m')", timeout => 60);
$took = time - $t0;
$holder->query_safe('COMMIT');
is($r->{sqlstate}, '55P03', 'C: a call whose own wait runs out first gets 55P03') or diag $r->{err};
like($r->{err}, qr/timed out waiting for a refill of leaf_id tag "m": the worker's last try waited longer than its lock_timeout \(5s\) for a lock that another transaction holds on leaf_id's tables/,
	'C: saying that the worker waits for a lock') or diag $r->{err};
cmp_ok($took, '>', 6.5, sprintf('C: ... when its own leaf_id.refill_timeout ran out (%.1f s), not at the worker\'s 5 s', $took));
$r = try_sql($node, 'postgres', "SELECT leaf_segment_next('m')");
is($r->{out}, '500', 'C: with the lock gone the tag gives its first ID') or diag $r->{err};

# --- D: a claim past the worker's lock timeout ---------------------------------
# (a new database: its worker claims afresh)
$node->safe_psql('postgres', 'CREATE DATABASE d');
$node->safe_psql('d', 'CREATE EXTENSION leaf_id');
my $dholder = $node->background_psql('d');
$dholder->query_safe(q{BEGIN; LOCK TABLE leaf_id_catalog.leaf_worker IN ACCESS EXCLUSIVE MODE});
$offset = -s $node->logfile;
$t0 = time;
$call = SegmentTap::start_client($node, 'd', 'd_call', "SET leaf_id.refill_timeout = 12000;\nSELECT leaf_snowflake_next();\n");
ok(wait_until(20, sub { slurp_file($node->logfile, $offset) =~ /snowflake worker id claim retried after lock contention: canceling statement due to lock timeout/ }),
	'D: the claim ran into the worker\'s lock_timeout, and is retried');
Time::HiRes::sleep(7 - (time - $t0)) if time - $t0 < 7;
$dholder->query_safe('COMMIT');
SegmentTap::finish_clients(30, $call);
is($call->{rc}, 0, 'D: a call that waits 12 s for a lock held 7 s is not refused') or diag $call->{stderr};
like(slurp_file($call->{out}), qr/^\d+$/m, 'D: it gets a snowflake ID from the retried claim');
$dholder->quit;
$holder->quit;

$node->stop;
done_testing();
