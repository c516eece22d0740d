# Security against a hostile database owner, a tag admin, pg_monitor members and
# hostile default privileges:
#  1. A database owner (mallory, not a superuser) renames the schema leaf_id
#     lives in (public belongs to pg_database_owner), makes a new public and
#     plants look-alikes of every table and function of leaf_id in it, each
#     calling her pwn() (tests/tap/HostileNames.pm), which counts every run as
#     a superuser. Then every SECURITY DEFINER function (encode, decode) and
#     every function a superuser or a grantee is documented to call runs:
#     none may run her code, encode/decode still give the right values, and
#     the superusers' PL/pgSQL functions refuse (55000) rather than resolve
#     the old name. While a superuser's function runs, the schema cannot be
#     renamed. The same with the extension in a schema of its own, and her
#     look-alikes in public, first on the caller's search_path.
#  2. A tag admin (only INSERT, UPDATE, SELECT on leaf_alloc, as
#     docs/privileges.md suggests) cannot make a tag issue the IDs of a
#     victim's opaque domain: a new tag, a plain tag switched, a copied
#     grant, and the victim's own max_id moved back (across a restart) are
#     all refused with 42501, and no ID is issued twice. A role that may
#     decode can grant.
#  9. leaf_segment_status hides an opaque tag's counters from a pg_monitor
#     member who may not decode.
#  (and the superusers' functions go on under a database owner's
#  quote_all_identifiers, installed or updated under it or not)
#  3. Under hostile ALTER DEFAULT PRIVILEGES (to a role r, to pg_monitor,
#     and EXECUTE taken from PUBLIC), a fresh install and every update path
#     end with the same full ACLs as a fresh install without them: r and
#     pg_monitor read no key and decode nothing.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;
use HostileNames;

my $node = leaf_node('round3', "leaf_id.tag_resync_interval = 1\n");
plant_mallory($node);
$node->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
CREATE ROLE decoder LOGIN;
CREATE ROLE tagadmin LOGIN;
GRANT EXECUTE ON FUNCTION leaf_opaque_encode(text, bigint), leaf_opaque_decode(text, bigint) TO app, decoder;
GRANT USAGE ON SCHEMA leaf_id_catalog TO tagadmin;
GRANT SELECT, INSERT, UPDATE ON leaf_id_catalog.leaf_alloc TO tagadmin;
SELECT leaf_opaque_create('d', 40);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant)
VALUES ('order', 100, 'd', leaf_opaque_grant('d', 'order', 1));
CREATE TABLE t (id bigserial PRIMARY KEY, v int);
INSERT INTO t (v) SELECT g FROM generate_series(1, 5) g;
CREATE TABLE u (id bigserial PRIMARY KEY, v int);
INSERT INTO u (v) SELECT g FROM generate_series(1, 5) g;
});
is(superuser_runs($node), '0,f', 'premise: nothing of mallory\'s ran yet');
my $enc7 = $node->safe_psql('postgres', "SELECT leaf_opaque_encode('d', 7)");

# --- 1a. the pin: a superuser's function holds the schema's name -------------
my $holder = $node->background_psql('postgres');
$holder->query_safe("BEGIN; SELECT leaf_opaque_create('held', 30);");
my $r = try_sql($node, 'postgres',
	"SET ROLE mallory; SET lock_timeout = '500ms'; ALTER SCHEMA public RENAME TO x");
is($r->{sqlstate}, '55P03', 'while leaf_opaque_create() runs, mallory cannot rename the schema')
  or diag $r->{err};
$holder->query_safe('ROLLBACK');
$holder->quit;

