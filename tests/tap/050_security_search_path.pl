# Security: the background worker runs as a superuser. An unprivileged role
# that can create objects in a schema on the search_path must not get code
# run by it: not through an overload that beats a pg_catalog function by an
# exact type match (quote_ident(name)), and not through a search_path that
# puts its schema before pg_catalog (ALTER DATABASE ... SET search_path, or
# ALTER ROLE ... SET for the worker's role), with overloads of now() and of
# the = operator. After segment and snowflake traffic the role must not be
# superuser and none of its planted functions may have run.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;

my $node = leaf_node('security', "leaf_id.tag_resync_interval = 1\n");

# mallory: may log in and create objects in public, nothing more. Each planted
# function records that it ran, then tries to make mallory superuser.
$node->safe_psql(
	'postgres', q{
CREATE ROLE mallory LOGIN;
GRANT CREATE ON SCHEMA public TO mallory;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('sec_a', 10), ('sec_b', 10);
});

my $plant = q{
SET ROLE mallory;
CREATE TABLE public.pwned (what text);
GRANT INSERT ON public.pwned TO PUBLIC;
CREATE FUNCTION public.pwn(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.pwned VALUES (what);
  EXECUTE 'ALTER ROLE mallory SUPERUSER';
EXCEPTION WHEN OTHERS THEN
  NULL;  -- keep the victim's statement going
END $$;
-- an exact type match (name) beats pg_catalog.quote_ident(text)
CREATE FUNCTION public.quote_ident(name) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pwn('quote_ident'); RETURN pg_catalog.quote_ident($1::text); END $$;
-- win only when public comes before pg_catalog in the search_path
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pwn('now'); RETURN pg_catalog.now(); END $$;
CREATE FUNCTION public.evil_texteq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pwn('text ='); RETURN pg_catalog.texteq($1, $2); END $$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.evil_texteq);
CREATE FUNCTION public.evil_int4eq(integer, integer) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pwn('int ='); RETURN pg_catalog.int4eq($1, $2); END $$;
CREATE OPERATOR public.= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.evil_int4eq);
CREATE FUNCTION public.evil_greatest_helper(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pwn('bigint ='); RETURN pg_catalog.int8eq($1, $2); END $$;
CREATE OPERATOR public.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.evil_greatest_helper);
RESET ROLE;
};
my $r = try_sql($node, 'postgres', $plant);
is($r->{ret}, 0, 'mallory planted her functions and operators') or diag $r->{err};

# The planted objects work as a trap: a session that resolves them in
# public does run them (the test's premise).
$r = try_sql($node, 'postgres',
	"SET search_path = public, pg_catalog; SELECT now() IS NOT NULL;");
is($node->safe_psql('postgres', 'SELECT count(*) > 0 FROM public.pwned'),
	't', 'premise: the trap fires for a session that resolves names in public');
$node->safe_psql('postgres', 'TRUNCATE public.pwned; ALTER ROLE mallory NOSUPERUSER');

sub traffic
{
	my ($round) = @_;
	my $r = try_sql(
		$node, 'postgres', qq{
SELECT count(DISTINCT leaf_segment_next('sec_a')) FROM generate_series(1, 200);
SELECT count(DISTINCT leaf_segment_next('sec_b')) FROM generate_series(1, 200);
SELECT count(DISTINCT leaf_snowflake_next()) FROM generate_series(1, 200);
});
	is($r->{ret}, 0, "$round: segment and snowflake traffic works")
	  or diag $r->{err};
	is($r->{out}, "200\n200\n200", "$round: every ID distinct");
	# the worker also resyncs tags (every 1 s) and renews the lease (every 1 s)
	sleep 3;
	is( $node->safe_psql('postgres',
			"SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"),
		'f',
		"$round: mallory is not superuser");
	is( $node->safe_psql('postgres',
			'SELECT coalesce(string_agg(DISTINCT what, \', \'), \'\') FROM public.pwned'),
		'',
		"$round: none of mallory's functions ran in the worker");
}

# 1. the database's own default search_path ("$user", public)
traffic('default search_path');

# 2. an operator puts public first, for the database and for the role the
# worker connects as; then the worker restarts (it reads settings at start)
$node->safe_psql(
	'postgres', q{
ALTER DATABASE postgres SET search_path = public, pg_catalog;
ALTER ROLE postgres SET search_path = public, pg_catalog;
ALTER DATABASE postgres SET default_transaction_read_only = on;
ALTER DATABASE postgres SET default_transaction_isolation = 'serializable';
ALTER DATABASE postgres SET statement_timeout = '1ms';
ALTER DATABASE postgres SET session_replication_role = 'replica';
});
# The test's own sessions override those settings at connection start
# (options from the client outrank the database's and the role's). Reset
# by SET statements instead, the first of them ran under the 1 ms
# statement_timeout: on a busy machine 20 sessions in 10,000 had one
# canceled, 13 of them "due to user request".
$ENV{PGOPTIONS} = '-c default_transaction_read_only=off -c statement_timeout=0 '
  . '-c session_replication_role=origin -c search_path=pg_catalog';
is($node->safe_psql('postgres',
		'SELECT current_setting(\'statement_timeout\') || \' \' || current_setting(\'search_path\')'),
	'0 pg_catalog',
	'premise: the test\'s sessions are not under the planted settings');
$node->safe_psql('postgres',
	"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type LIKE 'leaf_id % worker'");
$node->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('sec_c', 10)");
my $r2 = try_sql(
	$node, 'postgres', qq{
SELECT count(DISTINCT public.leaf_segment_next('sec_c')) FROM generate_series(1, 200);
SELECT count(DISTINCT public.leaf_segment_next('sec_a')) FROM generate_series(1, 200);
SELECT count(DISTINCT public.leaf_snowflake_next()) FROM generate_series(1, 200);
});
is($r2->{ret}, 0, 'planted search_path and settings: traffic works')
  or diag $r2->{err};
is($r2->{out}, "200\n200\n200", 'planted search_path: every ID distinct');
sleep 3;
is( $node->safe_psql('postgres',
		"SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"),
	'f',
	'planted search_path: mallory is not superuser');
is( $node->safe_psql('postgres',
		"SELECT coalesce(string_agg(DISTINCT what, ', '), '') FROM public.pwned"),
	'',
	"planted search_path: none of mallory's functions ran in the worker");

done_testing();
