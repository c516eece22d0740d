# leaf_id extension upgrades: a database created with
# 0.1.0's SQL (sql/leaf_id--0.1.0.sql, kept in the repository) is updated with
# ALTER EXTENSION leaf_id UPDATE.
#  - On the 0.1.0 catalog the new library serves segment mode and refuses
#    snowflake mode with 55000 naming the fix.
#  - After the update, segment IDs go on above everything drawn before and
#    snowflake mode works.
#  - The updated catalog equals a fresh install: every member object of the
#    extension (tables with columns, constraints, indexes and comments;
#    functions with their definitions, comments and privileges; views) is
#    listed in both databases and compared.
#  - A catalog version the library does not know is refused with 55000.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap qw(try_sql);
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'leaf_id'\nlc_messages = 'C'\nlog_min_messages = warning\n"
	  . "max_worker_processes = 32\n");
$node->start;
my $version = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'leaf_id'");
isnt($version, '0.1.0', "premise: the default version ($version) is newer than 0.1.0");
like($node->safe_psql('postgres',
		"SELECT string_agg(version, ',' ORDER BY version) FROM pg_available_extension_versions WHERE name = 'leaf_id'"),
	qr/^0\.1\.0,/, '0.1.0 is still installable');

$node->safe_psql('postgres', 'CREATE DATABASE upgraded');
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('upgraded', q{
CREATE EXTENSION leaf_id VERSION '0.1.0';
INSERT INTO leaf_alloc (biz_tag, step) VALUES ('u', 10);
CREATE TABLE ids (phase int, id bigint);
});
is($node->safe_psql('upgraded', "SELECT extversion FROM pg_extension WHERE extname = 'leaf_id'"),
	'0.1.0', 'the database has the 0.1.0 catalog');

# --- on the 0.1.0 catalog ---------------------------------------------------
my $r = try_sql($node, 'upgraded',
	"INSERT INTO ids SELECT 1, leaf_segment_next('u') FROM generate_series(1, 95)");
is($r->{ret}, 0, 'segment mode works on the 0.1.0 catalog') or diag $r->{err};
$r = try_sql($node, 'upgraded', 'SELECT leaf_snowflake_next()');
is($r->{sqlstate}, '55000', 'snowflake mode on the 0.1.0 catalog: refused with 55000') or diag $r->{err};
like($r->{err}, qr/needs leaf_id's catalog version \Q$version\E; this database has 0\.1\.0: run ALTER EXTENSION leaf_id UPDATE/,
	'the refusal names the versions and the fix');

# --- update -----------------------------------------------------------------
$node->safe_psql('upgraded', 'ALTER EXTENSION leaf_id UPDATE');
is($node->safe_psql('upgraded', "SELECT extversion FROM pg_extension WHERE extname = 'leaf_id'"),
	$version, "ALTER EXTENSION leaf_id UPDATE moved the catalog to $version");
$r = try_sql($node, 'upgraded',
	"INSERT INTO ids SELECT 2, leaf_segment_next('u') FROM generate_series(1, 95)");
is($r->{ret}, 0, 'segment IDs after the update') or diag $r->{err};
is( $node->safe_psql('upgraded',
		'SELECT (SELECT min(id) FROM ids WHERE phase = 2) > (SELECT max(id) FROM ids WHERE phase = 1)'),
	't', 'every segment ID after the update is above every ID before it');
$r = try_sql($node, 'upgraded',
	'INSERT INTO ids SELECT 3, leaf_snowflake_next() FROM generate_series(1, 1000)');
is($r->{ret}, 0, 'snowflake mode works after the update') or diag $r->{err};
is($node->safe_psql('upgraded', 'SELECT count(*) - count(DISTINCT id) FROM ids'), '0',
	'no ID twice');

