# Failover with synchronous replication, the other way to keep a
# promoted standby from reissuing: the worker commits with
# synchronous_commit = on and uses a refill, lease or claim only once the
# synchronous standbys have flushed it (leaf_id.synchronized_standby_slots
# empty). A primary, two streaming standbys with slots s1 and s2,
# synchronous_standby_names = 'FIRST 1 (s1)':
#  A. segment and snowflake IDs from several sessions, both standbys up;
#  B. leaf_id.synchronized_standby_slots = 's2' as well, s2 stopped: the
#     commits that wait for s1 and then time out waiting for s2 show one
#     wait in leaf_id_worker_status, with the since of the first; then s1
#     stopped too: the caller, pg_stat_activity and the view say that the
#     worker's commit waits for the synchronous standbys, with that since;
#     then both back, and the slot setting emptied again;
#  C. s1 stopped: the worker's commits wait for it; once their cached
#     segments are used, segment callers are refused with 55P03 (after at most
#     about leaf_id.refill_timeout), having drawn at most their two segments
#     after the stop; snowflake callers once the lease ends;
#  D. the primary killed (kill -9); s1, which missed everything after it
#     stopped, is promoted with its clock set back to 4 s after it stopped:
#     no segment ID twice over everything drawn, and every snowflake ID of
#     worker id 7 (the same) above every ID the old primary issued.
# With the worker committing with synchronous_commit = local and not checking
# the standby's flush, C goes on issuing and D hands out IDs twice.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SegmentTap;
use FailoverTap;
use Time::HiRes qw(usleep time);

my ($primary, $s1, $s2) = failover_cluster();
# after the set-up (whose commits would wait for s1 before it streamed), and
# in the primary's postgresql.auto.conf only: the standbys' copies have none
$primary->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (s1)'; SELECT pg_reload_conf()");
$primary->poll_query_until('postgres', "SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 's1'")
  or die 's1 did not become synchronous';
my %drawn = (seg => [], snow => []);

# --- A: synchronous, both standbys up ------------------------------------------
my @a = finish_drawing(\%drawn, 120, start_drawing($primary, 'a'));
is(scalar(grep { $_->{rc} != 0 } @a), 0, 'A: every client drew all its IDs with s1 synchronous')
  or diag join("\n", map { "$_->{name}: $_->{stderr}" } @a);
is(scalar @{ $drawn{seg} }, 6000, 'A: 6000 segment IDs');
is(scalar @{ $drawn{snow} }, 2000, 'A: 2000 snowflake IDs');
$primary->wait_for_catchup($_, 'flush') for ($s1, $s2);

# --- B: both ways at once --------------------------------------------------------
# leaf_id.synchronized_standby_slots = 's2' beside the synchronous s1, and s2
# stopped: each of the worker's commits waits for s1 inside PostgreSQL,
# then for slot s2, and times out after 3 s. The status view's since stays
# from the first of those waits: the synchronous wait of each later commit
# does not start it again.
$primary->safe_psql('postgres', "ALTER SYSTEM SET leaf_id.synchronized_standby_slots = 's2'; SELECT pg_reload_conf()");
# (taken before the stop: s2's walreceiver ends early in its shutdown)
my $t_b = time;
$s2->stop;
# (whatever the note says at the read: for a moment in each commit it is the
# synchronous standbys)
my $since_q = q{SELECT extract(epoch FROM standby_wait_since) FROM leaf_id_worker_status
  WHERE mode = 'segment'};
# two calls, each refused after a refill that timed out: at least two of the
# worker's commits waited for s2 (each job also locks, so commits, more)
my @b_since;
for my $i (1, 2)
{
	my $b = try_sql($primary, 'postgres', "SELECT leaf_segment_next('order') FROM generate_series(1, 2000)");
	is($b->{sqlstate}, '55P03', "B: call $i is refused with 55P03, s2 stopped") or diag $b->{err};
	push @b_since, $primary->safe_psql('postgres', $since_q);
}
note "B: the since after each call: @b_since (s2 began to stop at $t_b)";
ok($b_since[0] ne '' && $b_since[0] >= $t_b - 1,
	"B: the status view shows the worker's wait, begun after s2 began to stop");
