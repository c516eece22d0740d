# leaf_id segment mode: who may draw a tag's IDs, and how far a tag goes
# (catalog 0.6.0).
# A. leaf_alloc.draw_role: only superusers and roles with the privileges of
#    the named role draw the tag's IDs; any other role that may run
#    leaf_segment_next is refused with 42501, by single and batch calls, by a
#    column default, and from a run of opaque IDs its session kept under
#    another role, and takes nothing (the tag's next ID follows the last one
#    handed out). A NOINHERIT member needs SET ROLE; a changed draw_role
#    applies after leaf_id_reset_cache(); a name no role has leaves the tag to
#    superusers; NULL opens it again. A session whose cached slot of an open
#    tag went to a restricted one is not refused. pg_monitor sees
#    a restricted tag's counters only with the draw_role's privileges.
# B. leaf_alloc.max_value: the tag issues exactly the values up to it, then
#    2200H (also a batch call, also after a restart, an opaque tag's counter
#    too); raising it lets the tag go on above.
# C. leaf_segment_adopt_sequence gives an integer column's tag max_value
#    2147483647 (a smallint's 32767, a bigint's none, a sequence's lower
#    MAXVALUE that one): the column's inserts stop with 2200H at its largest
#    value, never with 22003.

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node('draw_role');

$node->safe_psql(
	'postgres', q{
CREATE ROLE orders_app NOLOGIN;
CREATE ROLE alice LOGIN;
CREATE ROLE mallory LOGIN;
CREATE ROLE bob LOGIN NOINHERIT;
CREATE ROLE other_app NOLOGIN;
CREATE ROLE watcher LOGIN IN ROLE pg_monitor;
GRANT orders_app TO alice;
GRANT orders_app TO bob;
SELECT leaf_opaque_create('d', 32);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, draw_role) VALUES
  ('orders', 1, 100, 'orders_app'),
  ('open', 1, 100, NULL);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, draw_role, opaque_domain, opaque_grant)
VALUES ('sec', 1, 100, 'orders_app', 'd', leaf_opaque_grant('d', 'sec', 1));
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT leaf_segment_next('orders'), note text);
GRANT INSERT, SELECT ON orders TO alice, mallory;
});

sub as
{
	my ($role, $sql) = @_;
	return try_sql($node, 'postgres', "SET ROLE $role;\n$sql");
}

# --- A. draw_role ------------------------------------------------------------
my $r = as('alice', "SELECT leaf_segment_next('orders') FROM generate_series(1, 5)");
is($r->{out}, join("\n", 1 .. 5), "a member of the tag's draw_role draws its IDs")
  or diag $r->{err};

$r = as('mallory', "SELECT leaf_segment_next('orders')");
is($r->{sqlstate}, '42501', 'a role without the privileges of draw_role is refused (42501)')
  or diag $r->{err};
like($r->{err}, qr/permission denied to draw IDs of leaf_id tag "orders"/, 'the refusal names the tag');
is($r->{out}, '', 'and gets no ID');
$r = as('mallory', "SELECT leaf_segment_next('orders', 100000)");
is($r->{sqlstate}, '42501', 'a batch call of the role is refused too') or diag $r->{err};
is($r->{out}, '', 'and gives no ID');
$r = as('mallory', "INSERT INTO orders (note) VALUES ('x') RETURNING id");
is($r->{sqlstate}, '42501', "the role's insert through the column default is refused")
  or diag $r->{err};

# 200 refused batch calls of 100,000 in one session: none takes an ID
$r = try_sql($node, 'postgres',
	"SET ROLE mallory;\n\\set ON_ERROR_STOP 0\n"
	  . "SELECT count(*) FROM leaf_segment_next('orders', 100000);\n" x 200);
my $refused = () = $r->{err} =~ /ERROR:\s+42501:/g;
is($refused, 200, 'each of 200 batch calls of the role is refused');
$r = as('alice', "SELECT leaf_segment_next('orders')");
is($r->{out}, '6', "the member's next ID follows the last one handed out: the refused calls took nothing")
  or diag $r->{err};
$r = as('alice', "INSERT INTO orders (note) VALUES ('a') RETURNING id");
is($r->{out}, '7', "the member's insert gets the next ID from the column default") or diag $r->{err};
is($node->safe_psql('postgres', "SELECT leaf_segment_next('orders')"), '8', 'a superuser draws it');
$r = as('mallory', "SELECT leaf_segment_next('open')");
is($r->{out}, '1', 'a tag without draw_role is open to every role that may run the function')
  or diag $r->{err};

