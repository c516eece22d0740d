# A role with no grants must not be able to stop a database's IDs through
# the lock queue. PREPARE takes AccessShareLock on the relations it names
# while parsing, before any privilege check, and holds it to the end of the
# transaction; CREATE RULE, CREATE TRIGGER and LOCK ask for their lock before
# they check ownership, and wait in the queue. With both, every refill and
# renewal queued its RowExclusiveLock behind the waiting request and failed
# with 55P03 after the worker's lock_timeout, for as long as the first
# session stayed open. From catalog 0.7.0 the tables live in leaf_id_catalog,
# which only the extension's owner may use: naming them fails with "permission
# denied for schema" (42501) before any lock is asked for.
#
# As role u (no grants), on each table the workers lock: the two sessions of
# the attack, then a refill of a new tag (which must take its row lock on
# leaf_alloc), a snowflake claim (leaf_worker), and an opaque tag's refill
# (leaf_opaque_domain, leaf_alloc_encoding); and the same as the database
# owner, who owns public and may create schemas. A tag admin (USAGE on the
# schema, INSERT/UPDATE on leaf_alloc) can still name the table, as a
# sequence owner can lock a sequence: the docs say so.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;
use Time::HiRes qw(time);

my $node = leaf_node('lock_queue', "leaf_id.tag_resync_interval = 1\n");
$node->safe_psql('postgres', q{
CREATE ROLE u LOGIN;
CREATE ROLE owner_role LOGIN;
CREATE DATABASE owned OWNER owner_role;
});
$node->safe_psql('owned', q{
CREATE EXTENSION leaf_id;
SELECT leaf_opaque_create('d', 40);
});

my @tables = qw(leaf_alloc leaf_worker leaf_opaque_domain leaf_alloc_encoding leaf_alloc_tuning);
for my $who ('u', 'owner_role')
{
	for my $t (@tables)
	{
		my $r = try_sql($node, 'owned',
			"SET ROLE $who; BEGIN; PREPARE p AS SELECT 1 FROM leaf_id_catalog.$t; COMMIT");
		is($r->{sqlstate}, '42501', "$who: PREPARE naming leaf_id_catalog.$t is refused (42501)")
		  or diag $r->{err};
		like($r->{err}, qr/permission denied for schema leaf_id_catalog/, "$who: ... by the schema, before any lock");
		for my $ddl ("CREATE RULE r AS ON INSERT TO leaf_id_catalog.$t DO INSTEAD NOTHING",
			"CREATE TRIGGER t BEFORE UPDATE ON leaf_id_catalog.$t FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()",
			"BEGIN; LOCK TABLE leaf_id_catalog.$t IN ACCESS SHARE MODE; COMMIT")
		{
			$r = try_sql($node, 'owned', "SET ROLE $who; SET lock_timeout = '2s'; $ddl");
			my ($what) = $ddl =~ /^(?:BEGIN; )?(\w+ \w+)/;
			is($r->{sqlstate}, '42501', "$who: $what on $t: 42501 at once")
			  or diag $r->{err};
		}
	}
	# the database owner's own schema cannot stand in for the tables' one
	my $r = try_sql($node, 'owned', "SET ROLE $who; CREATE SCHEMA leaf_id_catalog");
	is($r->{sqlstate}, $who eq 'u' ? '42501' : '42P06', "$who: cannot make another leaf_id_catalog")
	  or diag $r->{err};
}

# --- the lock-queue attack, as u, held open while IDs are drawn --------------
# session 1 would hold AccessShareLock from its PREPARE; it cannot, so it holds
# nothing. Session 2's CREATE RULE fails at once instead of waiting in the
# queue. Every kind of job then runs within its first try.
# (the tags exist before: their first refills must lock their rows)
$node->safe_psql('owned', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('open', 1000);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant)
  VALUES ('secret', 100, 'd', leaf_opaque_grant('d', 'secret', 1));
});
my $s1 = $node->background_psql('owned', on_error_stop => 0);
$s1->query(q{SET ROLE u; BEGIN; SELECT 1});
$s1->query(q{PREPARE p AS SELECT 1 FROM leaf_id_catalog.leaf_alloc});
like($s1->{stderr}, qr/permission denied for schema/, 'session 1 (u): PREPARE refused inside its open transaction');
# (session 2's statement is left running: were it let into the queue, it
# would wait there, up to its own lock_timeout, while the IDs are drawn)
my $s2 = $node->background_psql('owned', on_error_stop => 0);
$s2->query_safe(q{SET ROLE u});
$s2->query_safe(q{SET lock_timeout = '15s'});
$s2->query_until(qr/started/,
	"\\echo started\nCREATE RULE r AS ON INSERT TO leaf_id_catalog.leaf_alloc DO INSTEAD NOTHING;\n");
