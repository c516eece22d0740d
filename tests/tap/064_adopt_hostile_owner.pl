# Security of the adopt functions, which a superuser runs on someone else's
# table: the table's owner, mallory, is not a superuser and plants her code
# where a read of the table would run it.
#  1. she turns her table into a view (CREATE RULE "_RETURN") whose select
#     list calls her function: the adoption is refused (42809), nothing runs
#     (PostgreSQL 16 and later refuse the rule itself);
#  2. she gives her table a partial index whose predicate calls an IMMUTABLE
#     function of hers (the planner folds it when it plans a query on the
#     table): the adoption works, and her function runs only as herself;
#  3. she forces row-level security on her table with a policy that calls
#     her function: the read raises (42501) instead of running it;
# and the functions that write the extension's schema into SQL work in a
# schema whose name needs quotes (CREATE EXTENSION leaf_id SCHEMA "Leaf Id").
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;
use HostileNames;

my $node = leaf_node('adopt_owner');
plant_mallory($node);
$node->safe_psql('postgres', q{
SET ROLE mallory;
CREATE FUNCTION mallory.escalate() RETURNS integer LANGUAGE plpgsql AS $$
BEGIN PERFORM mallory.pwn('view'); RETURN 1; END $$;
CREATE FUNCTION mallory.folded() RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN PERFORM mallory.pwn('index'); RETURN true; END $$;
CREATE TABLE mallory.as_view (id serial, v integer);
CREATE TABLE mallory.with_index (id serial, v integer);
INSERT INTO mallory.with_index (v) SELECT g FROM generate_series(1, 10) g;
CREATE INDEX ON mallory.with_index (v) WHERE mallory.folded();
-- a policy whose function would run in the read (as the owner, who could
-- rename the extension's schema under the adopt function) and hide rows
CREATE TABLE mallory.with_policy (id serial, v integer);
INSERT INTO mallory.with_policy (v) SELECT g FROM generate_series(1, 10) g;
CREATE FUNCTION mallory.policy_ran() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_catalog.nextval('mallory.superuser_runs'); RETURN false; END $$;
ALTER TABLE mallory.with_policy ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY hide ON mallory.with_policy USING (mallory.policy_ran());
RESET ROLE;
});
# (PostgreSQL 16 and later refuse to turn a table into a view)
my $to_view = try_sql($node, 'postgres',
	q{SET ROLE mallory; CREATE RULE "_RETURN" AS ON SELECT TO mallory.as_view DO INSTEAD SELECT mallory.escalate() AS id, 0 AS v});
is(superuser_runs($node), '0,f', 'premise: nothing ran as a superuser while mallory planted');
if ($node->safe_psql('postgres', 'SHOW server_version_num') >= 160000)
{
	like($to_view->{err}, qr/"as_view" cannot have ON SELECT rules/,
		'PostgreSQL 16 and later: a table cannot be turned into a view');
}
else
{
	is($to_view->{ret}, 0, 'premise: mallory turned her table into a view') or diag $to_view->{err};
	is($node->safe_psql('postgres', "SELECT relkind FROM pg_class WHERE oid = 'mallory.as_view'::regclass"),
		'v', 'premise: mallory\'s table is a view now');
	for my $f (q{leaf_segment_adopt_sequence('mallory.as_view_id_seq', 'as_view')},
		q{leaf_snowflake_adopt_sequence('mallory.as_view_id_seq')})
	{
		my $r = try_sql($node, 'postgres', "SELECT $f");
		is($r->{sqlstate}, '42809', "$f: refused, the relation is a view") or diag $r->{err};
		is(superuser_runs($node), '0,f', "$f: nothing of mallory's ran as a superuser");
	}
}

my $r = try_sql($node, 'postgres',
	q{SELECT leaf_segment_adopt_sequence('mallory.with_index_id_seq', 'with_index', 5)});
is($r->{ret}, 0, 'the table with the planted index predicate is adopted') or diag $r->{err};
is($r->{out}, '11', 'its first ID is above the column\'s values');
is(superuser_runs($node), '0,f', "the planted predicate did not run as a superuser");
is( $node->safe_psql('postgres',
		'SET ROLE mallory; INSERT INTO mallory.with_index (v) VALUES (0) RETURNING id'),
	'11', 'an insert takes the new default');

$r = try_sql($node, 'postgres',
	q{SELECT leaf_segment_adopt_sequence('mallory.with_policy_id_seq', 'with_policy', 5)});
is($r->{sqlstate}, '42501', 'a table whose row-level security applies to its owner is refused')
  or diag $r->{err};
is(superuser_runs($node), '0,f', 'the policy\'s function did not run');

# A schema whose name needs quotes
$node->safe_psql('postgres', 'CREATE DATABASE quoted');
$node->safe_psql('quoted', q{
CREATE SCHEMA "Leaf Id";
CREATE EXTENSION leaf_id SCHEMA "Leaf Id";
CREATE TABLE seg (id serial, v integer);
CREATE TABLE snow (id bigserial, v integer);
INSERT INTO seg (v) VALUES (1), (2);
INSERT INTO snow (v) VALUES (1);
});
$r = try_sql($node, 'quoted', q{
SELECT "Leaf Id".leaf_segment_adopt_sequence('seg_id_seq', 'seg', 10);
SELECT "Leaf Id".leaf_snowflake_adopt_sequence('snow_id_seq') > 0;
INSERT INTO seg (v) VALUES (3) RETURNING id;
INSERT INTO snow (v) VALUES (2) RETURNING id > 2;
SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'seg'::regclass;
SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'snow'::regclass;
});
is($r->{ret}, 0, 'schema "Leaf Id": both adopt functions work') or diag $r->{err};
is( $r->{out},
	join("\n", 3, 't', 3, 't', q{"Leaf Id".leaf_segment_next('seg'::text)}, q{"Leaf Id".leaf_snowflake_next()}),
	'schema "Leaf Id": the new defaults name the schema once, quoted');
my $wid = $node->safe_psql('quoted', 'SELECT worker_id FROM "Leaf Id".leaf_snowflake_status');
$r = try_sql($node, 'quoted', qq{SELECT "Leaf Id".leaf_snowflake_release_worker_id($wid) IS NOT NULL});
is($r->{ret}, 0, 'schema "Leaf Id": leaf_snowflake_release_worker_id works') or diag $r->{err};

done_testing();