# NOINHERIT: membership without the role's privileges until SET ROLE
$r = try_sql($node, 'postgres', "SET ROLE bob;\nSELECT leaf_segment_next('orders')");
is($r->{sqlstate}, '42501', 'a NOINHERIT member is refused') or diag $r->{err};
$r = try_sql($node, 'postgres', "SET ROLE bob;\nSET ROLE orders_app;\nSELECT leaf_segment_next('orders')");
is($r->{out}, '9', 'and draws after SET ROLE to the draw_role') or diag $r->{err};

# An opaque tag's run, kept by a session under one role, is not handed to
# another: the session (a superuser's) draws as alice, keeping encoded IDs
# for its next calls, then switches to mallory.
my $s = session($node, 'postgres');
my ($out, $err, $state) = session_query($s,
	"SET ROLE alice; SELECT leaf_segment_next('sec') FROM generate_series(1, 2);");
is($state, undef, "alice draws two IDs of the opaque tag (the session keeps a run)") or diag $err;
my @sec = split /\n/, $out;
($out, $err, $state) = session_query($s, "RESET ROLE; SET ROLE mallory; SELECT leaf_segment_next('sec');");
is($state, '42501', "the session's kept run is refused to mallory") or diag "out=$out err=$err";
($out, $err, $state) = session_query($s, "RESET ROLE; SET ROLE alice; SELECT leaf_segment_next('sec');");
is($state, undef, 'and given to alice again') or diag $err;
push @sec, $out;
is_deeply([ map { $node->safe_psql('postgres', "SELECT leaf_opaque_decode('d', $_)") } @sec ],
	[ 1, 2, 3 ], "the opaque tag's IDs decode to 1, 2, 3: nothing of the run went to mallory");
$s->quit;

# a pg_monitor member sees a restricted tag without its counters (as
# pg_sequences hides last_value without USAGE), an open tag with them
$r = as('watcher', "SELECT tag || ':' || coalesce(buffer0_end::text, 'NULL') || ':' || coalesce(refills::text, 'NULL') "
	  . "FROM leaf_segment_status WHERE tag IN ('orders', 'open') ORDER BY tag");
like($r->{out}, qr/^open:\d+:1\norders:NULL:NULL$/, "pg_monitor sees the open tag's counters, not the restricted tag's")
  or diag "$r->{out} $r->{err}";
$r = try_sql($node, 'postgres', "GRANT orders_app TO watcher; SET ROLE watcher; "
	  . "SELECT coalesce(buffer0_end::text, 'NULL') FROM leaf_segment_status WHERE tag = 'orders'");
like($r->{out}, qr/^\d+$/, "and the restricted tag's with the draw_role's privileges") or diag $r->{err};

