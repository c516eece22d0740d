# A snowflake call whose database's shared slot is given to another database
# and back while the call runs (an "ABA" race) must not hand out the
# other database's ID. One database slot (leaf_id.max_databases = 1), two
# databases with worker ids 1 and 2, workers that leave after 300 ms idle.
# A call of database a pauses before its take from the generator (the slot
# is then given to b, whose worker claims id 2 and issues) and after it (the
# slot is then given back to a, whose worker claims id 1 again): the take was
# from b's generator, and the call's check after it must see the slot's
# assignment count move and take again, so that the ID it returns has worker
# id 1. (Comparing the slot's database OID, as before the fix, passes: a
# again.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;
use Time::HiRes qw(usleep time);

my $node = leaf_node('slot_aba', qq{
leaf_id.max_databases = 1
leaf_id.worker_idle_timeout = 300
leaf_id.refill_timeout = 15000
log_min_messages = log
});
for my $db ('a', 'b')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql('postgres', "ALTER DATABASE $db SET leaf_id.worker_id = " . ($db eq 'a' ? 1 : 2));
	$node->safe_psql($db, 'CREATE EXTENSION leaf_id');
}
# (postgres' own extension leaves the slot once its workers are idle)

sub worker_id_of { my ($db) = @_;
	my $r = try_sql($node, $db, 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');
	return $r->{ret} == 0 ? $r->{out} : "error: $r->{err}";
}

# the slot goes from one database to the other once the first one's workers left
sub wait_for_id
{
	my ($db, $want) = @_;
	my $got = '';
	my $deadline = time + 20;
	while (time < $deadline)
	{
		$got = worker_id_of($db);
		return $got if $got eq $want;
		usleep(200_000);
	}
	return $got;
}

is(wait_for_id('a', '1'), '1', 'premise: a issues with worker id 1');
my $offset = -s $node->logfile;
my $call = SegmentTap::start_client($node, 'a', 'paused',
	"SET leaf_id.test_snowflake_take_pause_ms = 8000;\n"
	  . "SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id;\n");
ok($node->wait_for_log(qr/pausing 8000 ms before the take/, $offset), "a's call pauses before its take");
# meanwhile b takes the slot (a's workers leave after 300 ms idle) and
# keeps it, drawing for about 9 s: at the end of the pause the slot is b's
is(wait_for_id('b', '2'), '2', 'b gets the slot and issues with worker id 2 while the call pauses');
my $b_load = SegmentTap::start_client($node, 'b', 'b_load',
	"DO \$\$ BEGIN FOR i IN 1..180 LOOP PERFORM leaf_snowflake_next(); PERFORM pg_sleep(0.05); END LOOP; END \$\$;\n");
ok($node->wait_for_log(qr/pausing 8000 ms after the take/, $offset), "a's call took (from b's generator) and pauses again");
# the premises, at the second pause: the take was from b's generator (the
# slot is b's: b's snowflake worker runs, a's does not)
my $workers_sql = q{SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_stat_activity
WHERE backend_type = 'leaf_id snowflake worker'};
is($node->safe_psql('postgres', $workers_sql), 'b', "premise: at the take the slot was b's (only b's snowflake worker runs)");
SegmentTap::finish_clients(30, $b_load);
is($b_load->{rc}, 0, "b's draws end") or diag $b_load->{stderr};
# ... and a gets it back (b's workers leave)
is(wait_for_id('a', '1'), '1', 'a gets the slot back (worker id 1) while the call pauses');
is($node->safe_psql('postgres', $workers_sql), 'a', "premise: the slot is a's again (only a's snowflake worker runs)");
is($node->safe_psql('a', q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'paused' AND state = 'active'}),
	'1', 'premise: ... while the call still pauses after its take (its check comes after this)');
unlike(slurp_file($node->logfile, $offset), qr/pausing 8000 ms before the take.*pausing 8000 ms before the take/s,
	'premise: the call took once so far (it did not loop back to a second take yet)');
SegmentTap::finish_clients(60, $call);
is($call->{rc}, 0, "a's paused call ends") or diag $call->{stderr};
like(slurp_file($call->{out}), qr/^1$/m,
	"its ID has a's worker id 1, not b's 2 (taken while the slot was b's)")
  or diag slurp_file($call->{out});

$node->stop;
done_testing();
