# A snowflake call that waits out a clock rollback (up to twice
# leaf_id.max_backward_ms) can be cancelled at once: the wait checks for
# interrupts instead of sleeping deaf (pg_usleep). The wait here is 2 s; the
# cancel comes about 0.3 s into it and must end the call within 0.5 s of the
# cancel. Both are timed on the server (pg_stat_activity's query_start and
# state_change, the cancel's clock_timestamp()), so the psql processes the
# test starts on a busy machine do not count.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap qw(try_sql wait_until session session_query);
use SnowflakeTap;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = snowflake_node('sfwait', "leaf_id.max_backward_ms = 1000\n");
like($node->safe_psql('postgres', 'SELECT leaf_snowflake_next()'), qr/^\d+$/, 'snowflake works');

my $waiter = session($node, 'postgres');
# the last issued millisecond is now: then the clock goes 1 s back
session_query($waiter,
	"SET application_name = 'waiter'; SELECT leaf_snowflake_next(); SET leaf_id.test_clock_offset_ms = -1000;");
# a caller whose clock is 1 s behind the last issued millisecond waits 2 s
$waiter->query_until(qr/started/, "\\echo started\nSELECT leaf_snowflake_next();\n");
ok( wait_until(
		10,
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'waiter' AND state = 'active'"
			) eq '1';
		}),
	'the caller is in its rollback wait');
usleep(300_000);
# the cancel, and how far into the call it came (seconds)
my $into = $node->safe_psql('postgres',
	"SELECT extract(epoch FROM clock_timestamp() - query_start), pg_cancel_backend(pid) "
	  . "FROM pg_stat_activity WHERE application_name = 'waiter'");
($into) = split /\|/, $into;
ok( wait_until(
		10,
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'waiter' AND state = 'active'"
			) eq '0';
		}),
	'the call ended');
# how long the call took, on the server
my $took = $node->safe_psql('postgres',
	"SELECT extract(epoch FROM state_change - query_start) FROM pg_stat_activity WHERE application_name = 'waiter'");
like($into, qr/^\d/, 'premise: the cancel found the call');
cmp_ok($took, '>', $into, 'premise: the call was still running at the cancel');
cmp_ok($into, '<', 1.5, sprintf('premise: the cancel came %.2f s into the 2 s wait', $into));
cmp_ok($took - $into, '<', 0.5,
	sprintf('the cancel ended the wait early: the call took %.2f s, %.2f s after the cancel', $took, $took - $into));
my (undef, $err, $state) = session_query($waiter, 'SELECT 1;');
$waiter->quit;
like($err . ($node->log_contains(qr/canceling statement due to user request/) ? 'cancelled' : ''),
	qr/cancel/, 'it was cancelled (57014)');

done_testing();
