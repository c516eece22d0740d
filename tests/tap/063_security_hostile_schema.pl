# Security: the database owner is not a superuser, but owns the schema that
# leaf_id lives in (public belongs to pg_database_owner). She renames it to
# names built to end a string literal, a dollar quote or an identifier early
# and call her function, and plants that function; segment refills, worker-id
# claims and snowflake renewals (all run by the superuser worker) must go on
# under every name, and her function must never run as a superuser. Tags and
# the node name are hostile too. And while a worker's job runs, the schema
# cannot be renamed under it (the job locks the schema's name). Nor does her
# ALTER DATABASE ... SET role make the workers' jobs hers.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;
use HostileNames;

my $node = leaf_node('hostile', "leaf_id.tag_resync_interval = 1\nleaf_id.heartbeat_interval = 500\n");
plant_mallory($node);
my $tags = join ', ', map { "('" . ($_ =~ s/'/''/gr) . "', 5)" } HOSTILE_TAGS;
$node->safe_psql('postgres', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES $tags");

# the premise: pwn() run by a superuser is counted
$node->safe_psql('postgres', 'SELECT mallory.pwn()');
is(superuser_runs($node), '1,t', 'premise: pwn() run as a superuser is counted and works');
$node->safe_psql('postgres',
	"ALTER ROLE mallory NOSUPERUSER; SELECT setval('mallory.superuser_runs', 1, false)");
is(superuser_runs($node), '0,f', 'premise: the count starts at 0');

# a hostile node name, set by an operator, is only ever bound
$node->safe_psql('postgres',
	q{ALTER SYSTEM SET leaf_id.node_name = 'n''$leaf_id$\x"y'; SELECT pg_reload_conf()});

my $schema = 'public';
my $round = 0;
for my $name (HOSTILE_SCHEMA_NAMES)
{
	$round++;
	$schema = hostile_round(node => $node, from => $schema, to => $name, round => $round);
}
my $qs = quote_ident($schema);
is( $node->safe_psql('postgres', "SELECT DISTINCT node_name FROM leaf_id_catalog.leaf_worker WHERE owner_token IS NOT NULL"),
	q{n'$leaf_id$\x"y},
	'the hostile node name is the claimed row\'s name');

# A job's transaction locks the schema's name: a refill that takes 3 s (a
# superuser's trigger on leaf_alloc sleeps) holds off mallory's rename.
$node->safe_psql('postgres', qq{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('slow', 1000000);
CREATE SCHEMA ops;
CREATE FUNCTION ops.slow() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN IF NEW.biz_tag = 'slow' THEN PERFORM pg_catalog.pg_sleep(1.5); END IF; RETURN NEW; END \$\$;
CREATE TRIGGER slow BEFORE UPDATE ON leaf_id_catalog.leaf_alloc FOR EACH ROW EXECUTE FUNCTION ops.slow();
});
my $draw = $node->background_psql('postgres');
$draw->query_until(qr/started/, qq{\\echo started\nSELECT $qs.leaf_segment_next('slow');\n});
# the refill's first update has begun sleeping
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'leaf_id segment worker' AND wait_event = 'PgSleep'")
  or die 'the refill did not start';
my ($ret, $out, $err) = $node->psql('postgres',
	"SET ROLE mallory; SET lock_timeout = '500ms'; ALTER SCHEMA $qs RENAME TO renamed_midway");
isnt($ret, 0, 'a rename while a refill runs waits for it');
like($err, qr/lock timeout/, 'the rename waited for the refill (lock timeout)');
$draw->quit;
is($node->safe_psql('postgres', "SELECT nspname FROM pg_namespace WHERE nspname = 'renamed_midway'"),
	'', 'the schema kept its name');

# The database owner sets the role of every session of her database to her
# own; the workers, connected again, still run as the bootstrap superuser.
$node->safe_psql('postgres', 'SET ROLE mallory; ALTER DATABASE postgres SET role = mallory');
is($node->safe_psql('postgres', 'SELECT current_user'), 'mallory', 'premise: a new session of the database is mallory');
{
	# (as the bootstrap superuser: to mallory, pg_stat_activity hides the
	# workers' backend_type, and the poll would end at once)
	local $ENV{PGOPTIONS} = '-c role=none';
	is($node->safe_psql('postgres', 'SELECT current_user'), $node->safe_psql('postgres', 'SELECT session_user'),
		'premise: the poll runs as the bootstrap superuser');
	cmp_ok($node->safe_psql('postgres', q{SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		  WHERE backend_type LIKE 'leaf_id % worker'}), '>=', 1, 'premise: workers were running, and are told to stop');
	$node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type LIKE 'leaf_id % worker'})
	  or die 'the workers did not leave';
}
$node->safe_psql('postgres', "SET ROLE NONE; INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('after_set_role', 5)");
my $r = try_sql($node, 'postgres', "SELECT $qs.leaf_segment_next('after_set_role'), $qs.leaf_snowflake_next() IS NOT NULL");
is($r->{ret}, 0, 'with role = mallory set for the database, a refill and a claim by new workers work')
  or diag $r->{err};
is($r->{out}, '1|t', 'and return IDs');
$node->safe_psql('postgres', 'ALTER DATABASE postgres RESET role');
is(superuser_runs($node), '0,f', "at the end, nothing of mallory's ran as a superuser");

done_testing();
