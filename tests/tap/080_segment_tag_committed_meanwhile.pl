# A tag inserted while the worker looks it up: a call
# made after the INSERT committed must get IDs, not 42704 ("does not exist")
# or a 55000 that blames a trigger. leaf_id.test_fault_point =
# slow_tag_lookup makes a refill that finds no row pause 1.5 s before it
# looks again and 3 s before it answers 42704, so the commit can be put in
# either window:
#  A. the INSERT commits after the refill's update found no row and before
#     its second look: the refill finds the row and must reserve (it failed
#     with 55000, "the row could not be locked by an update", blaming a
#     trigger, and was retried with backoff);
#  B. the INSERT commits after the second look, and a new call comes after
#     the commit and joins the waiting slot: the answer 42704 was read
#     before that call began, so it must ask again (it got 42704).
# The call made before the commit (B) may get 42704: the tag did not exist
# for it.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;
use Time::HiRes qw(usleep time);

my $node = leaf_node('meanwhile', "leaf_id.test_fault_point = 'slow_tag_lookup'\n");
# a single unknown tag is looked up by its refill (two or more at once by
# one read of leaf_alloc, which has no such window)

sub call_in_background
{
	my ($name, $tag) = @_;
	return SegmentTap::start_client($node, 'postgres', $name,
		"SET leaf_id.refill_timeout = 15000;\nSELECT leaf_segment_next('$tag');\n");
}

# --- A: committed between the refill's update and its second look -----------
my $offset = -s $node->logfile;
my $writer = $node->background_psql('postgres');
$writer->query_safe("BEGIN; INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('a_tag', 10, 500)");
my $t0 = time;
my $a = call_in_background('a_call', 'a_tag');
ok($node->wait_for_log(qr/slow_tag_lookup: pausing 1500 ms after the update found no row/),
	'A: the refill found no row and pauses');
$writer->query_safe('COMMIT');
note sprintf('A: committed %.2f s after the call', time - $t0);
SegmentTap::finish_clients(30, $a);
is($a->{rc}, 0, 'A: the call gets an ID') or diag $a->{stderr};
like(slurp_file($a->{out}), qr/^500$/m, 'A: the tag\'s first ID');
unlike(slurp_file($node->logfile, $offset), qr/could not record the reservation of tag "a_tag"/,
	'A: the refill found the row at its second look (no failed refill blaming a trigger, retried with backoff)');

# --- B: committed after the second look; a call after the commit joins ---------
$offset = -s $node->logfile;
$writer->query_safe("BEGIN; INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('b_tag', 10, 700)");
my $early = call_in_background('b_early', 'b_tag');
ok($node->wait_for_log(qr/slow_tag_lookup: pausing 3000 ms after the row was not found/, $offset),
	'B: the refill found no row twice and pauses before it answers');
my $t_pause = time;
$writer->query_safe('COMMIT');
my $late = call_in_background('b_late', 'b_tag');
# the late call waits on the slot before the worker answers (3 s after the
# pause began): it joined the first refill, whose answer was read before
my $joined = '';
while ($joined eq '' && time - $t_pause < 10)
{
	$joined = $node->safe_psql('postgres',
		"SELECT 1 FROM pg_stat_activity WHERE application_name = 'b_late' AND state = 'active' AND query LIKE '%b_tag%'");
}
my $joined_after = time - $t_pause;
note sprintf('B: the late call was waiting %.2f s after the pause began', $joined_after);
ok($joined ne '' && $joined_after < 2.5, 'B: the late call waits on the slot while the worker still holds its answer');
SegmentTap::finish_clients(30, $early, $late);
is($late->{rc}, 0, 'B: the call made after the commit gets an ID') or diag $late->{stderr};
like(slurp_file($late->{out}), qr/^7\d\d$/m, 'B: one of the tag\'s IDs');
note "B: the call made before the commit: rc $early->{rc}, " . slurp_file($early->{out}) . $early->{stderr};
$writer->quit;

$node->stop;
done_testing();