# --- 1b. look-alikes under the old name --------------------------------------
# Every function of leaf_id gets a twin in the new public that calls pwn();
# every table a copy with the same rows, whose writes fire pwn() (what reads
# them is caught by the functions' twins).
my $twins = $node->safe_psql('postgres', q{
SELECT string_agg(pg_catalog.format(
  'CREATE FUNCTION public.%I(%s) RETURNS %s LANGUAGE plpgsql AS $t$BEGIN PERFORM mallory.pwn(%L); RETURN NULL; END$t$;',
  p.proname, pg_get_function_identity_arguments(p.oid),
  CASE WHEN p.proretset THEN 'SETOF ' ELSE '' END || CASE WHEN p.prorettype = 'record'::regtype THEN 'record'
       WHEN p.prorettype = 'void'::regtype THEN 'text' ELSE format_type(p.prorettype, NULL) END,
  p.proname), E'\n')
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leaf_id'
WHERE NOT p.proretset AND p.prorettype <> 'record'::regtype AND p.prorettype <> 'void'::regtype});
my @tables = qw(leaf_alloc leaf_worker leaf_opaque_domain leaf_alloc_tuning);
my $tables = join "\n", map {
	$node->safe_psql('postgres', qq{
SELECT format('CREATE TABLE public.%I (%s);', c.relname,
              string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum))
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE c.oid = 'leaf_id_catalog.$_'::regclass GROUP BY c.relname})
	  . "CREATE TRIGGER pwn BEFORE INSERT OR UPDATE OR DELETE ON public.$_ FOR EACH ROW EXECUTE FUNCTION mallory.pwn_trigger();"
} @tables;
$r = try_sql($node, 'postgres', qq{
SET ROLE mallory;
ALTER SCHEMA public RENAME TO real;
CREATE SCHEMA public;
CREATE FUNCTION mallory.pwn_trigger() RETURNS trigger LANGUAGE plpgsql AS \$t\$
BEGIN PERFORM mallory.pwn('trigger'); RETURN NEW; END \$t\$;
$tables
$twins
});
is($r->{ret}, 0, 'mallory renamed public to real and planted look-alikes of every table and function in a new public')
  or diag $r->{err};
# the look-alikes get the real rows (copied by a superuser, triggers off)
$node->safe_psql('postgres', "SET session_replication_role = replica;\n"
	  . join("\n", map { "INSERT INTO public.$_ SELECT * FROM leaf_id_catalog.$_;" } @tables));
is($node->safe_psql('postgres', 'SELECT count(*) FROM public.leaf_opaque_domain'), '1',
	'premise: the look-alike key table has the domains');
is(superuser_runs($node), '0,f', 'premise: planting ran nothing of mallory\'s as a superuser');
cmp_ok(scalar(() = $twins =~ /CREATE FUNCTION/g), '>=', 15, 'premise: the look-alikes cover leaf_id\'s functions');

# the grantee's encode and decode: bound by OID, right values
$r = try_sql($node, 'postgres',
	"SET ROLE app; SELECT real.leaf_opaque_encode('d', 7), real.leaf_opaque_decode('d', $enc7)");
is($r->{out}, "$enc7|7", 'a grantee\'s encode and decode give the domain\'s values after the rename')
  or diag $r->{err};
$r = try_sql($node, 'postgres',
	"SET ROLE app; SET search_path = public, real; SELECT real.leaf_opaque_decode('d', $enc7)");
is($r->{out}, '7', '... also with the look-alikes first on the caller\'s search_path') or diag $r->{err};
# the superusers' PL/pgSQL functions refuse under the old name
for my $call (
	q{real.leaf_opaque_create('e', 30)},
	q{real.leaf_opaque_drop('held')},
	q{real.leaf_snowflake_release_worker_id(5)},
	q{real.leaf_segment_adopt_sequence('real.t_id_seq', 'adopted')},
	q{real.leaf_snowflake_adopt_sequence('real.u_id_seq')},
	q{real.leaf_id_adopt_sequence('real.t_id_seq', 'NULL', false)})
{
	$r = try_sql($node, 'postgres', "SELECT $call");
	is($r->{sqlstate}, '55000', "superuser's $call after the rename: refused with 55000") or diag $r->{err};
}
# what reads the key in Rust finds the schema by OID
$r = try_sql($node, 'postgres', q{SET ROLE decoder; SELECT real.leaf_opaque_grant('d', 'order', 1) IS NOT NULL});
is($r->{out}, 't', 'a decoder\'s leaf_opaque_grant() works after the rename') or diag $r->{err};
$r = try_sql($node, 'postgres',
	q{SELECT count(DISTINCT real.leaf_segment_next('order')) FROM generate_series(1, 300);
	  SELECT count(*) FROM real.leaf_segment_status; SELECT count(*) FROM real.leaf_opaque_domains});
