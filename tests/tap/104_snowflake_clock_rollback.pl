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
use Time::HiRes qw(time);

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

# The checks below need two calls of one statement to come within a few ms
# of each other, which a loaded machine does not promise. So each runs its
# statement until an attempt shows what is claimed ($good), for at most
# 60 s; an attempt that misses only because the calls were too far apart
# ($slow) is retried, any other outcome ends the loop and is what the
# assertions then see. Returns the last attempt (a try_sql result with
# {attempts} added).
sub until_fast_enough
{
	my ($sql, $good, $slow) = @_;
	my $deadline = time + 60;
	my ($r, $attempts) = (undef, 0);
	while (1)
	{
		$r = try_sql($node, 'postgres', $sql);
		$attempts++;
		last if $good->($r) || !$slow->($r) || time > $deadline;
	}
	note "$attempts attempt(s)";
	$r->{attempts} = $attempts;
	return $r;
}

# ms behind in the refusal "clock moved backwards: it is N ms behind ..."
sub behind_ms
{
	my ($r) = @_;
	my ($n) = $r->{err} =~ /clock moved backwards: it is (\d+) ms behind/;
	return $n;
}

# --- small rollback: 3 ms, within max_backward_ms ------------------------
# Both calls are in one statement, so the second sees the clock 3 ms behind
# the first unless more than 3 ms pass between them (then no rollback is
# seen, and the attempt is repeated). Rolled back or not, the call succeeds
# and the second ID is larger than the first.
my $before = rollback_events($node);
my $r = until_fast_enough(
	q{
SELECT a, b, b > a FROM (
  SELECT set_config('leaf_id.test_clock_offset_ms', '0', false) AS r0,
         leaf_snowflake_next() AS a,
         set_config('leaf_id.test_clock_offset_ms', '-3', false) AS r1,
         leaf_snowflake_next() AS b
) s},
	sub {
		my ($r) = @_;
		$r->{rolled_back} = 0;
		return 0 unless $r->{ret} == 0 && $r->{out} =~ /\|t$/;
		my ($id1, $id2) = split /\|/, $r->{out};
		$node->safe_psql('postgres', "INSERT INTO ids VALUES ($id1), ($id2)");
		my $after = rollback_events($node);
		$r->{rolled_back} = $after > $before;
		$before = $after;
		return $r->{rolled_back};
	},
	sub { my ($r) = @_; return $r->{ret} == 0 && $r->{out} =~ /\|t$/ });
is($r->{ret}, 0, 'clock 3 ms behind: the call succeeds') or diag $r->{err};
like($r->{out}, qr/\|t$/, 'clock 3 ms behind: the second ID is larger than the first');
ok($r->{rolled_back}, "clock 3 ms behind: rollback_events increased ($r->{attempts} attempt(s))");

# --- large rollback: 1000 ms ---------------------------------------------
# the refusal says by how much: 1000 ms less the time between the calls
# (retried while that time is 100 ms or more, or so long that the clock
# was no longer behind)
$before = rollback_events($node);
$r = until_fast_enough(
	q{
SELECT leaf_snowflake_next(),
       set_config('leaf_id.test_clock_offset_ms', '-1000', false),
       leaf_snowflake_next()},
	sub { my $n = behind_ms($_[0]); return defined $n && $n > 900 && $n <= 1000 },
	sub {
		my ($r) = @_;
		my $n = behind_ms($r);
		return $r->{ret} == 0 || (($r->{sqlstate} // '') eq '58000' && defined $n && $n <= 900);
	});
isnt($r->{ret}, 0, 'clock 1000 ms behind: the statement fails');
is($r->{sqlstate}, '58000', 'clock 1000 ms behind: SQLSTATE 58000') or diag $r->{err};
my $n = behind_ms($r);
ok(defined $n && $n > 900 && $n <= 1000,
	'clock 1000 ms behind: the message says by how many ms (' . ($n // 'none') . ', expected 1000 minus the time between the calls)')
  or diag $r->{err};
is($r->{out}, '', 'clock 1000 ms behind: no ID is returned');
cmp_ok(rollback_events($node), '>', $before, 'clock 1000 ms behind: rollback_events increased');

# The same in a session that stays behind (an hour, so that no pause between
# the statements can matter): every call fails, nothing inserted.
my $count_before = $node->safe_psql('postgres', 'SELECT count(*) FROM ids');
$r = try_sql(
	$node, 'postgres', q{
SELECT leaf_snowflake_next();
SET leaf_id.test_clock_offset_ms = -3600000;
INSERT INTO ids SELECT leaf_snowflake_next() FROM generate_series(1, 100);});
is($r->{sqlstate}, '58000', 'INSERT with the clock an hour behind: SQLSTATE 58000') or diag $r->{err};
like($r->{err}, qr/clock moved backwards: it is \d+ ms behind/, 'INSERT with the clock an hour behind: message');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ids'), $count_before, 'no row was inserted');

# Beyond max_backward_ms (60 ms > 5 ms): refused, not waited out (retried
# while the calls are so far apart that the clock is no longer behind).
$r = until_fast_enough(
	q{
SELECT leaf_snowflake_next(),
       set_config('leaf_id.test_clock_offset_ms', '-60', false),
       leaf_snowflake_next()},
	sub { return ($_[0]{sqlstate} // '') eq '58000' },
	sub { return $_[0]{ret} == 0 });
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
