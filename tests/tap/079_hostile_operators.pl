# Security: a database owner's operators
# never run in leaf_id's install and update scripts. Extension scripts run
# with search_path = the extension's schema (public, which a database owner
# owns from PostgreSQL 15 on), pg_catalog implicitly first; an expression
# comparing two different types (oid = integer, oid = regclass, regclass =
# oid) has no exact operator in pg_catalog, so an exact one planted in
# public wins over pg_catalog's through an implicit cast, and runs as the
# superuser who installs or updates.
#
# mallory (not a superuser) owns a template database whose public holds the
# operators =, <>, <, >, <=, >=, ~~ (LIKE), ~~* (ILIKE) and || for every
# ordered pair of the catalog's usual types, the same type twice included
# (regclass, regtype or varchar have no operators of their own, and a
# comparison of two of them would pick hers), each calling a function
# that, run as a superuser, counts the run and makes her a superuser. Each
# database made from it (owned by her) then gets a fresh install of
# leaf_id, or an install of an older version and ALTER EXTENSION UPDATE;
# each is exercised (IDs of both modes, the superusers' functions, the
# views). None of her operators may run. A premise check shows that her
# operators do run where an expression would pick them.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;

my $node = leaf_node('ops', "max_worker_processes = 40\nleaf_id.worker_idle_timeout = 2000\n");
$node->safe_psql('postgres', q{
CREATE ROLE mallory LOGIN;
CREATE DATABASE hostile_tpl OWNER mallory;
});

my @types = ('oid', 'int2', 'int4', 'int8', 'regclass', 'regproc', 'regprocedure', 'regoper', 'regrole',
	'regnamespace', 'regtype', 'text', 'name', '"char"', 'bool', 'xid', 'xid8', 'varchar', 'numeric');
my @ops = ('=', '<>', '<', '>', '<=', '>=', '~~', '~~*', '||');
my $plant = q{
SET ROLE mallory;
CREATE SCHEMA mallory;
CREATE SEQUENCE mallory.superuser_runs;
GRANT USAGE ON SCHEMA mallory TO PUBLIC;
GRANT USAGE, UPDATE, SELECT ON SEQUENCE mallory.superuser_runs TO PUBLIC;
CREATE FUNCTION mallory.pwn() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
    PERFORM pg_catalog.nextval('mallory.superuser_runs');
    BEGIN
      EXECUTE 'ALTER ROLE mallory SUPERUSER';
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
  END IF;
  RETURN false;
END $$;
GRANT EXECUTE ON FUNCTION mallory.pwn() TO PUBLIC;
};
my $n = 0;
for my $l (@types)
{
	for my $r (@types)
	{
		$n++;
		$plant .= "CREATE FUNCTION public.cmp$n($l, $r) RETURNS boolean LANGUAGE sql AS 'SELECT mallory.pwn()';\n";
		$plant .= "CREATE OPERATOR public.$_ (LEFTARG = $l, RIGHTARG = $r, FUNCTION = public.cmp$n);\n" for @ops;
	}
}
$node->safe_psql('hostile_tpl', $plant);
is($node->safe_psql('hostile_tpl',
		"SELECT count(*) FROM pg_operator o JOIN pg_namespace s ON s.oid = o.oprnamespace WHERE s.nspname = 'public'"),
	$n * scalar(@ops), "premise: mallory planted $n type pairs x " . scalar(@ops) . " operators in public");

sub runs
{
	my ($db) = @_;
	# (her operators are on this query's path too: no bare || here)
	return $node->safe_psql($db,
		q{SELECT pg_catalog.concat((SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM mallory.superuser_runs),
		  ',', (SELECT CASE WHEN rolsuper THEN 't' ELSE 'f' END FROM pg_roles WHERE rolname = 'mallory'))});
}