is($r->{ret}, 0, 'drawing, the status view and the domains view work after the rename') or diag $r->{err};
is(superuser_runs($node), '0,f', 'nothing of mallory\'s ran as a superuser (extension in public)');

# and once the name is back, the superusers' functions work again
$node->safe_psql('postgres', q{SET ROLE mallory; DROP SCHEMA public CASCADE; ALTER SCHEMA real RENAME TO public});
$r = try_sql($node, 'postgres', q{SELECT leaf_opaque_create('e', 30), leaf_opaque_drop('e')});
is($r->{ret}, 0, 'with the name back, the superusers\' functions work') or diag $r->{err};

# --- 1c. the extension in a schema of its own ----------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE own OWNER mallory');
$node->safe_psql('own', q{
CREATE SCHEMA leaf;
CREATE EXTENSION leaf_id SCHEMA leaf;
CREATE ROLE app2 LOGIN;
GRANT USAGE ON SCHEMA leaf TO app2;
GRANT EXECUTE ON FUNCTION leaf.leaf_opaque_decode(text, bigint), leaf.leaf_opaque_encode(text, bigint) TO app2;
SELECT leaf.leaf_opaque_create('d', 40);
CREATE TABLE t (id bigserial PRIMARY KEY, v int);
INSERT INTO t (v) SELECT g FROM generate_series(1, 5) g;
CREATE TABLE u (id bigserial PRIMARY KEY, v int);
INSERT INTO u (v) SELECT g FROM generate_series(1, 5) g;
CREATE SEQUENCE own_runs;
GRANT USAGE, UPDATE, SELECT ON SEQUENCE own_runs TO PUBLIC;
});
my $own_twins = $twins =~ s/mallory\.pwn\(/public.own_pwn(/gr;
$r = try_sql($node, 'own', qq{
SET ROLE mallory;
CREATE FUNCTION public.own_pwn(what text) RETURNS text LANGUAGE plpgsql AS \$t\$
BEGIN
  IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
    PERFORM pg_catalog.nextval('public.own_runs');
  END IF;
  RETURN 'pwned';
END \$t\$;
$own_twins
});
is($r->{ret}, 0, 'own schema: mallory planted look-alikes in public') or diag $r->{err};
my $own7 = $node->safe_psql('own', "SELECT leaf.leaf_opaque_encode('d', 7)");
$r = try_sql($node, 'own',
	"SET ROLE app2; SET search_path = public, leaf; SELECT leaf.leaf_opaque_decode('d', $own7)");
is($r->{out}, '7', 'own schema: a grantee\'s decode, look-alikes first on the search_path') or diag $r->{err};
for my $call (
	q{leaf.leaf_opaque_create('e', 30), leaf.leaf_opaque_drop('e')},
	q{leaf.leaf_segment_adopt_sequence('t_id_seq', 'adopted')},
	q{leaf.leaf_snowflake_adopt_sequence('u_id_seq')},
	q{leaf.leaf_opaque_grant('d', 'x', 1)},
	q{count(DISTINCT leaf.leaf_segment_next('adopted')) FROM generate_series(1, 50)},
	q{leaf.leaf_snowflake_next()})
{
	$r = try_sql($node, 'own', "SET search_path = public, leaf; SELECT $call");
	is($r->{ret}, 0, "own schema: a superuser's $call works") or diag $r->{err};
}
my $wid = $node->safe_psql('own', 'SELECT worker_id FROM leaf.leaf_snowflake_status');
$r = try_sql($node, 'own', "SET search_path = public, leaf; SELECT leaf.leaf_snowflake_release_worker_id($wid)");
is($r->{ret}, 0, 'own schema: a superuser\'s release works') or diag $r->{err};
is($node->safe_psql('own', q{SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.own_runs}),
	'0', 'own schema: nothing of mallory\'s ran as a superuser');

# --- 2. the tag admin's probes -------------------------------------------------
my @victim = split /\n/, $node->safe_psql('postgres',
	q{SELECT leaf_segment_next('order') FROM generate_series(1, 500)});
my $victim_grant = $node->safe_psql('postgres', q{SELECT opaque_grant FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'order'});
my %probe = (
	'a new tag with the victim\'s domain (insert)' =>
	  q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, opaque_domain) VALUES ('probe1', 1, 1000, 'd')},
	'a new tag with a copied grant (insert)' =>
	  qq{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, opaque_domain, opaque_grant) VALUES ('probe2', 1, 1000, 'd', $victim_grant)},
	'a plain tag switched to the domain (update)' =>
	  q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('probe3', 1, 1000);
	    UPDATE leaf_id_catalog.leaf_alloc SET opaque_domain = 'd' WHERE biz_tag = 'probe3'},
);
for my $what (sort keys %probe)
{
	my ($tag) = $probe{$what} =~ /'(probe\d)'/;
	$r = try_sql($node, 'postgres', "SET ROLE tagadmin; $probe{$what}");
	is($r->{ret}, 0, "tag admin: $what is written") or diag $r->{err};
	$r = try_sql($node, 'postgres', "SET ROLE tagadmin; SELECT count(*) FROM leaf_segment_next('$tag', 1000)");
	is($r->{sqlstate}, '42501', "tag admin: $what draws nothing (42501)") or diag $r->{err};
}
$r = try_sql($node, 'postgres', q{SET ROLE tagadmin; SELECT leaf_opaque_grant('d', 'probe1', 1)});
is($r->{sqlstate}, '42501', 'tag admin: leaf_opaque_grant() is refused (42501)') or diag $r->{err};
# the victim's own max_id moved back, across a restart (no reserved range
# of this lifetime protects it then)
$node->safe_psql('postgres', q{SET ROLE tagadmin; UPDATE leaf_id_catalog.leaf_alloc SET max_id = 1 WHERE biz_tag = 'order'});
$node->restart;
$r = try_sql($node, 'postgres', q{SELECT count(*) FROM leaf_segment_next('order', 1000)});
is($r->{sqlstate}, '42501', 'tag admin: the victim\'s max_id moved back is refused after a restart (42501)')
  or diag $r->{err};
