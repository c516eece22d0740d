# A database owner cannot stop leaf_id in her database with a timeout
# (issue 27, item 5). olga owns database od, where a superuser installed
# leaf_id; she sets each timeout a database setting can give the workers'
# sessions to 1 ms (ALTER DATABASE od SET ...; transaction_timeout on
# PostgreSQL 17 and later), and the workers start again under it. Both modes
# must go on (a new tag's refills, snowflake IDs), the workers must not die
# in a loop (the same processes two seconds later) and the log must hold no
# FATAL of theirs. (Her own sessions are subject to her setting: the client
# here overrides it with PGOPTIONS, as an application would.) Nor can she
# decide how long the workers wait for the standbys (leaf_id.refill_timeout
# is a user setting; the workers' wait is leaf_id.standby_confirm_timeout).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;

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
	$node->safe_psql('od', "SET ROLE olga; ALTER DATABASE od RESET $setting");
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
	$r = try_sql($node, 'od', "SELECT leaf_segment_next('held')", timeout => 60);
	is($r->{sqlstate}, '55P03', 'leaf_id.refill_timeout = 1ms for od: the unconfirmed refill is refused with 55P03')
	  or diag $r->{err};
	like($r->{err}, qr/standby slot "lagger" .* within leaf_id\.standby_confirm_timeout \(1500 ms\)/,
		"the worker waited leaf_id.standby_confirm_timeout of postgresql.conf (1500 ms), not the database's 1 ms");
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
