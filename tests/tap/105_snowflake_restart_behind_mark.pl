# leaf_id snowflake mode: the server restarts (after an immediate shutdown)
# with its clock behind the high-water mark persisted before.
#
# leaf_id.test_clock_offset_ms = -5000 in postgresql.conf moves the clock of
# the backends and of the background worker 5 s back. Until the clock passes
# the persisted mark, calls are refused with SQLSTATE 58000 saying by how many
# ms the clock is behind; once the offset is removed (reload) and the clock
# passes the mark, calls succeed and every new ID is larger than every ID
# issued before the restart.
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

my $behind_re =
  qr/clock is (\d+) ms behind the snowflake high-water mark persisted before the last restart/;

my $node = PostgreSQL::Test::Cluster->new('snowflake_behind_mark');
$node->init;
$node->append_conf('postgresql.conf', <<'CONF');
shared_preload_libraries = 'leaf_id'
leaf_id.lease_ahead = 3000
leaf_id.heartbeat_interval = 1000
CONF
$node->start;
$node->safe_psql('postgres', <<'SQL');
CREATE EXTENSION leaf_id;
CREATE TABLE ids (phase int NOT NULL, id bigint NOT NULL);
SQL

# Draw IDs over about 1.5 s, so that the worker renews the mark meanwhile.
$node->safe_psql('postgres', <<'SQL');
INSERT INTO ids SELECT 1, leaf_snowflake_next() FROM generate_series(1, 4000);
SELECT pg_sleep(0.3);
INSERT INTO ids SELECT 1, leaf_snowflake_next() FROM generate_series(1, 4000);
SELECT pg_sleep(0.3);
INSERT INTO ids SELECT 1, leaf_snowflake_next() FROM generate_series(1, 4000);
SELECT pg_sleep(0.3);
INSERT INTO ids SELECT 1, leaf_snowflake_next() FROM generate_series(1, 4000);
SELECT pg_sleep(0.3);
INSERT INTO ids SELECT 1, leaf_snowflake_next() FROM generate_series(1, 4000);
SQL
my $worker_id = $node->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status');
my $max1_ms   = $node->safe_psql('postgres',
	'SELECT (max(id) >> 22) + ' . LEAF_EPOCH_MS . ' FROM ids WHERE phase = 1');
my $mark_before = $node->safe_psql('postgres',
	"SELECT last_timestamp FROM leaf_worker WHERE worker_id = $worker_id");
cmp_ok($max1_ms, '<=', $mark_before, 'before the restart: no issued ms beyond the persisted mark');

$node->stop('immediate');
$node->append_conf('postgresql.conf', "leaf_id.test_clock_offset_ms = -5000\n");
$node->start;

# --- clock 5 s behind: refused ---------------------------------------------
my ($rc, $out, $err, $state) = try_sql($node, 'SELECT leaf_snowflake_next()');
isnt($rc, 0, 'clock behind the persisted mark: leaf_snowflake_next() fails');
is($state, '58000', 'clock behind the persisted mark: SQLSTATE 58000') or diag $err;
my ($n) = $err =~ $behind_re;
ok(defined $n, 'the message says the clock is N ms behind the persisted mark') or diag $err;
is($out, '', 'no ID is returned');

my ($floor_ms, $expected) = split /\|/, $node->safe_psql(
	'postgres', q{
SELECT (extract(epoch FROM restart_floor) * 1000)::bigint,
       (extract(epoch FROM restart_floor) * 1000)::bigint
       - ((extract(epoch FROM clock_timestamp()) * 1000)::bigint - 5000)
FROM leaf_snowflake_status});
note "behind by $n ms in the message; restart_floor $floor_ms, now (shifted) behind it by $expected ms";
ok(defined $n && $n > 0 && abs($n - $expected) < 1000,
	"the ms behind in the message ($n) match restart_floor - shifted clock ($expected)");
cmp_ok($floor_ms, '>=', $mark_before, 'restart_floor is the mark persisted before the shutdown (or later)');
is($node->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status'),
	$worker_id, 'the same worker id was claimed again');

# Still refused a second later, also inside an INSERT (nothing inserted).
sleep 1;
($rc, $out, $err, $state) =
  try_sql($node, 'INSERT INTO ids SELECT 2, leaf_snowflake_next() FROM generate_series(1, 100)');
is($state, '58000', 'a second later, still refused with 58000') or diag $err;
like($err, $behind_re, 'a second later: same message');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ids WHERE phase = 2'), '0', 'nothing was inserted');

# --- clock back on time (reload): succeeds once past the mark --------------
$node->adjust_conf('postgresql.conf', 'leaf_id.test_clock_offset_ms', '0');
$node->reload;

my $t0 = time;
my @errors;
my $first;
while (time - $t0 < 15)
{
	($rc, $out, $err, $state) =
	  try_sql($node, 'INSERT INTO ids SELECT 2, leaf_snowflake_next() RETURNING id');
	if ($rc == 0) { $first = $out; last; }
	push @errors, [ $state // 'none', $err ];
	usleep(100_000);
}
ok(defined $first, sprintf('offset removed: an ID is issued within 15 s (after %.1f s, %d refusals)',
	time - $t0, scalar @errors));
my @other = grep { !($_->[0] eq '58000' && $_->[1] =~ $behind_re) } @errors;
is(scalar(@other), 0, 'offset removed: the only refusals meanwhile were 58000 behind the persisted mark')
  or diag explain \@other;
$first //= 0;
cmp_ok(($first >> 22) + LEAF_EPOCH_MS, '>', $floor_ms,
	'the first new ID is of a millisecond after restart_floor');

$node->safe_psql('postgres',
	'INSERT INTO ids SELECT 2, leaf_snowflake_next() FROM generate_series(1, 20000)');
is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT min(id) FROM ids WHERE phase = 2) > (SELECT max(id) FROM ids WHERE phase = 1)}),
	't',
	'every ID after the restart is larger than every ID before it');
is($node->safe_psql('postgres', 'SELECT count(*) - count(DISTINCT id) FROM ids'),
	'0', 'no ID was issued twice');
is( $node->safe_psql(
		'postgres', q{SELECT count(DISTINCT d.worker_id) FROM ids, LATERAL leaf_snowflake_decode(id) d}),
	'1', 'all IDs carry the same worker id');

$node->stop;
done_testing();