# a decoder grants, and the tag works
$r = try_sql($node, 'postgres',
	q{SET ROLE decoder; SELECT leaf_opaque_grant('d', 'probe1', 1)});
my $g = $r->{out};
$node->safe_psql('postgres', "UPDATE leaf_id_catalog.leaf_alloc SET opaque_grant = $g WHERE biz_tag = 'probe1'");
$r = try_sql($node, 'postgres', q{SELECT count(DISTINCT x) FROM leaf_segment_next('probe1', 100) x});
is($r->{out}, '100', 'a decoder\'s grant lets the tag issue its IDs') or diag $r->{err};
# the victim's row put back by a superuser (with a grant of its max_id)
$node->safe_psql('postgres', q{UPDATE leaf_id_catalog.leaf_alloc SET max_id = 100000, opaque_grant = leaf_opaque_grant('d', 'order', 100000)
  WHERE biz_tag = 'order'});
my @after = split /\n/, $node->safe_psql('postgres', q{SELECT leaf_segment_next('order') FROM generate_series(1, 500)});
my %seen = map { $_ => 1 } @victim;
is(scalar(grep { $seen{$_} } @after), 0, 'no ID of the victim\'s tag was issued twice');

# --- 9. the counters of opaque tags are hidden from monitoring without decode ---
$node->safe_psql('postgres', q{
CREATE ROLE watcher LOGIN IN ROLE pg_monitor;
GRANT pg_monitor TO decoder;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('plainx', 10);
SELECT leaf_segment_next('plainx'), leaf_segment_next('order');
});
my $hidden = q{SELECT string_agg(tag || ':' || (buffer0_start IS NULL AND buffer0_next IS NULL AND buffer0_end IS NULL
  AND buffer1_start IS NULL AND buffer1_next IS NULL AND buffer1_end IS NULL AND refills IS NULL
  AND dynamic_step IS NULL AND last_refill IS NULL AND current_buffer IS NULL AND next_ready IS NULL
  AND refill_in_flight IS NULL AND waits IS NULL)::text
  || ':' || (opaque_bits IS NOT NULL)::text, ',' ORDER BY tag)
  FROM leaf_segment_status WHERE tag IN ('order', 'plainx')};
$r = try_sql($node, 'postgres', "SET ROLE watcher; $hidden");
is($r->{out}, 'order:true:true,plainx:false:false',
	'pg_monitor without decode: an opaque tag\'s segments, refills and what times its switches (current segment, next ready, refill in flight, waits) are NULL, a plain tag\'s shown') or diag $r->{err};