is($b_since[1], $b_since[0], 'B: a later commit, which also waited for the synchronous s1, keeps the since');
# s1 stopped too (s2 still stopped and named): the worker's next commit
# waits for s1 with no end, and says so, though its commits have gone
# unconfirmed since the first wait for s2
$s1->stop;
$primary->poll_query_until('postgres', q{SELECT count(*) > 0 FROM pg_stat_activity
  WHERE backend_type = 'leaf_id segment worker' AND wait_event = 'SyncRep'})
  or die 'B: the segment worker did not wait for the synchronous standby';
my $b2 = try_sql($primary, 'postgres', "SELECT leaf_segment_next('order') FROM generate_series(1, 2000)");
like($b2->{err}, qr/55P03: .*the worker's commit waits for the synchronous standbys of synchronous_standby_names/,
	'B: with s1 stopped too, the refused caller is told that the worker waits for the synchronous standbys');
check_worker_activity($primary, qr/^leaf_id worker: its commit waits for the synchronous standbys .* \| SyncRep$/,
	'says that its commit waits for the synchronous standbys (SyncRep)',
	qr/the synchronous standbys of synchronous_standby_names \(it commits with synchronous_commit = on\)/, 'null',
	$b_since[1] - 0.001, $b_since[1] + 0.001, 'B');
$s1->start;
$s2->start;
$primary->safe_psql('postgres', "ALTER SYSTEM RESET leaf_id.synchronized_standby_slots; SELECT pg_reload_conf()");
$primary->wait_for_catchup($_, 'flush') for ($s1, $s2);
# (the next commit finds the setting emptied and clears the wait)
$primary->poll_query_until('postgres',
	q{SELECT standby_wait IS NULL FROM leaf_id_worker_status WHERE mode = 'segment'})
  or die 'B: the wait was still shown with both standbys back and the setting emptied';

# --- C: the synchronous standby stopped ------------------------------------------
# (a wait noted before this began has a since up to 2 s earlier: a worker's
# commit just before the stop that s1 then never confirmed)
my $t_stopping = time;
$s1->stop;
my $t_stop = time;
my $seg_before = scalar @{ $drawn{seg} };
# up to 10 s of drawing (without the wait, the clients draw it all)
my @c = finish_drawing(\%drawn, 120, start_drawing($primary, 'c', pause => 0.2, statements => 50));
for my $c (@c)
{
	like($c->{stderr}, qr/ERROR:\s+55P03: /, "C: $c->{name} is refused with 55P03")
	  or diag "rc $c->{rc}: $c->{stderr}";
}
my $seg_after_stop = scalar(@{ $drawn{seg} }) - $seg_before;
note "C: segment IDs drawn after s1 stopped: $seg_after_stop";
# the tag's current and next segment (2 x 1000), each client's last
# statement of 100 partly in it
cmp_ok($seg_after_stop, '<=', 2000 + 300, 'C: at most the two segments the primary held were handed out after the stop');
my $t0 = time;
my $r = try_sql($primary, 'postgres', "SELECT leaf_segment_next('order') FROM generate_series(1, 2000)");
my $waited = time - $t0;
is($r->{sqlstate}, '55P03', 'C: a new call is refused with 55P03') or diag $r->{err};
like($r->{err}, qr/the worker's commit waits for the synchronous standbys of synchronous_standby_names/,
	'C: the message says that the worker waits for the synchronous standbys');
note sprintf('C: the new call was refused after %.2f s: %s', $waited, $r->{err});
cmp_ok($waited, '<', 4.5, 'C: it waited at most about leaf_id.refill_timeout (3 s)');
check_worker_activity($primary, qr/^leaf_id worker: its commit waits for the synchronous standbys .* \| SyncRep$/, 'says that its commit waits for the synchronous standbys (SyncRep)',
	qr/the synchronous standbys of synchronous_standby_names \(it commits with synchronous_commit = on\)/, 'null',
	$t_stopping - 2, $t0);

# --- D: the primary dies, s1 is promoted -------------------------------------
failover_to(\%drawn, $primary, $s1, $t_stop);

$s1->stop;
$s2->stop;
done_testing();