# A session caches the slot of the open tag; the cache is reset and a
# restricted tag takes that slot: the session's next call of the open tag
# is not refused for the other tag's draw_role (it looks its tag up again)
$node->safe_psql('postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('open2', 1, 100);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, draw_role) VALUES ('secret2', 1, 100, 'orders_app')});
# (slots are taken lowest first: with the cache reset, each tag drawn first
# takes slot 0; with leaf_id.max_tags_per_database = 1 the database holds one
# slot at a time, so secret2 can only take the slot open2 had)
$node->safe_psql('postgres', "ALTER SYSTEM SET leaf_id.max_tags_per_database = 1; SELECT pg_reload_conf()");
ok(wait_until(10, sub { $node->safe_psql('postgres', 'SHOW leaf_id.max_tags_per_database') eq '1' }),
	'premise: the database may hold one tag slot');
$node->safe_psql('postgres', "SELECT leaf_id_reset_cache()");
$s = session($node, 'postgres');
($out, $err, $state) = session_query($s, "SET ROLE mallory; SELECT leaf_segment_next('open2');");
is($out, '1', "mallory's session draws the open tag") or diag $err;
$node->safe_psql('postgres', "SELECT leaf_id_reset_cache(); SELECT leaf_segment_next('secret2')");
is(join(',', status_tags($node, 'postgres')), 'secret2', 'premise: the one slot now holds secret2 (open2\'s is gone)');
# the session's cached slot of open2 is secret2's now: its call must look
# open2 up again (and find no slot under the bound of 1: 53400), not take
# secret2's draw_role for open2's (42501)
($out, $err, $state) = session_query($s, "SELECT leaf_segment_next('open2');");
is($state, '53400', "after its slot went to a restricted tag, the session's call of the open tag looks it up again "
	  . '(53400 under the bound of one slot), not refused for the other tag\'s draw_role (42501)')
  or diag $err;
$node->safe_psql('postgres', "ALTER SYSTEM RESET leaf_id.max_tags_per_database; SELECT pg_reload_conf()");
ok(wait_until(10, sub { $node->safe_psql('postgres', 'SHOW leaf_id.max_tags_per_database') eq '-1' }),
	'the bound is back');
($out, $err, $state) = session_query($s, "SELECT leaf_segment_next('open2');");
is($state, undef, 'then the open tag draws again') or diag $err;
cmp_ok($out, '>', 1, 'and gets a new ID');
$s->quit;

# a changed draw_role applies after leaf_id_reset_cache()
$node->safe_psql('postgres',
	"UPDATE leaf_id_catalog.leaf_alloc SET draw_role = 'other_app' WHERE biz_tag = 'orders'; SELECT leaf_id_reset_cache()");
$r = as('alice', "SELECT leaf_segment_next('orders')");
is($r->{sqlstate}, '42501', 'after draw_role changed (and leaf_id_reset_cache()), the former member is refused')
  or diag $r->{err};
$node->safe_psql('postgres',
	"UPDATE leaf_id_catalog.leaf_alloc SET draw_role = 'no_such_role' WHERE biz_tag = 'orders'; SELECT leaf_id_reset_cache()");
$r = as('alice', "SELECT leaf_segment_next('orders')");
is($r->{sqlstate}, '42501', 'a draw_role that names no role refuses every role but superusers')
  or diag $r->{err};
my $su = $node->safe_psql('postgres', "SELECT leaf_segment_next('orders')");
cmp_ok($su, '>', 9, 'a superuser still draws it (above every ID before)');
$node->safe_psql('postgres',
	"UPDATE leaf_id_catalog.leaf_alloc SET draw_role = NULL WHERE biz_tag = 'orders'; SELECT leaf_id_reset_cache()");
$r = as('mallory', "SELECT leaf_segment_next('orders')");
is($r->{sqlstate}, undef, 'draw_role NULL opens the tag again') or diag $r->{err};
cmp_ok($r->{out}, '>', $su, 'above the last ID handed out');

# --- B. max_value ------------------------------------------------------------
$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, max_value) VALUES
  ('small', 1, 10, 25), ('batch', 1, 10, 50);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, max_value, opaque_domain, opaque_grant)
VALUES ('osmall', 1, 10, 99, 'd', leaf_opaque_grant('d', 'osmall', 1));
});
$r = try_sql($node, 'postgres', "SELECT leaf_segment_next('small');\n" x 30);
is($r->{out}, join("\n", 1 .. 25), 'a tag with max_value 25 issues 1 to 25') or diag $r->{err};
is($r->{sqlstate}, '2200H', 'then 2200H');
like($r->{err}, qr/has reached its leaf_alloc.max_value \(25\)/, 'naming max_value');
# batches issue exactly up to max_value (50): 30, then the last 20 rows
$r = try_sql($node, 'postgres', "SELECT count(*) || ':' || min(x) || ':' || max(x) FROM leaf_segment_next('batch', 30) x");
is($r->{out}, '30:1:30', 'a batch of 30 of a tag with max_value 50: 1 to 30') or diag $r->{err};
$r = try_sql($node, 'postgres', "SELECT count(*) || ':' || min(x) || ':' || max(x) FROM leaf_segment_next('batch', 20) x");
is($r->{out}, '20:31:50', 'the last batch: exactly the 20 rows 31 to 50') or diag $r->{err};
$r = try_sql($node, 'postgres', "SELECT count(*) FROM leaf_segment_next('batch', 100)");
is($r->{sqlstate}, '2200H', 'a batch call past max_value ends with 2200H') or diag $r->{out};
$r = try_sql($node, 'postgres', "SELECT leaf_segment_next('batch')");
is($r->{sqlstate}, '2200H', 'as does the next call');
cmp_ok($node->safe_psql('postgres', "SELECT max(max_id) FROM leaf_id_catalog.leaf_alloc WHERE biz_tag IN ('small', 'batch')"),
	'<=', 51, 'no refill reserved past max_value');