# premise: a superuser's cross-type comparison under search_path public
# picks her operator (and makes her a superuser), a qualified one does not
$node->safe_psql('postgres', 'CREATE DATABASE premise TEMPLATE hostile_tpl OWNER mallory');
$node->safe_psql('premise', q{SELECT 'pg_class'::regclass OPERATOR(pg_catalog.=) 1259::oid});
is(runs('premise'), '0,f', 'premise: OPERATOR(pg_catalog.=) runs none of her operators');
$node->safe_psql('premise', q{SELECT 1259::oid = 'pg_class'::regclass});
is(runs('premise'), '1,t', 'premise: a bare oid = regclass as a superuser runs hers and makes her a superuser');
$node->safe_psql('premise', q{SELECT 'pg_class'::regclass = 'pg_class'::regclass});
is(runs('premise'), '2,t', 'premise: so does a bare regclass = regclass (pg_catalog has no operator of its own for it)');
$node->safe_psql('postgres', 'ALTER ROLE mallory NOSUPERUSER');

my @versions = split /,/, $node->safe_psql('postgres',
	"SELECT string_agg(version, ',' ORDER BY string_to_array(version, '.')::int[]) FROM pg_available_extension_versions WHERE name = 'leaf_id'");
my $latest = $node->safe_psql('postgres', "SELECT default_version FROM pg_available_extensions WHERE name = 'leaf_id'");
cmp_ok(scalar @versions, '>=', 7, 'premise: every version since 0.1.0 is installable (' . join(' ', @versions) . ')');

for my $from (@versions)
{
	my $db = 'v' . ($from =~ s/\./_/gr);
	my $label = $from eq $latest ? "a fresh install of $from" : "an install of $from updated to $latest";
	$node->safe_psql('postgres', "CREATE DATABASE $db TEMPLATE hostile_tpl OWNER mallory");
	my $r = try_sql($node, $db,
		"CREATE EXTENSION leaf_id VERSION '$from'" . ($from eq $latest ? '' : '; ALTER EXTENSION leaf_id UPDATE'));
	is($r->{ret}, 0, "$label: done") or diag $r->{err};
	is(runs($db), '0,f', "$label: none of mallory's operators ran");
	# what a superuser then does: tags, both modes, the superusers' functions
	# and the views
	$r = try_sql($node, $db, q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('t', 10);
SELECT count(DISTINCT leaf_segment_next('t')) FROM generate_series(1, 50);
SELECT count(DISTINCT leaf_snowflake_next()) FROM generate_series(1, 50);
SELECT leaf_opaque_create('d', 40);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('o', 10, 'd', leaf_opaque_grant('d', 'o', 1));
SELECT count(DISTINCT leaf_opaque_decode('d', leaf_segment_next('o'))) FROM generate_series(1, 50);
SELECT count(*) FROM leaf_opaque_domains;
SELECT count(*) FROM leaf_segment_status;
SELECT count(*) FROM leaf_snowflake_status;
SELECT count(*) FROM leaf_id_worker_status;
CREATE TABLE orders (id bigserial PRIMARY KEY, v int);
INSERT INTO orders (v) VALUES (1), (2);
SELECT leaf_segment_adopt_sequence('orders_id_seq', 'orders', 100) > 2;
CREATE TABLE events (id bigserial PRIMARY KEY, v int);
INSERT INTO events (v) VALUES (1);
SELECT leaf_snowflake_adopt_sequence('events_id_seq') IS NOT NULL;
INSERT INTO leaf_id_catalog.leaf_worker (worker_id, node_name) VALUES (900, 'gone-node');
SELECT leaf_snowflake_release_worker_id(900) IS NOT NULL;
SELECT leaf_opaque_create('d2', 30);
SELECT leaf_opaque_drop('d2');
SELECT leaf_opaque_encode('d', leaf_opaque_decode('d', 7)) = 7;
}) if $from eq $latest;
	if ($from eq $latest)
	{
		is($r->{ret}, 0, "$label: both modes, opaque IDs, the views and the superusers' functions work")
		  or diag $r->{err};
		is(runs($db), '0,f', "$label: and none of that ran mallory's operators");
	}
	$node->safe_psql('postgres', 'ALTER ROLE mallory NOSUPERUSER');
}

done_testing();
