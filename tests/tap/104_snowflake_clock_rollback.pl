# leaf_id snowflake mode: the clock moving backwards while the server runs
# (simulated with leaf_id.test_clock_offset_ms in the session).
#
# - behind by <= leaf_id.max_backward_ms (3 ms here, default max 5): the call
#   waits it out and succeeds, the later ID is larger, rollback_events grows;
# - behind by 1000 ms: SQLSTATE 58000 "clock moved backwards: it is N ms
#   behind ...", with N the offset, and no ID is returned;
# - back on time, IDs continue above everything issued before.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SnowflakeTap;

sub rollback_events
{
	my $node = shift;
	return snowflake_status($node, 'rollback_events');
}

my $node = snowflake_node('snowflake_rollback', <<'CONF');
leaf_id.worker_id = 9
leaf_id.max_backward_ms = 5
CONF
$node->safe_psql('postgres', 'CREATE TABLE ids (id bigint NOT NULL)');
$node->safe_psql('postgres', 'INSERT INTO ids SELECT leaf_snowflake_next() FROM generate_series(1, 1000)');
is(rollback_events($node), '0', 'no rollback events yet');

# --- small rollback: 3 ms, within max_backward_ms ------------------------
# Both calls are in one statement, so the second sees the clock 3 ms behind
# the first unless more than 3 ms pass between them (then no rollback is
# seen: retry a few times, expecting a rollback event in most attempts).
my $seen_rollback = 0;
my $all_ok        = 1;
for my $attempt (1 .. 5)
{
	my $before = rollback_events($node);
	my $r = try_sql(
		$node, 'postgres', q{
SELECT a, b, b > a FROM (
  SELECT set_config('leaf_id.test_clock_offset_ms', '0', false) AS r0,
         leaf_snowflake_next() AS a,
         set_config('leaf_id.test_clock_offset_ms', '-3', false) AS r1,
         leaf_snowflake_next() AS b
) s});
	if ($r->{ret} != 0)
	{
		$all_ok = 0;
		diag "attempt $attempt failed: $r->{err}";
		next;
	}
	my ($a, $b, $gt) = split /\|/, $r->{out};
	$all_ok = 0 unless $gt eq 't';
	$node->safe_psql('postgres', "INSERT INTO ids VALUES ($a), ($b)");
	my $after = rollback_events($node);
	note "attempt $attempt: $a -> $b, rollback_events $before -> $after";
	if ($after > $before)
	{
		$seen_rollback = 1;
		last;
	}
}
ok($all_ok, 'clock 3 ms behind: every call succeeds and the second ID is larger than the first');
ok($seen_rollback, 'clock 3 ms behind: rollback_events increased');

# --- large rollback: 1000 ms ---------------------------------------------
my $before = rollback_events($node);
my $r = try_sql(
	$node, 'postgres', q{
SELECT leaf_snowflake_next(),
       set_config('leaf_id.test_clock_offset_ms', '-1000', false),
       leaf_snowflake_next()});
isnt($r->{ret}, 0, 'clock 1000 ms behind: the statement fails');
is($r->{sqlstate}, '58000', 'clock 1000 ms behind: SQLSTATE 58000') or diag $r->{err};
my ($n) = $r->{err} =~ /clock moved backwards: it is (\d+) ms behind/;
ok(defined $n && $n > 900 && $n <= 1000,
	'clock 1000 ms behind: the message says by how many ms (' . ($n // 'none') . ', expected 1000 minus the time between the calls)')
  or diag $r->{err};
is($r->{out}, '', 'clock 1000 ms behind: no ID is returned');
cmp_ok(rollback_events($node), '>', $before, 'clock 1000 ms behind: rollback_events increased');

# The same in a session that stays behind: every call fails, nothing inserted.
my $count_before = $node->safe_psql('postgres', 'SELECT count(*) FROM ids');
$r = try_sql(
	$node, 'postgres', q{
SELECT leaf_snowflake_next();
SET leaf_id.test_clock_offset_ms = -1000;
INSERT INTO ids SELECT leaf_snowflake_next() FROM generate_series(1, 100);});
is($r->{sqlstate}, '58000', 'INSERT with the clock 1000 ms behind: SQLSTATE 58000') or diag $r->{err};
like($r->{err}, qr/clock moved backwards: it is \d+ ms behind/, 'INSERT with the clock 1000 ms behind: message');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ids'), $count_before, 'no row was inserted');

# Beyond max_backward_ms (60 ms > 5 ms): refused, not waited out.
$r = try_sql(
	$node, 'postgres', q{
SELECT leaf_snowflake_next(),
       set_config('leaf_id.test_clock_offset_ms', '-60', false),
       leaf_snowflake_next()});
is($r->{sqlstate}, '58000', 'clock 60 ms behind (max_backward_ms 5): SQLSTATE 58000') or diag $r->{err};
is($r->{out}, '', 'clock 60 ms behind: no ID is returned');

# --- back on time: IDs continue above everything before --------------------
$r = try_sql($node, 'postgres',
	'SELECT leaf_snowflake_next() > (SELECT max(id) FROM ids)');
is($r->{out}, 't', 'clock back on time: the next ID is larger than every ID before') or diag $r->{err};
$node->safe_psql('postgres', 'INSERT INTO ids SELECT leaf_snowflake_next() FROM generate_series(1, 1000)');
is(repeated_ids($node), '0', 'no ID was issued twice');

$node->stop;
done_testing();