$r = try_sql($node, 'postgres',
	"SELECT count(DISTINCT id) || ' ' || max(leaf_opaque_decode('d', id)) FROM "
	  . "(SELECT leaf_segment_next('osmall') AS id FROM generate_series(1, 99)) x");
is($r->{out}, '99 99', 'an opaque tag with max_value 99 issues 99 IDs, counters 1 to 99') or diag $r->{err};
$r = try_sql($node, 'postgres', "SELECT leaf_segment_next('osmall')");
is($r->{sqlstate}, '2200H', 'then 2200H: no counter above max_value') or diag $r->{out};

# a refused refill's error (here: the tag at its max_value) is told only to
# roles that may draw the tag; the others get 42501
$node->safe_psql('postgres',
	"UPDATE leaf_id_catalog.leaf_alloc SET draw_role = 'orders_app' WHERE biz_tag = 'batch'; SELECT leaf_id_reset_cache()");
$r = as('mallory', "SELECT leaf_segment_next('batch')");
is($r->{sqlstate}, '42501', "a role that may not draw the exhausted tag gets 42501, not its 2200H") or diag $r->{err};
$r = as('alice', "SELECT leaf_segment_next('batch')");
is($r->{sqlstate}, '2200H', 'a member gets the 2200H') or diag $r->{err};

$node->restart;
$r = try_sql($node, 'postgres', "SELECT leaf_segment_next('small')");
is($r->{sqlstate}, '2200H', 'after a restart the tag is still at its max_value') or diag $r->{out};
$node->safe_psql('postgres', "UPDATE leaf_id_catalog.leaf_alloc SET max_value = 40 WHERE biz_tag = 'small'");
$r = try_sql($node, 'postgres', "SELECT leaf_segment_next('small') FROM generate_series(1, 5)");
my @after = split /\n/, $r->{out};
ok(@after == 5 && $after[0] > 25 && $after[-1] <= 40, "with max_value raised to 40 it goes on above 25 (@after)")
  or diag $r->{err};

# --- C. adoption of integer columns ------------------------------------------
$node->safe_psql(
	'postgres', q{
CREATE TABLE t_int (id serial PRIMARY KEY, v int);
CREATE TABLE t_small (id smallserial PRIMARY KEY, v int);
CREATE TABLE t_big (id bigserial PRIMARY KEY, v int);
CREATE TABLE t_capped (id bigserial PRIMARY KEY, v int);
ALTER SEQUENCE t_capped_id_seq MAXVALUE 5000;
INSERT INTO t_int (v) VALUES (1), (2);
SELECT leaf_segment_adopt_sequence('t_int_id_seq', 'adopted_int', 10);
SELECT leaf_segment_adopt_sequence('t_small_id_seq', 'adopted_small', 10);
SELECT leaf_segment_adopt_sequence('t_big_id_seq', 'adopted_big', 10);
SELECT leaf_segment_adopt_sequence('t_capped_id_seq', 'adopted_capped', 10);
});
is($node->safe_psql('postgres',
		"SELECT string_agg(biz_tag || '=' || coalesce(max_value::text, 'NULL'), ',' ORDER BY biz_tag) "
		  . "FROM leaf_id_catalog.leaf_alloc WHERE biz_tag LIKE 'adopted%'"),
	'adopted_big=NULL,adopted_capped=5000,adopted_int=2147483647,adopted_small=32767',
	"adoption sets max_value to the largest value of the column's type and the sequence's MAXVALUE");
$node->safe_psql('postgres', "UPDATE leaf_id_catalog.leaf_alloc SET max_id = 2147483640 WHERE biz_tag = 'adopted_int'");
$r = try_sql($node, 'postgres', "INSERT INTO t_int (v) VALUES (0);\n" x 10 . "SELECT max(id) FROM t_int;");
is($r->{sqlstate}, '2200H', "the integer column's inserts stop with 2200H, not 22003") or diag $r->{err};
is($node->safe_psql('postgres', "SELECT count(*) || ' ' || max(id) FROM t_int WHERE id >= 2147483640"),
	'8 2147483647', 'after inserting up to 2147483647, the largest integer');

$node->stop;
done_testing();
