# A database owner cannot stop leaf_id in her database with a timeout.
# olga owns database od, where a superuser installed
# leaf_id; she sets each timeout a database setting can give the workers'
# sessions to 1 ms (ALTER DATABASE od SET ...; transaction_timeout on
# PostgreSQL 17 and later), and the workers start again under it. Both modes
# must go on (a new tag's refills, snowflake IDs), the workers must not die
# in a loop (the same processes two seconds later) and the log must hold no
# FATAL of theirs. (Her own sessions are subject to her setting: the client
# here overrides it with PGOPTIONS, as an application would.) Nor can she
# decide how long the workers wait for the standbys (leaf_id.refill_timeout
# is a user setting; the workers' wait is leaf_id.standby_confirm_timeout).
#
# Which of these settings can reach a worker at all:
#  - statement_timeout, idle_in_transaction_session_timeout and
#    idle_session_timeout cannot: PostgreSQL arms their timers only in
#    postgres.c's client loop (start_xact_command for the statement, the
#    wait for the client's next command for the two idle ones), never around
#    a background worker's SPI calls. Their rounds below cannot fail on 15
#    to 18, forced off or not (a build without them forced passed this
#    test); they stay in case a server ever arms them elsewhere.
#  - lock_timeout does: ProcSleep arms it for any lock wait. Its round makes
#    the segment worker's refill wait 1.5 s on the tag's row lock, held by
#    another session, and checks that the refill waited and succeeded
#    instead of failing after 1 ms (the worker forces its own 5 s).
#  - transaction_timeout (17 and later) does: StartTransaction arms it for
#    every transaction (with it not forced, 1 ms ended every job in FATAL).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;
use Time::HiRes qw(time usleep);

my $node = leaf_node('timeouts', "leaf_id.tag_resync_interval = 1\nwal_level = replica\nmax_wal_senders = 4\nmax_replication_slots = 4\n");
$node->safe_psql('postgres', q{
CREATE ROLE olga LOGIN;
CREATE DATABASE od OWNER olga;
});
$node->safe_psql('od', 'CREATE EXTENSION leaf_id');
my @settings = qw(statement_timeout lock_timeout idle_in_transaction_session_timeout idle_session_timeout);
push @settings, 'transaction_timeout'
  if $node->safe_psql('postgres', 'SHOW server_version_num') >= 170000;
local $ENV{PGOPTIONS} = join ' ', map { "-c $_=0" } @settings;
my $workers = q{SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
  WHERE datname = 'od' AND backend_type IN ('leaf_id segment worker', 'leaf_id snowflake worker')};