$r = try_sql($node, 'postgres', "SET ROLE decoder; $hidden");
is($r->{out}, 'order:false:true,plainx:false:false', 'pg_monitor with decode: both shown') or diag $r->{err};

# --- 3. privileges on every path under hostile default privileges --------------
$node->safe_psql('postgres', 'CREATE ROLE r');
my $hostile = q{
ALTER DEFAULT PRIVILEGES GRANT SELECT, INSERT, UPDATE ON TABLES TO r, pg_monitor;
ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO r, pg_monitor;
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON TABLES TO r;
ALTER DEFAULT PRIVILEGES GRANT USAGE, CREATE ON SCHEMAS TO r, pg_monitor, PUBLIC;
};
# (each ACL as its sorted entries: grantee, privilege, grantor; the order of
# an ACL's entries depends on the order of the grants)
my $acls = q{
CREATE OR REPLACE FUNCTION pg_temp.entries(acl aclitem[], kind "char", owner oid) RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(e, ',' ORDER BY e) FROM (
    SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END || ':' || a.privilege_type
           || ':' || a.grantor::regrole::text AS e
      FROM aclexplode(COALESCE(acl, acldefault(kind, owner))) a) x $$;
SELECT string_agg(line, E'\n' ORDER BY line) FROM (
  SELECT 'rel ' || c.relname || ' ' || pg_temp.entries(c.relacl, 'r', c.relowner) AS line
    FROM pg_depend d JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
   WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'leaf_id') AND d.deptype = 'e'
  UNION ALL
  SELECT 'nsp ' || n.nspname || ' ' || pg_temp.entries(n.nspacl, 'n', n.nspowner)
    FROM pg_depend d JOIN pg_namespace n ON d.classid = 'pg_namespace'::regclass AND n.oid = d.objid
   WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'leaf_id') AND d.deptype = 'e'
  UNION ALL
  SELECT 'fn ' || d.objid::regprocedure || ' ' || pg_temp.entries(p.proacl, 'f', p.proowner)
    FROM pg_depend d JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
   WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'leaf_id') AND d.deptype = 'e'
  UNION ALL
  -- (no row: the default, as pg_dump takes it)
  SELECT 'initprivs ' || pg_describe_object(d.classid, d.objid, 0) || ' '
         || pg_temp.entries(i.initprivs, (CASE WHEN p.oid IS NOT NULL THEN 'f' WHEN n.oid IS NOT NULL THEN 'n' ELSE 'r' END)::"char",
                            COALESCE(p.proowner, c.relowner, n.nspowner))
    FROM pg_depend d
    LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
    LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
    LEFT JOIN pg_namespace n ON d.classid = 'pg_namespace'::regclass AND n.oid = d.objid
    LEFT JOIN pg_init_privs i ON i.classoid = d.classid AND i.objoid = d.objid AND i.objsubid = 0
   WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'leaf_id') AND d.deptype = 'e'
     AND (p.oid IS NOT NULL OR n.oid IS NOT NULL OR c.relkind IN ('r', 'p', 'v', 'm'))
) x};
$node->safe_psql('postgres', 'CREATE DATABASE reference');
$node->safe_psql('reference', 'CREATE EXTENSION leaf_id');
my $want = $node->safe_psql('reference', $acls);
cmp_ok(scalar(split /\n/, $want), '>', 25, 'premise: the ACL listing covers the catalog');
for my $path (['fresh', undef], ['from060', '0.6.0'], ['from052', '0.5.2'], ['from051', '0.5.1'], ['from050', '0.5.0'], ['from040', '0.4.0'], ['from030', '0.3.0'], ['from020', '0.2.0'], ['from010', '0.1.0'])
{
	my ($db, $from) = @$path;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, $hostile);
	if (defined $from)
	{
		$node->safe_psql($db, "CREATE EXTENSION leaf_id VERSION '$from'; ALTER EXTENSION leaf_id UPDATE");
	}
	else
	{
		$node->safe_psql($db, 'CREATE EXTENSION leaf_id');
	}
	my $got = $node->safe_psql($db, $acls);
	my $label = defined $from ? "the update from $from" : 'a fresh install';
	if ($got eq $want)
	{
		pass("$label under hostile default privileges: the same ACLs as a plain fresh install");
	}
	else
	{
		my %w = map { $_ => 1 } split /\n/, $want;
		my %g = map { $_ => 1 } split /\n/, $got;
		fail("$label under hostile default privileges: the same ACLs as a plain fresh install");
		diag "only here:\n  " . join("\n  ", grep { !$w{$_} } sort keys %g);
		diag "only in the reference:\n  " . join("\n  ", grep { !$g{$_} } sort keys %w);
	}
	$node->safe_psql($db, q{SELECT leaf_opaque_create('d')});
	for my $role ('r', 'pg_monitor')
	{
		my $q = try_sql($node, $db, "SET ROLE $role; SELECT count(*) FROM leaf_id_catalog.leaf_opaque_domain");
		is($q->{sqlstate}, '42501', "$label: $role cannot read the keys") or diag $q->{err};
		$q = try_sql($node, $db, "SET ROLE $role; SELECT leaf_opaque_decode('d', 1)");
		is($q->{sqlstate}, '42501', "$label: $role cannot decode") or diag $q->{err};
	}
	my $q = try_sql($node, $db, "CREATE ROLE plain_$db; SET ROLE plain_$db; SELECT leaf_snowflake_next() > 0");
	is($q->{out}, 't', "$label: PUBLIC may draw IDs") or diag $q->{err};
	$q = try_sql($node, $db, "SET ROLE plain_$db; PREPARE p AS SELECT 1 FROM leaf_id_catalog.leaf_alloc");
	is($q->{sqlstate}, '42501', "$label: PUBLIC cannot name leaf_id's tables") or diag $q->{err};
}