# --- the updated catalog equals a fresh install --------------------------------
$node->safe_psql('fresh', 'CREATE EXTENSION leaf_id');
# Every object of the extension, described by what defines it. Names of
# constraints and indexes are included; OIDs and the database name are not.
my $describe = q{
WITH members AS (
  SELECT d.classid, d.objid
  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leaf_id'
  WHERE d.deptype = 'e')
SELECT line FROM (
  -- functions: full definition, comment, privileges (no ACL is the default:
  -- a script's privilege block grants only what changes something)
  SELECT 'function ' || pg_get_functiondef(p.oid) || ' comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '-')
         || ' acl=' || (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM unnest(coalesce(p.proacl, acldefault('f', p.proowner))) x) AS line
  FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
  UNION ALL
  -- tables and views: kind, comment, privileges, view definition
  SELECT 'relation ' || c.relnamespace::regnamespace::text || '.' || c.relname || ' kind=' || c.relkind::text || ' comment=' || coalesce(obj_description(c.oid, 'pg_class'), '-')
         || ' acl=' || (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM unnest(coalesce(c.relacl, acldefault('r', c.relowner))) x)
         || coalesce(' view=' || pg_get_viewdef(c.oid), '')
  FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
  UNION ALL
  -- schemas (leaf_id_catalog: the tables'), with their privileges
  SELECT 'schema ' || n.nspname || ' owner=' || n.nspowner::regrole::text
         || ' comment=' || coalesce(obj_description(n.oid, 'pg_namespace'), '-')
         || ' acl=' || (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM unnest(coalesce(n.nspacl, acldefault('n', n.nspowner))) x)
  FROM members m JOIN pg_namespace n ON m.classid = 'pg_namespace'::regclass AND n.oid = m.objid
  UNION ALL
  -- columns, in order
  SELECT 'column ' || c.relname || '.' || a.attnum || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
         || ' notnull=' || a.attnotnull || ' default=' || coalesce(pg_get_expr(ad.adbin, ad.adrelid), '-')
         || ' comment=' || coalesce(col_description(c.oid, a.attnum), '-')
  FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
  UNION ALL
  SELECT 'constraint ' || c.relname || ' ' || co.conname || ' ' || pg_get_constraintdef(co.oid)
  FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
  JOIN pg_constraint co ON co.conrelid = c.oid
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(i.indexrelid)
  FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
  JOIN pg_index i ON i.indrelid = c.oid
  UNION ALL
  SELECT 'trigger ' || t.tgname FROM members m JOIN pg_trigger t ON m.classid = 'pg_class'::regclass AND t.tgrelid = m.objid
  UNION ALL
  -- tables whose rows pg_dump saves
  SELECT 'config ' || c::regclass::text FROM pg_extension e, unnest(e.extconfig) c WHERE e.extname = 'leaf_id'
  UNION ALL
  SELECT 'member ' || pg_describe_object(m.classid, m.objid, 0) FROM members m
) x ORDER BY line};
my $upgraded = $node->safe_psql('upgraded', $describe);
my $fresh = $node->safe_psql('fresh', $describe);
cmp_ok(scalar(split /\n/, $fresh), '>', 30, 'premise: the description lists the catalog');
if ($upgraded eq $fresh)
{
	pass('the updated catalog equals a fresh install of ' . $version);
}
else
{
	my %u = map { $_ => 1 } split /\n/, $upgraded;
	my %f = map { $_ => 1 } split /\n/, $fresh;
	fail('the updated catalog equals a fresh install of ' . $version);
	diag 'only after the update: ' . join("\n  ", grep { !$f{$_} } sort keys %u);
	diag 'only in a fresh install: ' . join("\n  ", grep { !$u{$_} } sort keys %f);
}

# --- from 0.2.0 ------------------------------------------------------------------
like($node->safe_psql('postgres',
		"SELECT string_agg(version, ',' ORDER BY version) FROM pg_available_extension_versions WHERE name = 'leaf_id'"),
	qr/^0\.1\.0,0\.2\.0,0\.3\.0,/, '0.2.0 and 0.3.0 are still installable');
$node->safe_psql('postgres', 'CREATE DATABASE from020');
$node->safe_psql('from020', q{
CREATE EXTENSION leaf_id VERSION '0.2.0';
INSERT INTO leaf_alloc (biz_tag, step) VALUES ('u', 10);
CREATE TABLE ids (phase int, id bigint);
});
$r = try_sql($node, 'from020',
	"INSERT INTO ids SELECT 1, leaf_segment_next('u') FROM generate_series(1, 95)");
is($r->{ret}, 0, 'segment mode works on the 0.2.0 catalog') or diag $r->{err};
$r = try_sql($node, 'from020', 'SELECT leaf_snowflake_next()');
is($r->{sqlstate}, '55000', 'snowflake mode on the 0.2.0 catalog: refused with 55000') or diag $r->{err};
like($r->{err}, qr/needs leaf_id's catalog version \Q$version\E; this database has 0\.2\.0: run ALTER EXTENSION leaf_id UPDATE/,
	'the refusal names the versions and the fix');
$node->safe_psql('from020', 'ALTER EXTENSION leaf_id UPDATE');
$r = try_sql($node, 'from020',
	"INSERT INTO ids SELECT 2, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . 'INSERT INTO ids SELECT 3, leaf_snowflake_next() FROM generate_series(1, 1000)');
is($r->{ret}, 0, 'both modes work after the update from 0.2.0') or diag $r->{err};
is( $node->safe_psql('from020',
		'SELECT (SELECT min(id) FROM ids WHERE phase = 2) > (SELECT max(id) FROM ids WHERE phase = 1) '
		  . 'AND (SELECT count(*) - count(DISTINCT id) FROM ids) = 0'),
	't', 'segment IDs go on above those before, and no ID twice');
is($node->safe_psql('from020', $describe), $fresh,
	'the catalog updated from 0.2.0 equals a fresh install of ' . $version);

# --- from 0.3.0 (the previous version): opaque IDs come --------------------------
$node->safe_psql('postgres', 'CREATE DATABASE from030');
$node->safe_psql('from030', q{
CREATE EXTENSION leaf_id VERSION '0.3.0';
INSERT INTO leaf_alloc (biz_tag, step) VALUES ('u', 10), ('unused', 10);
CREATE TABLE ids (phase int, id bigint);
});
$r = try_sql($node, 'from030',
	"INSERT INTO ids SELECT 1, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . 'INSERT INTO ids SELECT 1, leaf_snowflake_next() FROM generate_series(1, 100)');
is($r->{ret}, 0, 'both modes work on the 0.3.0 catalog') or diag $r->{err};
# (the status function looks for the decode function, which 0.3.0 has not)
$r = try_sql($node, 'from030', "SELECT count(*) > 0 FROM leaf_segment_status() WHERE tag = 'u'");
is($r->{out}, 't', 'leaf_segment_status() works on the 0.3.0 catalog') or diag $r->{err};
$node->safe_psql('from030', 'ALTER EXTENSION leaf_id UPDATE');
is($node->safe_psql('from030', $describe), $fresh,
	'the catalog updated from 0.3.0 equals a fresh install of ' . $version);
is($node->safe_psql('from030', q{SELECT string_agg(biz_tag || '=' || opaque_check, ',' ORDER BY biz_tag) FROM leaf_id_catalog.leaf_alloc}),
	'u=0,unused=0', "the update records the tags of 0.3.0 as plain tags with IDs");
$r = try_sql($node, 'from030',
	"INSERT INTO ids SELECT 2, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . 'INSERT INTO ids SELECT 3, leaf_snowflake_next() FROM generate_series(1, 100)');
is($r->{ret}, 0, 'both modes work after the update from 0.3.0') or diag $r->{err};
is( $node->safe_psql('from030',
		q{SELECT (SELECT min(id) FROM ids WHERE phase = 2) > (SELECT max(id) FROM ids WHERE phase = 1 AND id < 1000000) }
		  . 'AND (SELECT count(*) - count(DISTINCT id) FROM ids) = 0'),
	't', 'segment IDs go on above those before, and no ID twice');
$node->safe_psql('from030', q{SELECT leaf_opaque_create('d');
UPDATE leaf_id_catalog.leaf_alloc SET opaque_domain = 'd' WHERE biz_tag = 'unused'});
$r = try_sql($node, 'from030', "SELECT leaf_segment_next('unused')");
is($r->{sqlstate}, '55000', 'a tag of 0.3.0 made opaque is refused (its IDs may have been issued plain)')
  or diag $r->{err};
$node->safe_psql('from030', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('new', 10, 'd', leaf_opaque_grant('d', 'new', 1))});
$r = try_sql($node, 'from030', "SELECT count(DISTINCT leaf_segment_next('new')) FROM generate_series(1, 50)");
is($r->{out}, '50', 'a new opaque tag works after the update') or diag $r->{err};

# --- from 0.6.0 (the previous version): the tables move to leaf_id_catalog ----
# The 0.6.0 catalog is served whole (its tables in the extension's schema);
# the update moves the five tables with their rows, constraints, comments and
# the operator's grants into leaf_id_catalog, which PUBLIC may not use, and
# re-creates the superusers' functions that name them.
$node->safe_psql('postgres', 'CREATE DATABASE from060');
$node->safe_psql('from060', q{
CREATE EXTENSION leaf_id VERSION '0.6.0';
SELECT leaf_opaque_create('d', 40);
INSERT INTO leaf_alloc (biz_tag, step, max_value) VALUES ('u', 10, 100000);
INSERT INTO leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('o', 10, 'd', leaf_opaque_grant('d', 'o', 1));
CREATE TABLE ids (phase int, id bigint);
CREATE ROLE tagadmin060;
GRANT INSERT, UPDATE ON leaf_alloc TO tagadmin060;
});
$r = try_sql($node, 'from060',
	"INSERT INTO ids SELECT 1, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . "INSERT INTO ids SELECT 1, leaf_opaque_decode('d', leaf_segment_next('o')) + 1000000 FROM generate_series(1, 95); "
	  . "INSERT INTO ids SELECT 1, leaf_snowflake_next() + 2000000 FROM generate_series(1, 50); "
	  . "SELECT count(*) FROM ids");
is($r->{out}, '240', 'both modes and an opaque tag work on the 0.6.0 catalog') or diag $r->{err};
my $wid060 = $node->safe_psql('from060', 'SELECT worker_id FROM leaf_snowflake_status');
$node->safe_psql('from060', 'ALTER EXTENSION leaf_id UPDATE');
is( $node->safe_psql('from060',
		q{SELECT string_agg(c.relnamespace::regnamespace || '.' || c.relname, ',' ORDER BY c.relname)
		  FROM pg_class c WHERE c.relname IN ('leaf_alloc', 'leaf_worker', 'leaf_opaque_domain', 'leaf_alloc_encoding', 'leaf_alloc_tuning')}),
	'leaf_id_catalog.leaf_alloc,leaf_id_catalog.leaf_alloc_encoding,leaf_id_catalog.leaf_alloc_tuning,leaf_id_catalog.leaf_opaque_domain,leaf_id_catalog.leaf_worker',
	'the update from 0.6.0 moved the five tables into leaf_id_catalog (and left no copy behind)');
is($node->safe_psql('from060', q{SELECT has_schema_privilege('public', 'leaf_id_catalog', 'USAGE')}),
	'f', 'PUBLIC may not use leaf_id_catalog');
is($node->safe_psql('from060', "SELECT has_table_privilege('tagadmin060', 'leaf_id_catalog.leaf_alloc', 'UPDATE')"),
	't', "the operator's tag-admin grant on leaf_alloc moved with it");
$node->safe_psql('from060', 'REVOKE INSERT, UPDATE ON leaf_id_catalog.leaf_alloc FROM tagadmin060');
is($node->safe_psql('from060', $describe), $fresh,
	'the catalog updated from 0.6.0 equals a fresh install of ' . $version);
$r = try_sql($node, 'from060',
	"INSERT INTO ids SELECT 2, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . "INSERT INTO ids SELECT 2, leaf_opaque_decode('d', leaf_segment_next('o')) + 1000000 FROM generate_series(1, 95); "
	  . "INSERT INTO ids SELECT 2, leaf_snowflake_next() + 2000000 FROM generate_series(1, 50); "
	  . "SELECT count(*) FROM ids");
is($r->{out}, '480', 'plain, opaque and snowflake IDs after the update from 0.6.0') or diag $r->{err};
is( $node->safe_psql('from060',
		'SELECT (SELECT min(id) FROM ids WHERE phase = 2 AND id < 1000000) > (SELECT max(id) FROM ids WHERE phase = 1 AND id < 1000000) '
		  . 'AND (SELECT min(id) FROM ids WHERE phase = 2 AND id BETWEEN 1000000 AND 2000000) > (SELECT max(id) FROM ids WHERE phase = 1 AND id BETWEEN 1000000 AND 2000000) '
		  . 'AND (SELECT count(*) - count(DISTINCT id) FROM ids) = 0'),
	't', 'after the update from 0.6.0 the tags go on above their counters, no ID twice');
is($node->safe_psql('from060', q{SELECT max_value FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'u'}),
	'100000', 'the rows moved with their values');
is($node->safe_psql('from060', 'SELECT worker_id FROM leaf_snowflake_status'), $wid060,
	'snowflake keeps its worker id across the update');

# --- from 0.5.2: leaf_alloc.max_value and draw_role ----------------------------
# The 0.5.2 catalog is served whole (its rows have no max_value or
# draw_role: the library does not ask for them); the update adds both columns
# (NULL: the tags go on as before), re-creates leaf_segment_adopt_sequence and
# keeps the operator's grants.
$node->safe_psql('postgres', 'CREATE DATABASE from052');
$node->safe_psql('from052', q{
CREATE EXTENSION leaf_id VERSION '0.5.2';
SELECT leaf_opaque_create('d', 40);
INSERT INTO leaf_alloc (biz_tag, step) VALUES ('u', 10);
INSERT INTO leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('o', 10, 'd', leaf_opaque_grant('d', 'o', 1));
CREATE TABLE ids (phase int, id bigint);
CREATE ROLE tagadmin052;
GRANT INSERT, UPDATE ON leaf_alloc TO tagadmin052;
});
$r = try_sql($node, 'from052',
	"INSERT INTO ids SELECT 1, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . "INSERT INTO ids SELECT 1, leaf_opaque_decode('d', leaf_segment_next('o')) + 1000000 FROM generate_series(1, 95); "
	  . "SELECT count(DISTINCT leaf_snowflake_next()) FROM generate_series(1, 50)");
is($r->{out}, '50', 'both modes and an opaque tag work on the 0.5.2 catalog') or diag $r->{err};
# (in one transaction with the caller's citus.enable_ddl_propagation on: the
# script turns it off for itself and must put it back, or a migration's later
# DDL in that transaction would not reach the shards; a placeholder setting
# without Citus shows it)
is( $node->safe_psql('from052',
		"BEGIN; SET LOCAL citus.enable_ddl_propagation = on; ALTER EXTENSION leaf_id UPDATE; "
		  . "SHOW citus.enable_ddl_propagation; COMMIT"),
	'on', "the update puts the caller's citus.enable_ddl_propagation back");
is($node->safe_psql('from052', "SELECT has_table_privilege('tagadmin052', 'leaf_id_catalog.leaf_alloc', 'UPDATE')"),
	't', "the operator's tag-admin grant on leaf_alloc survives the update");
$node->safe_psql('from052', 'REVOKE INSERT, UPDATE ON leaf_id_catalog.leaf_alloc FROM tagadmin052');
is($node->safe_psql('from052', $describe), $fresh,
	'the catalog updated from 0.5.2 equals a fresh install of ' . $version);
$r = try_sql($node, 'from052',
	"INSERT INTO ids SELECT 2, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . "INSERT INTO ids SELECT 2, leaf_opaque_decode('d', leaf_segment_next('o')) + 1000000 FROM generate_series(1, 95); "
	  . "SELECT count(*) FROM ids");
is($r->{out}, '380', 'plain and opaque tags work after the update from 0.5.2') or diag $r->{err};
is( $node->safe_psql('from052',
		'SELECT (SELECT min(id) FROM ids WHERE phase = 2 AND id < 1000000) > (SELECT max(id) FROM ids WHERE phase = 1 AND id < 1000000) '
		  . 'AND (SELECT min(id) FROM ids WHERE phase = 2 AND id > 1000000) > (SELECT max(id) FROM ids WHERE phase = 1 AND id > 1000000)'),
	't', 'after the update from 0.5.2 the plain and the opaque tag go on above their counters before');
$node->safe_psql('from052', q{
CREATE ROLE drawer052;
UPDATE leaf_id_catalog.leaf_alloc SET max_value = 215, draw_role = 'drawer052' WHERE biz_tag = 'u';
SELECT leaf_id_reset_cache();
});
$r = try_sql($node, 'from052', "SET ROLE drawer052; SELECT count(*) FROM leaf_segment_next('u', 100)");
is($r->{sqlstate}, '2200H', "after the update a tag's max_value holds (the tag stops at 215)") or diag $r->{err};
$r = try_sql($node, 'from052', "CREATE ROLE other052; SET ROLE other052; SELECT leaf_segment_next('u')");
is($r->{sqlstate}, '42501', "and its draw_role: another role is refused") or diag $r->{err};

# --- from 0.5.1 (catalog 0.5.1): leaf_id_worker_status is new -------------
# The 0.5.1 catalog is served whole; the update adds leaf_id_worker_status
# (its function and view, for pg_monitor) and keeps the operator's grants
# on the objects it does not touch.
$node->safe_psql('postgres', 'CREATE DATABASE from051');
$node->safe_psql('from051', q{
CREATE EXTENSION leaf_id VERSION '0.5.1';
SELECT leaf_opaque_create('d', 40);
INSERT INTO leaf_alloc (biz_tag, step) VALUES ('u', 10);
INSERT INTO leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('o', 10, 'd', leaf_opaque_grant('d', 'o', 1));
CREATE TABLE ids (phase int, id bigint);
CREATE ROLE watcher051;
GRANT SELECT ON leaf_segment_status TO watcher051;
});
$r = try_sql($node, 'from051',
	"INSERT INTO ids SELECT 1, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . "INSERT INTO ids SELECT 1, leaf_opaque_decode('d', leaf_segment_next('o')) + 1000000 FROM generate_series(1, 95); "
	  . "SELECT count(DISTINCT leaf_snowflake_next()) FROM generate_series(1, 50)");
is($r->{out}, '50', 'both modes and an opaque tag work on the 0.5.1 catalog') or diag $r->{err};
$r = try_sql($node, 'from051', 'SELECT count(*) FROM leaf_segment_status');
is($r->{out}, '2', 'leaf_segment_status works on the 0.5.1 catalog') or diag $r->{err};
$node->safe_psql('from051', 'ALTER EXTENSION leaf_id UPDATE');
is($node->safe_psql('from051', "SELECT has_table_privilege('watcher051', 'leaf_segment_status', 'SELECT')"),
	't', "the operator's grant on leaf_segment_status survives the update");
# (the operator's grant taken back: the rest equals a fresh install)
$node->safe_psql('from051', 'REVOKE SELECT ON leaf_segment_status FROM watcher051');
is($node->safe_psql('from051', $describe), $fresh,
	'the catalog updated from 0.5.1 equals a fresh install of ' . $version);
is($node->safe_psql('from051', "SELECT string_agg(mode || ':' || (pid IS NOT NULL) || ':' || coalesce(standby_wait, '-'), ',' ORDER BY mode) FROM leaf_id_worker_status"),
	'segment:true:-,snowflake:true:-', 'after the update leaf_id_worker_status shows both running workers, waiting for nothing');
$r = try_sql($node, 'from051',
	"INSERT INTO ids SELECT 2, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . "INSERT INTO ids SELECT 2, leaf_opaque_decode('d', leaf_segment_next('o')) + 1000000 FROM generate_series(1, 95); "
	  . "SELECT count(*) FROM ids");
is($r->{out}, '380', 'plain and opaque tags work after the update from 0.5.1') or diag $r->{err};
is( $node->safe_psql('from051',
		'SELECT (SELECT min(id) FROM ids WHERE phase = 2 AND id < 1000000) > (SELECT max(id) FROM ids WHERE phase = 1 AND id < 1000000) '
		  . 'AND (SELECT min(id) FROM ids WHERE phase = 2 AND id > 1000000) > (SELECT max(id) FROM ids WHERE phase = 1 AND id > 1000000)'),
	't', 'after the update from 0.5.1 the plain and the opaque tag go on above their counters before');

# --- from 0.5.0: leaf_opaque_create's SQL changed ----------------------------------
# The 0.5.0 catalog is served whole (both modes, opaque tags with grants);
# the update replaces leaf_opaque_create (on Citus its key no longer goes as
# a literal: tests/citus/219) and keeps the domains, grants and tags.
$node->safe_psql('postgres', 'CREATE DATABASE from050');
$node->safe_psql('from050', q{
CREATE EXTENSION leaf_id VERSION '0.5.0';
SELECT leaf_opaque_create('d', 40);
INSERT INTO leaf_alloc (biz_tag, step) VALUES ('u', 10);
INSERT INTO leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('o', 10, 'd', leaf_opaque_grant('d', 'o', 1));
CREATE TABLE ids (phase int, id bigint);
});
$r = try_sql($node, 'from050',
	"INSERT INTO ids SELECT 1, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . "INSERT INTO ids SELECT 1, leaf_opaque_decode('d', leaf_segment_next('o')) + 1000000 FROM generate_series(1, 95); "
	  . "SELECT count(DISTINCT leaf_snowflake_next()) FROM generate_series(1, 50)");
is($r->{out}, '50', 'both modes and an opaque tag work on the 0.5.0 catalog') or diag $r->{err};
$node->safe_psql('from050', 'ALTER EXTENSION leaf_id UPDATE');
is($node->safe_psql('from050', $describe), $fresh,
	'the catalog updated from 0.5.0 equals a fresh install of ' . $version);
$r = try_sql($node, 'from050',
	"INSERT INTO ids SELECT 2, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . "INSERT INTO ids SELECT 2, leaf_opaque_decode('d', leaf_segment_next('o')) + 1000000 FROM generate_series(1, 95); "
	  . "SELECT leaf_opaque_create('d2', 30)");
is($r->{out}, 'd2', 'plain and opaque tags, and a new domain, work after the update from 0.5.0') or diag $r->{err};
is( $node->safe_psql('from050',
		'SELECT (SELECT min(id) FROM ids WHERE phase = 2 AND id < 1000000) > (SELECT max(id) FROM ids WHERE phase = 1 AND id < 1000000) '
		  . 'AND (SELECT min(id) FROM ids WHERE phase = 2 AND id > 1000000) > (SELECT max(id) FROM ids WHERE phase = 1 AND id > 1000000)'),
	't', 'after the update the plain and the opaque tag go on above their counters before');

# --- from 0.4.0: opaque tags need a grant ------------------------------------------
# On the 0.4.0 catalog the library serves plain tags only (no opaque_grant
# column: nothing proves who set a tag's domain); the update gives the
# opaque tags of 0.4.0 the grant of their max_id, and they go on.
$node->safe_psql('postgres', 'CREATE DATABASE from040');
$node->safe_psql('from040', q{
CREATE EXTENSION leaf_id VERSION '0.4.0';
SELECT leaf_opaque_create('d', 40);
INSERT INTO leaf_alloc (biz_tag, step) VALUES ('u', 10);
INSERT INTO leaf_alloc (biz_tag, step, opaque_domain) VALUES ('o', 10, 'd');
CREATE TABLE ids (phase int, id bigint);
});
$r = try_sql($node, 'from040',
	"INSERT INTO ids SELECT 1, leaf_segment_next('u') FROM generate_series(1, 95)");
is($r->{ret}, 0, 'plain tags work on the 0.4.0 catalog') or diag $r->{err};
$r = try_sql($node, 'from040', "SELECT leaf_segment_next('o')");
is($r->{sqlstate}, '55000', 'an opaque tag on the 0.4.0 catalog: refused with 55000 (no grant column)')
  or diag $r->{err};
$node->safe_psql('from040', 'ALTER EXTENSION leaf_id UPDATE');
is($node->safe_psql('from040', $describe), $fresh,
	'the catalog updated from 0.4.0 equals a fresh install of ' . $version);
is($node->safe_psql('from040', q{SELECT opaque_grant = leaf_opaque_grant('d', 'o', max_id) FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'o'}),
	't', 'the update gave the opaque tag of 0.4.0 the grant of its max_id');
$r = try_sql($node, 'from040',
	"INSERT INTO ids SELECT 2, leaf_segment_next('u') FROM generate_series(1, 95); "
	  . "INSERT INTO ids SELECT 3, leaf_opaque_decode('d', leaf_segment_next('o')) FROM generate_series(1, 95)");
is($r->{ret}, 0, 'plain and opaque tags work after the update from 0.4.0') or diag $r->{err};
is( $node->safe_psql('from040',
		'SELECT (SELECT min(id) FROM ids WHERE phase = 2) > (SELECT max(id) FROM ids WHERE phase = 1) '
		  . 'AND (SELECT count(*) - count(DISTINCT id) FROM ids WHERE phase = 3) = 0'),
	't', 'segment IDs go on above those before, and the opaque tag hands out distinct counters');

# --- from 0.4.0 with a tag admin: nothing is granted by the update ----------------
# a role that could write leaf_alloc could have planted a row with another
# tag's domain (a codebook of it, once granted): the update grants no row,
# and warns with the tags to check
$node->safe_psql('postgres', 'CREATE DATABASE from040admin');
$node->safe_psql('from040admin', q{
CREATE EXTENSION leaf_id VERSION '0.4.0';
SELECT leaf_opaque_create('d', 40);
INSERT INTO leaf_alloc (biz_tag, step, opaque_domain) VALUES ('o', 10, 'd');
CREATE ROLE tag_admin_040;
GRANT SELECT, INSERT, UPDATE ON leaf_alloc TO tag_admin_040;
CREATE ROLE support_040;
GRANT EXECUTE ON FUNCTION leaf_opaque_decode(text, bigint) TO support_040;
REVOKE EXECUTE ON FUNCTION leaf_segment_next(text) FROM PUBLIC;
SET ROLE tag_admin_040;
INSERT INTO leaf_alloc (biz_tag, step, max_id, opaque_domain) VALUES ('spy', 1000, 0, 'd');
});
my ($uret, $uout, $uerr) = $node->psql('from040admin', 'ALTER EXTENSION leaf_id UPDATE');
is($uret, 0, 'the update from 0.4.0 with a tag admin works');
like($uerr, qr/WARNING:  leaf_id: the opaque tags \{o,spy\} were not granted their domains by this update: \{tag_admin_040\} could write leaf_alloc/,
	'it warns which tags were not granted, and who could write leaf_alloc');
$r = try_sql($node, 'from040admin', "SELECT leaf_segment_next('spy')");
is($r->{sqlstate}, '42501', 'the planted row draws nothing (42501)') or diag $r->{err};
$node->safe_psql('from040admin',
	q{UPDATE leaf_id_catalog.leaf_alloc SET opaque_grant = leaf_opaque_grant(opaque_domain, biz_tag, max_id) WHERE biz_tag = 'o'});
$r = try_sql($node, 'from040admin', "SELECT count(DISTINCT leaf_segment_next('o')) FROM generate_series(1, 20)");
is($r->{out}, '20', 'the tag a superuser granted after checking it works') or diag $r->{err};
# writers no ACL of leaf_alloc shows: a member of pg_write_all_data, and a
# tag admin whose grant was revoked before the update (her planted copy
# shares the victim's domain): no grant for either tag
for my $case ('pgwrite', 'revoked')
{
	my $db = "from040$case";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
CREATE EXTENSION leaf_id VERSION '0.4.0';
SELECT leaf_opaque_create('d', 40);
INSERT INTO leaf_alloc (biz_tag, step, opaque_domain) VALUES ('o', 10, 'd');
CREATE ROLE planter_$case;
} . ($case eq 'pgwrite' ? "GRANT pg_write_all_data TO planter_$case;" : "GRANT INSERT ON leaf_alloc TO planter_$case;") . qq{
SET ROLE planter_$case;
INSERT INTO leaf_alloc (biz_tag, step, opaque_domain) VALUES ('mine', 10, 'd');
RESET ROLE;
} . ($case eq 'revoked' ? "REVOKE INSERT ON leaf_alloc FROM planter_$case;" : ''));
	my ($cret, $cout, $cerr) = $node->psql($db, 'ALTER EXTENSION leaf_id UPDATE');
	is($cret, 0, "$case: the update from 0.4.0 works");
	like($cerr, $case eq 'pgwrite'
		? qr/WARNING:  leaf_id: the opaque tags \{mine,o\} were not granted their domains by this update: \{planter_pgwrite\} could write leaf_alloc/
		: qr/WARNING:  leaf_id: the opaque tags \{mine,o\} were not granted their domains by this update: each shares its domain with another tag/,
		"$case: it grants neither tag, and says why") or diag $cerr;
	$r = try_sql($node, $db, "SELECT leaf_segment_next('mine')");
	is($r->{sqlstate}, '42501', "$case: the planted row draws nothing (42501)") or diag $r->{err};
	# (roles are the server's: the next case has no such member)
	$node->safe_psql('postgres', "REVOKE pg_write_all_data FROM planter_$case") if $case eq 'pgwrite';
}

# what the operator granted and revoked on 0.4.0 stays as it was
is( $node->safe_psql('from040admin', q{SELECT
  has_table_privilege('tag_admin_040', 'leaf_id_catalog.leaf_alloc', 'INSERT') AND has_table_privilege('tag_admin_040', 'leaf_id_catalog.leaf_alloc', 'UPDATE'),
  has_function_privilege('support_040', 'leaf_opaque_decode(text, bigint)', 'EXECUTE'),
  has_function_privilege('support_040', 'leaf_segment_next(text)', 'EXECUTE')}),
	't|t|f', 'the update keeps the operator\'s grants (tag admin, decoder) and her REVOKE from PUBLIC');
# (the update scripts from 0.4.0 on ran, 0.4.0 to 0.5.0 to 0.5.1 and on: 0.5.0's privilege block
# wrote the operator's grants into pg_init_privs, and the second one took
# them back as the scripts'; pg_dump left out what pg_init_privs had)
my $dump = `pg_dump --schema-only -d '@{[$node->connstr('from040admin')]}' 2>&1`;
my @acl_lines = grep { /^(GRANT|REVOKE)/ } split /\n/, $dump;
ok( (grep { /^GRANT .*INSERT.* ON TABLE leaf_id_catalog\.leaf_alloc TO tag_admin_040;/ } @acl_lines)
	  && (grep { /^GRANT ALL ON FUNCTION public\.leaf_opaque_decode\(domain text, id bigint\) TO support_040;|^GRANT EXECUTE ON FUNCTION public\.leaf_opaque_decode\(.*\) TO support_040;/ } @acl_lines)
	  && (grep { /^REVOKE .* ON FUNCTION public\.leaf_segment_next\(tag text\) FROM PUBLIC;|^REVOKE .*leaf_segment_next\(.*text\) FROM PUBLIC;/ } @acl_lines),
	'pg_dump after the update has the operator\'s grants and her REVOKE (not taken for the scripts\')')
  or diag join "\n", @acl_lines;
is( $node->safe_psql('from040admin', q{SELECT has_function_privilege('support_040', 'leaf_segment_status()', 'EXECUTE'),
  has_function_privilege('pg_monitor', 'leaf_segment_status()', 'EXECUTE'),
  has_function_privilege('support_040', 'leaf_opaque_grant(text, text, bigint)', 'EXECUTE')}),
	'f|t|t', 'and gives the listed privileges (pg_monitor\'s status, PUBLIC\'s leaf_opaque_grant), no others');

# --- a catalog version the library does not serve -------------------------------
$node->safe_psql('fresh', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('v', 10);
UPDATE pg_extension SET extversion = '9.9.9' WHERE extname = 'leaf_id'});
$r = try_sql($node, 'fresh', "SELECT leaf_segment_next('v')");
is($r->{sqlstate}, '55000', 'an unknown catalog version is refused with 55000') or diag $r->{err};
like($r->{err}, qr/library \Q$version\E cannot serve its catalog of version 9\.9\.9/,
	'the refusal names both versions');
# snowflake mode too: a database that has not claimed a worker id yet
$node->safe_psql('postgres', 'CREATE DATABASE sf_version');
$node->safe_psql('sf_version', q{CREATE EXTENSION leaf_id;
UPDATE pg_extension SET extversion = '9.9.9' WHERE extname = 'leaf_id'});
$r = try_sql($node, 'sf_version', 'SELECT leaf_snowflake_next()');
is($r->{sqlstate}, '55000', 'snowflake mode: an unknown catalog version is refused with 55000')
  or diag $r->{err};
like($r->{err}, qr/cannot serve its catalog of version 9\.9\.9/, 'snowflake mode: the refusal names it');
$node->safe_psql('sf_version', "UPDATE pg_extension SET extversion = '$version' WHERE extname = 'leaf_id'");
$r = try_sql($node, 'sf_version', 'SELECT leaf_snowflake_next() > 0');
is($r->{ret}, 0, 'snowflake mode: with its own version back, the catalog is served') or diag $r->{err};
$node->safe_psql('fresh', "UPDATE pg_extension SET extversion = '$version' WHERE extname = 'leaf_id'");
$r = try_sql($node, 'fresh', "SELECT leaf_segment_next('v')");
is($r->{ret}, 0, 'with its own version back, the catalog is served') or diag $r->{err};

$node->stop;
done_testing();