my $round = 0;
for my $setting (@settings)
{
	$round++;
	my $r = try_sql($node, 'od', "SET ROLE olga; ALTER DATABASE od SET $setting = '1ms'");
	is($r->{ret}, 0, "$setting: the database owner sets it to 1 ms for od") or diag $r->{err};
	my $offset = -s $node->logfile;
	# the workers start again, under the database's setting
	$node->safe_psql('od', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	  WHERE datname = 'od' AND backend_type LIKE 'leaf_id % worker'");
	$node->safe_psql('od', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('t$round', 10)");
	$r = try_sql($node, 'od', "SELECT count(DISTINCT leaf_segment_next('t$round')) FROM generate_series(1, 300);
	  SELECT count(DISTINCT leaf_snowflake_next()) FROM generate_series(1, 300)", timeout => 60);
	is($r->{out}, "300\n300", "$setting = 1ms: segment refills and snowflake IDs go on") or diag $r->{err};
	my $before = $node->safe_psql('od', $workers);
	sleep 2;
	$r = try_sql($node, 'od', "SELECT count(DISTINCT leaf_segment_next('t$round')) FROM generate_series(1, 100)");
	is($r->{out}, '100', "$setting = 1ms: still, two seconds later") or diag $r->{err};
	my $after = $node->safe_psql('od', $workers);
	ok($before ne '' && $before eq $after, "$setting = 1ms: the same worker processes ($before, then $after)");
	my $log = slurp_file($node->logfile, $offset);
	# (the terminate above ends the old workers with a FATAL of its own)
	my @fatal = grep { /FATAL/ && !/due to administrator command/ } split /\n/, $log;
	is(scalar(@fatal), 0, "$setting = 1ms: no FATAL in the log") or diag join "\n", @fatal;
	lock_wait_round() if $setting eq 'lock_timeout';
	$node->safe_psql('od', "SET ROLE olga; ALTER DATABASE od RESET $setting");
}

# lock_timeout = 1 ms for od: the refills above never wait for a lock, so
# they cannot tell. Here another session holds a new tag's leaf_alloc row
# (FOR UPDATE) for 1.5 s while a call waits for the tag's first refill: with
# the worker's own lock_timeout (5 s) the refill waits for the row and
# succeeds once it is released; with the database's 1 ms it would fail with
# "canceling statement due to lock timeout" (and be retried until the row
# is free, so the call's ID alone would not tell).
sub lock_wait_round
{
	my $hold = 1.5;
	$node->safe_psql('od', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('locked', 10)");
	my $offset = -s $node->logfile;
	my $holder = $node->background_psql('od');
	$holder->query_safe("BEGIN; SELECT 1 FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'locked' FOR UPDATE");
	my $held_at = time;
	my $call = start_client($node, 'od', 'lock_wait_call',
		"SET leaf_id.refill_timeout = 20000;\nSELECT leaf_segment_next('locked');\n", timeout => 60);
	# premise: the segment worker's refill waits for the row (a Lock wait;
	# seen with the database's 1 ms too, between its tries)
	my $seen = wait_until($hold - 0.3, sub {
		$node->safe_psql('od', q{SELECT count(*) FROM pg_stat_activity
		  WHERE datname = 'od' AND backend_type = 'leaf_id segment worker' AND wait_event_type = 'Lock'}) eq '1';
	});
	ok($seen, 'lock_timeout = 1ms, premise: the segment worker waits for the held leaf_alloc row');
	my $left = $held_at + $hold - time;
	usleep(int($left * 1_000_000)) if $left > 0;
	# the call has not returned while the row was held
	eval { $call->{h}->pump_nb };
	ok($call->{h}->pumpable, "lock_timeout = 1ms, premise: the call still waits after the row was held $hold s");
	$holder->query_safe('COMMIT');
	$holder->quit;
	finish_clients(30, $call);
	my @ids = client_ids($call);
	ok($call->{rc} == 0 && @ids == 1, 'lock_timeout = 1ms: the refill succeeds once the row is released (the call gets an ID)')
	  or diag "exit $call->{rc}: $call->{stderr}";
	my @failed = grep { /refill of tag "locked" failed/ } split /\n/, slurp_file($node->logfile, $offset);
	is(scalar(@failed), 0, "lock_timeout = 1ms: the worker's refill waited for the row lock, it did not fail on the database's 1 ms")
	  or diag join "\n", @failed;
	return;
}

# session_authorization: the workers connect as the bootstrap superuser, who
# may become any role, so the database's setting made them olga's (every job
# then failed: permission denied for pg_namespace); they must stay the
# bootstrap superuser (the client overrides it for itself)
my $boot = $node->safe_psql('postgres', 'SELECT rolname FROM pg_roles WHERE oid = 10');
my $r = try_sql($node, 'od', "SET ROLE olga; ALTER DATABASE od SET session_authorization = 'olga'");
is($r->{ret}, 0, 'session_authorization: the database owner sets it to herself for od') or diag $r->{err};
{
	local $ENV{PGOPTIONS} = "$ENV{PGOPTIONS} -c session_authorization=$boot";
	$node->safe_psql('od', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	  WHERE datname = 'od' AND backend_type LIKE 'leaf_id % worker'");
	# who the refills run as: a trigger on leaf_alloc notes it
	$node->safe_psql('od', q{
CREATE TABLE public.refill_users (who text);
CREATE FUNCTION public.note_refill_user() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN INSERT INTO public.refill_users VALUES (session_user || '/' || current_user); RETURN NEW; END $$;
CREATE TRIGGER note_refill_user BEFORE UPDATE ON leaf_id_catalog.leaf_alloc FOR EACH ROW EXECUTE FUNCTION public.note_refill_user();
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('sa', 10)});
	$r = try_sql($node, 'od', "SELECT count(DISTINCT leaf_segment_next('sa')) FROM generate_series(1, 300);
	  SELECT count(DISTINCT leaf_snowflake_next()) FROM generate_series(1, 300)", timeout => 60);
	is($r->{out}, "300\n300", 'session_authorization = olga: segment refills and snowflake IDs go on') or diag $r->{err};
	is($node->safe_psql('od', "SELECT string_agg(DISTINCT who, ',') FROM public.refill_users"),
		"$boot/$boot", "session_authorization = olga: the segment worker's refills run as $boot (session and current user)");
	$node->safe_psql('od', 'ALTER DATABASE od RESET session_authorization');
}

# leaf_id.refill_timeout is a user setting, which she may set for od too;
# the workers' wait for the standbys of leaf_id.synchronized_standby_slots
# is bounded by leaf_id.standby_confirm_timeout (reload only), not by it
# (1 ms there made every commit unconfirmed and its range thrown away). A
# slot whose standby never comes holds every commit up.
$node->safe_psql('postgres', q{
SELECT pg_create_physical_replication_slot('lagger', true);
ALTER SYSTEM SET leaf_id.synchronized_standby_slots = 'lagger';
ALTER SYSTEM SET leaf_id.standby_confirm_timeout = 1500;
SELECT pg_reload_conf()});
$r = try_sql($node, 'od', "SET ROLE olga; ALTER DATABASE od SET leaf_id.refill_timeout = 1");
is($r->{ret}, 0, 'leaf_id.refill_timeout: the database owner sets it to 1 ms for od') or diag $r->{err};
{
	local $ENV{PGOPTIONS} = "$ENV{PGOPTIONS} -c leaf_id.refill_timeout=8000";
	$node->safe_psql('od', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	  WHERE datname = 'od' AND backend_type LIKE 'leaf_id % worker'");
	$node->safe_psql('od', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('held', 10)");
	my $t0 = time;
	$r = try_sql($node, 'od', "SELECT leaf_segment_next('held')", timeout => 60);
	my $elapsed = time - $t0;
	is($r->{sqlstate}, '55P03', 'leaf_id.refill_timeout = 1ms for od: the unconfirmed refill is refused with 55P03')
	  or diag $r->{err};
	like($r->{err}, qr/standby slot "lagger" .* within leaf_id\.standby_confirm_timeout \(1500 ms\)/,
		'the refusal names leaf_id.standby_confirm_timeout of postgresql.conf (1500 ms)');
	# the message names the setting whatever the wait was: the wait is
	# timed, at least the refill's 1.5 s (the reserve's try may add
	# another; the call's own refill_timeout, 8 s, bounds it above)
	ok($elapsed >= 1.5 && $elapsed < 8,
		sprintf("the worker waited leaf_id.standby_confirm_timeout (1500 ms), not the database's 1 ms: the call took %.3f s", $elapsed));
	# the wait that timed out stays shown (its commit is still not on the
	# standby), until a later commit of the worker is confirmed
	is($node->safe_psql('od', q{SELECT standby_wait LIKE 'standby slot "lagger" (%' AND standby_wait_since < now()
	  AND standby_lag_bytes > 0 FROM leaf_id_worker_status WHERE mode = 'segment'}),
		't', 'leaf_id_worker_status shows the unconfirmed wait for slot lagger, since when and its lag');
}
$node->safe_psql('postgres', q{
ALTER SYSTEM RESET leaf_id.synchronized_standby_slots;
ALTER SYSTEM RESET leaf_id.standby_confirm_timeout;
SELECT pg_reload_conf()});
# (the worker takes the reload at its next wake-up: a refill before it may
# still wait for the slot)
for (1 .. 10)
{
	$r = try_sql($node, 'od', "SET leaf_id.refill_timeout = 8000; SELECT leaf_segment_next('held') > 0");
	last if $r->{out} eq 't';
	sleep 1;
}
is($r->{out}, 't', 'the setting emptied: the tag issues') or diag $r->{err};
is($node->safe_psql('od', "SELECT count(*) FROM leaf_id_worker_status WHERE standby_wait IS NOT NULL"),
	'0', 'and leaf_id_worker_status shows no wait any more');
$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('lagger')");

$node->stop;
done_testing();