# --- quote_all_identifiers: a database owner may set it for her database ----
# The superusers' functions pin the extension's schema by its name; compared
# through quote_ident(), whose spelling the setting changes, they refused
# (55000) while it was on (0.5.1 below), or, installed under it, after it was
# reset. parse_ident() reads the name either way.
$node->safe_psql('postgres', 'CREATE DATABASE qai OWNER mallory; CREATE DATABASE qai051 OWNER mallory');
$node->safe_psql('qai051', "CREATE EXTENSION leaf_id VERSION '0.5.1'");
for my $db ('qai', 'qai051')
{
	my $q = try_sql($node, $db, "SET ROLE mallory; ALTER DATABASE $db SET quote_all_identifiers = on");
	is($q->{ret}, 0, "$db: the database owner sets quote_all_identifiers for it") or diag $q->{err};
}
my $q = try_sql($node, 'qai051', "SELECT leaf_opaque_create('q0', 30)");
is($q->{sqlstate}, '55000', "premise: 0.5.1's leaf_opaque_create refuses under the owner's quote_all_identifiers")
  or diag $q->{err};
$q = try_sql($node, 'qai051', "ALTER EXTENSION leaf_id UPDATE; SELECT leaf_opaque_create('q1', 30)");
is($q->{out}, 'q1', 'updated under it, leaf_opaque_create works') or diag $q->{err};
$q = try_sql($node, 'qai', "CREATE EXTENSION leaf_id; SELECT leaf_opaque_create('q1', 30)");
is($q->{out}, 'q1', 'installed under it, leaf_opaque_create works') or diag $q->{err};
$node->safe_psql('postgres', 'ALTER DATABASE qai RESET quote_all_identifiers; ALTER DATABASE qai051 RESET quote_all_identifiers');
for my $db ('qai', 'qai051')
{
	$q = try_sql($node, $db, q{
SELECT leaf_opaque_create('q2', 30), leaf_opaque_drop('q2');
INSERT INTO leaf_id_catalog.leaf_worker (worker_id, node_name) VALUES (901, 'gone-node');
SELECT leaf_snowflake_release_worker_id(901) IS NOT NULL;
CREATE TABLE qs (id bigserial PRIMARY KEY);
SELECT leaf_segment_adopt_sequence('qs_id_seq', 'qs', 10) > 0});
	is($q->{out}, "q2|q2
t
t", "$db, the setting reset: the superusers' functions work") or diag $q->{err};
}

$node->stop;
done_testing();
