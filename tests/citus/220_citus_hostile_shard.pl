# Security on Citus: the statements leaf_id's workers run
# on a node's copy of leaf_worker find the copy (the shard) by name. The
# database owner of worker2, not a superuser, owns public there (Debian's
# pg_database_owner), so with citus.enable_manual_changes_to_shards (a user
# setting) she can drop the shard and make a look-alike with a trigger that
# calls her pwn() (tests/tap/HostileNames.pm). Then:
#  - the other nodes' renewals of their rows on worker2's copy (a DO
#    statement sent to worker2) must refuse that copy (42501) before they
#    write, and never fire her trigger as a superuser;
#  - worker2's own worker must refuse its own copy (not a plain table of the
#    extension's owner), and fire nothing either;
#  - the coordinator and worker1 go on issuing snowflake IDs (2 of the 3
#    copies are a majority).
# Citus' own writes to the shards (a refill's UPDATE of the reference table
# leaf_alloc) are Citus', not leaf_id's: they are not tested here, and
# docs/citus.md says to keep leaf_id's schema away from non-superusers.
# From catalog 0.7.0 the shards are in leaf_id_catalog, which she may not
# use (tests/tap/087); the library still serves a 0.6.0 catalog, whose
# tables and shards are in public, so that is what this test runs on.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CitusTap;
use HostileNames;
use SegmentTap qw(try_sql wait_until);

my ($coord, @workers) = citus_cluster(conf => "leaf_id.heartbeat_interval = 500\nlog_min_messages = log\n", version => '0.6.0');
my ($w1, $w2) = @workers;
# every node claims its worker id
for my $n ($coord, @workers)
{
	my $r = try_sql($n, 'postgres', 'SELECT leaf_snowflake_next() > 0');
	is($r->{out}, 't', $n->name . ': issues snowflake IDs') or diag $r->{err};
}
plant_mallory($w2, 'SET citus.enable_ddl_propagation = off; ');
is(superuser_runs($w2), '0,f', 'premise: nothing of mallory\'s ran on worker2');

my $shard = shard_of($w2, 'leaf_worker');
like($shard, qr/^leaf_worker_\d+$/, "premise: worker2's copy of leaf_worker is $shard");
my $cols = $w2->safe_psql('postgres', qq{
SET citus.override_table_visibility = off;
SELECT string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum)
  FROM pg_attribute a WHERE a.attrelid = 'public.$shard'::regclass AND a.attnum > 0 AND NOT a.attisdropped});
# (in one transaction: a renewal between the DROP and the CREATE would find
# no copy, and the workers log a change of the copies missed, not of why, so
# the refusal checked below would not be logged)
my $r = try_sql($w2, 'postgres', qq{
SET citus.enable_ddl_propagation = off;
SET ROLE mallory;
SET citus.enable_manual_changes_to_shards = on;
SET citus.override_table_visibility = off;
BEGIN;
DROP TABLE public.$shard;
CREATE TABLE public.$shard ($cols);
CREATE FUNCTION mallory.pwn_trigger() RETURNS trigger LANGUAGE plpgsql AS \$t\$
BEGIN PERFORM mallory.pwn('trigger'); RETURN NEW; END \$t\$;
CREATE TRIGGER pwn BEFORE INSERT OR UPDATE OR DELETE ON public.$shard FOR EACH ROW EXECUTE FUNCTION mallory.pwn_trigger();
COMMIT;
});
is($r->{ret}, 0, 'mallory dropped worker2\'s shard of leaf_worker and made a look-alike with a trigger') or diag $r->{err};
# the look-alike gets the coordinator's and worker1's rows (copied by a
# superuser with triggers off), so that their renewals would update them
my $rows = $coord->safe_psql('postgres', q{
SELECT string_agg(format('(%s)', concat_ws(', ', worker_id, quote_literal(node_name), COALESCE(owner_token::text, 'NULL'),
  COALESCE(last_timestamp::text, 'NULL'), COALESCE(epoch_ms::text, 'NULL'))), ', ') FROM public.leaf_worker});
$w2->safe_psql('postgres', qq{
SET session_replication_role = replica; SET citus.enable_manual_changes_to_shards = on;
SET citus.override_table_visibility = off;
INSERT INTO public.$shard (worker_id, node_name, owner_token, last_timestamp, epoch_ms) VALUES $rows});
is(superuser_runs($w2), '0,f', 'premise: planting ran nothing of mallory\'s as a superuser');
# the premise that the test can fail: a superuser's write to the look-alike
# (rolled back) does run her trigger as a superuser; the count of runs is a
# sequence, which the rollback leaves, so it is set back after
$w2->safe_psql('postgres', qq{
BEGIN; SET LOCAL citus.enable_manual_changes_to_shards = on; SET LOCAL citus.override_table_visibility = off;
UPDATE public.$shard SET epoch_ms = epoch_ms;
ROLLBACK});
like(superuser_runs($w2), qr/^[1-9]\d*,f$/, 'premise: a superuser\'s write to the look-alike runs her trigger as a superuser');
$w2->safe_psql('postgres', q{SELECT setval('mallory.superuser_runs', 1, false)});
is(superuser_runs($w2), '0,f', 'premise: the count of runs set back');

# several heartbeats: the coordinator's and worker1's renewals reach worker2
my $offset = -s $coord->logfile;
sleep_full(4);
is(superuser_runs($w2), '0,f', 'after renewals from every node: nothing of mallory\'s ran as a superuser on worker2');
for my $n ($coord, $w1)
{
	$r = try_sql($n, 'postgres', 'SELECT count(DISTINCT leaf_snowflake_next()) FROM generate_series(1, 1000)');
	is($r->{out}, '1000', $n->name . ': still issues (two copies of three are a majority)') or diag $r->{err};
}
my $log = slurp_file($coord->logfile, $offset) . slurp_file($w1->logfile);
like($log, qr/is not leaf_id's copy of leaf_worker/, 'the renewals on worker2\'s look-alike were refused, saying why');
# worker2 draws for 4 s (longer than leaf_id.lease_ahead, 3 s): its worker
# renews on its own copy, the look-alike, and must refuse it
my ($w2_ok, $w2_refused, $w2_state, $w2_err) = (0, 0, '', '');
my $until = time + 4;
while (time < $until)
{
	my $q = try_sql($w2, 'postgres', 'SELECT count(*) FROM leaf_snowflake_next(100)');
	if ($q->{ret} == 0) { $w2_ok++ } else { $w2_refused++; $w2_state = $q->{sqlstate} // ''; $w2_err = $q->{err} }
	select(undef, undef, undef, 0.2);
}
note "worker2: $w2_ok batches issued, $w2_refused refused (last: $w2_state)";
cmp_ok($w2_refused, '>', 0, 'worker2 stops issuing once its lease needs its own copy');
is($w2_state, '42501', 'worker2\'s refusal is 42501');
like($w2_err, qr/this node's copy of leaf_worker \(leaf_worker_\d+\) is not a plain table of the extension's owner/,
	'worker2\'s own worker refuses its look-alike copy, saying why');
is(superuser_runs($w2), '0,f', 'at the end: nothing of mallory\'s ran as a superuser on worker2');
done_testing();
