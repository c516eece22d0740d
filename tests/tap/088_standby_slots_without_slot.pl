# leaf_id.synchronized_standby_slots where it finds no physical slot.
# '*' waits for every permanent physical slot of the server:
# with none, the workers' commits wait for no standby (a standby that streams
# without a slot, or a cascading standby, has no slot here), so what they
# reserve is used at once. Named slots that are missing confirm nothing, so
# every commit waits and fails. Both are worth a WARNING in the log, once per
# worker and setting, not at every refill.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;

my $node = leaf_node('no_slot', "leaf_id.synchronized_standby_slots = '*'\nleaf_id.standby_confirm_timeout = 1000\n");
$node->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('t', 10)});
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_replication_slots'), '0', 'premise: the server has no slot');

# --- '*' and no slot -----------------------------------------------------------
my $offset = -s $node->logfile;
my $r = try_sql($node, 'postgres', q{SELECT count(DISTINCT leaf_segment_next('t')) FROM generate_series(1, 200)});
is($r->{out}, '200', "'*' with no slot: IDs are issued (nothing is waited for)") or diag $r->{err};
cmp_ok($node->safe_psql('postgres', q{SELECT refills FROM leaf_segment_status WHERE tag = 't'}), '>=', 5,
	'premise: the segment worker committed several refills');
my $log = slurp_file($node->logfile, $offset);
my @warned = $log =~ /WARNING:  leaf_id\.synchronized_standby_slots is '\*' but this server has no permanent physical replication slot: the workers' commits wait for no standby/g;
is(scalar @warned, 1, "'*' with no slot: one WARNING for the segment worker, not one per refill");

# --- a named slot that does not exist --------------------------------------------
$node->safe_psql('postgres', q{ALTER SYSTEM SET leaf_id.synchronized_standby_slots = 'nosuch'; SELECT pg_reload_conf()});
$node->safe_psql('postgres', q{SELECT leaf_id_reset_cache()});
$offset = -s $node->logfile;
$r = try_sql($node, 'postgres', q{SET leaf_id.refill_timeout = 5000; SELECT leaf_segment_next('t')});
is($r->{sqlstate}, '55P03', 'a named slot that does not exist: the refill is not confirmed (55P03)') or diag $r->{err};
ok( wait_until(10, sub { slurp_file($node->logfile, $offset) =~
		  /WARNING:  leaf_id\.synchronized_standby_slots names no physical replication slot of this server: every commit of the workers waits for nosuch/ }),
	'a named slot that does not exist: a WARNING says so');

$node->stop;
done_testing();
