# leaf_id snowflake mode: changing leaf_id.epoch_ms between restarts.
#
# The persisted high-water mark (leaf_worker.last_timestamp) is in Unix ms, so
# it bounds the clock, not the ID values. Moving the epoch later by D ms makes
# the IDs of "now" equal to the IDs issued D ms ago under the same worker id.
# THE RULE: no ID is handed out twice per worker id - after such a change the
# new IDs must still be above the earlier ones, or the calls must be refused.
#
# leaf_id.random_sequence_start = off: every millisecond starts at sequence 0,
# so a millisecond value issued twice yields a literal duplicate.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use constant LEAF_EPOCH_MS => 1288834974657;

# Run SQL with verbose errors. Returns (rc, stdout, stderr, sqlstate).
sub try_sql
{
	my ($node, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql(
		'postgres', "\\set VERBOSITY verbose\n$sql",
		stdout => \$out,
		stderr => \$err,
		timeout => 60);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($rc, $out, $err, $state);
}

my $node = PostgreSQL::Test::Cluster->new('snowflake_epoch');
$node->init;
$node->append_conf('postgresql.conf', <<'CONF');
shared_preload_libraries = 'leaf_id'
log_statement = none
leaf_id.random_sequence_start = off
leaf_id.worker_id = 3
CONF
$node->start;
$node->safe_psql('postgres', <<'SQL');
CREATE EXTENSION leaf_id;
CREATE TABLE ids (phase int NOT NULL, id bigint NOT NULL);
SQL

# phase 1: IDs over about 2 s
my $batches = join("\n",
	map { "INSERT INTO ids SELECT 1, leaf_snowflake_next() FROM generate_series(1, 2000); SELECT pg_sleep(0.05);" }
	  1 .. 30);
$node->safe_psql('postgres', $batches);
my $p1_min_ms = $node->safe_psql('postgres',
	'SELECT (min(id) >> 22) + ' . LEAF_EPOCH_MS . ' FROM ids WHERE phase = 1');

# Restart with the epoch moved later, so that the first IDs after the restart
# (issued once the clock passes the persisted mark M) encode like phase 1:
# shift = M - start of phase 1 (+ a margin; M may grow by one more renewal).
my $mark = $node->safe_psql('postgres', 'SELECT last_timestamp FROM leaf_worker WHERE worker_id = 3');
my $shift = $mark - $p1_min_ms + 300;
my $new_epoch = LEAF_EPOCH_MS + $shift;
note "epoch moved later by $shift ms";
$node->append_conf('postgresql.conf', "leaf_id.epoch_ms = '$new_epoch'\n");
$node->restart;

my $t0 = time;
my ($issued, @errors) = (0);
my ($rc, $out, $err, $state);
while (time - $t0 < 8)
{
	($rc, $out, $err, $state) = try_sql($node,
		'INSERT INTO ids SELECT 2, leaf_snowflake_next() FROM generate_series(1, 20000)');
	if ($rc == 0) { $issued++; }
	else { push @errors, [ $state // 'none', $err ]; usleep(100_000); }
	last if $issued >= 25;
}
note "after the epoch change: $issued batches issued, " . scalar(@errors) . ' refused';
note 'first refusal: ' . $errors[0][1] if @errors;

is($node->safe_psql('postgres',
		'SELECT count(*) FROM ids a JOIN ids b USING (id) WHERE a.phase = 1 AND b.phase = 2'),
	'0', 'no ID of before the epoch change was handed out again');
if ($issued > 0)
{
	is( $node->safe_psql(
			'postgres', q{
SELECT (SELECT min(id) FROM ids WHERE phase = 2) > (SELECT max(id) FROM ids WHERE phase = 1)}),
		't',
		'IDs after the epoch change are above the IDs before it');
}
else
{
	pass('the calls were refused after the epoch change');
}

$node->stop;
done_testing();