Time::HiRes::sleep(0.5);
is( $node->safe_psql('owned', q{
SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE c.relnamespace = 'leaf_id_catalog'::regnamespace AND l.pid <> pg_backend_pid()}),
	'0', 'no lock on leaf_id\'s tables is held or queued by the two sessions');

my $t0 = time;
my $r = try_sql($node, 'owned', q{SET ROLE u; SET leaf_id.refill_timeout = 20000;
SELECT count(*) FROM leaf_segment_next('open', 5000);
SELECT count(DISTINCT leaf_segment_next('secret')) FROM generate_series(1, 300);
SELECT leaf_snowflake_next() > 0});
my $took = time - $t0;
is($r->{out}, "5000\n300\nt", 'u draws segment, opaque and snowflake IDs (refills and the claim) while both sessions are open')
  or diag $r->{err};
cmp_ok($took, '<', 4.5, sprintf('... without waiting for a lock (%.2f s, the workers\' lock_timeout is 5 s)', $took));
$s1->quit;
$s2->quit;

# --- the view over the tables ------------------------------------------------
# leaf_opaque_domains names no table: PREPARE on it (as u, with no grant on
# it) locks nothing of leaf_id's, so a database owner's VACUUM (FULL), which
# reaches the tables without naming them, cannot queue behind u's lock
my $s3 = $node->background_psql('owned', on_error_stop => 0);
$s3->query(q{SET ROLE u; BEGIN; PREPARE v AS SELECT * FROM leaf_opaque_domains});
is($s3->{stderr}, '', 'u: PREPARE of leaf_opaque_domains is accepted (the view is in the extension\'s schema)');
is( $node->safe_psql('owned', q{
SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE c.relnamespace = 'leaf_id_catalog'::regnamespace AND l.pid <> pg_backend_pid()}),
	'0', '... and holds no lock on leaf_id\'s tables');
$r = try_sql($node, 'owned', q{SET ROLE owner_role; SET lock_timeout = '5s'; VACUUM (FULL) leaf_id_catalog.leaf_alloc});
is($r->{sqlstate}, '42501', 'the database owner cannot name the table for VACUUM either');
$r = try_sql($node, 'owned', q{SET ROLE owner_role; SET lock_timeout = '5s'; VACUUM (FULL)});
is($r->{sqlstate}, undef, "the database owner's VACUUM (FULL) of the whole database is not held up by u") or diag $r->{err};
$r = try_sql($node, 'owned', q{SET ROLE u; SELECT * FROM leaf_opaque_domains});
is($r->{sqlstate}, '42501', 'u may not read leaf_opaque_domains (42501 when it runs)');
$node->safe_psql('owned', 'CREATE ROLE watcher IN ROLE pg_monitor');
$r = try_sql($node, 'owned', q{SET ROLE watcher; SELECT name || ':' || bits || ':' || tags::text FROM leaf_opaque_domains});
is($r->{out}, 'd:40:{secret}', 'a pg_monitor member reads leaf_opaque_domains') or diag $r->{err};
$s3->query('ROLLBACK');
$s3->quit;

# --- a tag admin can name the tables (as documented) -------------------------
$node->safe_psql('owned', q{
CREATE ROLE tag_admin LOGIN;
GRANT USAGE ON SCHEMA leaf_id_catalog TO tag_admin;
GRANT SELECT, INSERT, UPDATE ON leaf_id_catalog.leaf_alloc TO tag_admin;
});
$r = try_sql($node, 'owned', q{SET ROLE tag_admin;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('admin_tag', 10);
SELECT leaf_segment_next('admin_tag')});
is($r->{out}, '1', 'a tag admin with USAGE on leaf_id_catalog creates a tag, which draws') or diag $r->{err};

$node->stop;
done_testing();
