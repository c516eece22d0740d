# Failover with asynchronous standbys: with
# leaf_id.synchronized_standby_slots, what a worker commits (a refill, a
# snowflake lease, a claim) is used only once the standbys of the named
# physical slots have flushed it. A primary, two streaming standbys with
# slots s1 and s2, asynchronous (no synchronous_standby_names):
#  A. rule '*': segment and snowflake IDs from several sessions;
#  B. rule 's1': s2 stopped holds nothing up (only named slots count);
#  C. rule '*', s1 stopped: once their cached segments are used, segment
#     callers are refused with 55P03 naming slot s1, after at most about
#     leaf_id.refill_timeout; snowflake callers once the lease ends; the
#     worker's WARNING is in the log; leaf_id_worker_status shows the wait
#     since s1 stopped, not since the last commit s2 lagged behind;
#  D. the primary killed (kill -9); s1, which missed everything after it
#     stopped, is promoted: no segment ID twice over everything drawn, and
#     with the same worker id (node name and worker id from the copied
#     configuration) and its clock set back to 4 s after s1 stopped, every
#     snowflake ID it issues is above every ID the primary issued (its
#     high-water mark is one s1 confirmed).
# Without the rule (the wait taken out) D hands out segment IDs twice, and
# snowflake IDs below the old primary's.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SegmentTap;
use FailoverTap;
use Time::HiRes qw(usleep time);

my ($primary, $s1, $s2) = failover_cluster("leaf_id.synchronized_standby_slots = '*'\n");
my %drawn = (seg => [], snow => []);

# --- A: the rule with both standbys up ---------------------------------------
my @a = finish_drawing(\%drawn, 120, start_drawing($primary, 'a'));
is(scalar(grep { $_->{rc} != 0 } @a), 0, 'A: every client drew all its IDs with both standbys confirming')
  or diag join("\n", map { "$_->{name}: $_->{stderr}" } @a);
is(scalar @{ $drawn{seg} }, 6000, 'A: 6000 segment IDs');
is(scalar @{ $drawn{snow} }, 2000, 'A: 2000 snowflake IDs');

# --- B: only the named slot counts ---------------------------------------------
$primary->safe_psql('postgres', "ALTER SYSTEM SET leaf_id.synchronized_standby_slots = 's1'; SELECT pg_reload_conf()");
$s2->stop;
# 4 s of drawing: more than two segments per client and more than the
# lease (leaf_id.lease_ahead, 3 s)
my @b = finish_drawing(\%drawn, 120, start_drawing($primary, 'b', pause => 0.2, statements => 20, segment_clients => 2));
is(scalar(grep { $_->{rc} != 0 } @b), 0, "B: rule 's1': with s2 stopped every client drew all its IDs")
  or diag join("\n", map { "$_->{name}: $_->{stderr}" } @b);
is(scalar @{ $drawn{snow} }, 4000, 'B: the snowflake client drew its 2000 IDs over more than a lease');
$s2->start;
$primary->safe_psql('postgres', "ALTER SYSTEM SET leaf_id.synchronized_standby_slots = '*'; SELECT pg_reload_conf()");
$primary->wait_for_catchup($_, 'flush') for ($s1, $s2);

# --- C: a named standby stopped ------------------------------------------------
# (a wait noted before this began has a since up to 2 s earlier: a worker's
# commit just before the stop that s1 then never confirmed)
my $t_stopping = time;
$s1->stop;
# s1 has nothing committed after this instant (it may have received WAL
# while it shut down)
my $t_stop = time;
# up to 10 s of drawing (the wait taken out, the clients draw it all)
my @c = finish_drawing(\%drawn, 120, start_drawing($primary, 'c', pause => 0.2, statements => 50));
my $seg_refused = 0;
for my $c (@c)
{
	my $snow = $c->{name} =~ /_snow$/;
	like($c->{stderr}, qr/ERROR:\s+55P03: .*standby slot "s1"/,
		"C: $c->{name} is refused with 55P03 naming standby slot s1")
	  or diag "rc $c->{rc}: $c->{stderr}";
}
my $t0 = time;
my $r = try_sql($primary, 'postgres', "SELECT leaf_segment_next('order') FROM generate_series(1, 2000)");
my $waited = time - $t0;
is($r->{sqlstate}, '55P03', 'C: a new call is refused with 55P03') or diag $r->{err};
like($r->{err}, qr/standby slot "s1" \((flushed up to [0-9A-F]+\/[0-9A-F]+, \d+ bytes behind|no standby has reported a position to it)\)/,
	'C: the message says how far behind the slot is');
note sprintf('C: the new call was refused after %.2f s', $waited);
cmp_ok($waited, '<', 4.5, 'C: it waited at most about leaf_id.refill_timeout (3 s)');
ok($primary->log_contains(qr/WARNING: .*the worker's commit at [0-9A-F]+\/[0-9A-F]+ waits for standby slot "s1"/),
	"C: the server log has the worker's warning");
check_worker_activity($primary, qr/^leaf_id worker: its commit waits for standby slot "s1" \(/, 'names the slot its commit waits for',
	qr/(standby slot "s2" \([^)]*\), )?standby slot "s1" \(flushed up to [0-9A-F]+\/[0-9A-F]+, \d+ bytes behind\)(, standby slot "s2" \([^)]*\))?/, 'bytes',
	$t_stopping - 2, $t0);

# --- D: the primary dies, s1 is promoted -------------------------------------
failover_to(\%drawn, $primary, $s1, $t_stop);

$s1->stop;
$s2->stop;
done_testing();
