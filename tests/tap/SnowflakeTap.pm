# Helpers shared by the leaf_id snowflake-mode TAP tests
# (tests/tap/1xx_snowflake_*.pl).
#
# Built on PostgreSQL's own test framework (PostgreSQL::Test::Cluster) and on
# SegmentTap (try_sql); run the tests with scripts/test-tap.sh. The tests keep
# the IDs they draw in a table "ids" (column id, mostly also phase) of the
# postgres database; the helpers about "ids" read that table.

package SnowflakeTap;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap qw(try_sql);
use Test::More;
use Time::HiRes qw(usleep time);

# The default leaf_id.epoch_ms: an ID is (ms - LEAF_EPOCH_MS) << 22 | ...
use constant LEAF_EPOCH_MS => 1288834974657;

# The refusal (58000) of a call while the clock is below the high-water mark
# persisted before the last restart; $1 is by how many ms.
use constant BEHIND_MARK_RE =>
  qr/clock is (\d+) ms behind the snowflake high-water mark persisted before the last restart/;

our @EXPORT = qw(
  LEAF_EPOCH_MS BEHIND_MARK_RE
  snowflake_node try_sql repeat_sql only_behind_mark_refusals issued_after_restart
  default_node_name snowflake_status persisted_mark
  draw_spread phase_ms_range repeated_ids shared_ids phase_above
  ids_within_mark pgbench_command
);

# A started node with leaf_id preloaded and the extension created in the
# postgres database. $conf: more postgresql.conf lines; $sql: run right after
# CREATE EXTENSION (tables, leaf_worker rows).
sub snowflake_node
{
	my ($name, $conf, $sql) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'leaf_id'\n" . ($conf // ''));
	$node->start;
	$node->safe_psql('postgres', "CREATE EXTENSION leaf_id;\n" . ($sql // ''));
	return $node;
}

# Run $sql in the postgres database (try_sql) again and again until it has
# succeeded $opt{successes} times (default 1) or $opt{seconds} have passed;
# after a failure wait 100 ms. Returns a hash: ok (successes), last (the
# try_sql result of the last call), errors ([sqlstate or 'none', stderr] of
# each failure), seconds (elapsed).
sub repeat_sql
{
	my ($node, $sql, %opt) = @_;
	my $want = $opt{successes} // 1;
	my $t0 = time;
	my %res = (ok => 0, errors => []);
	while (1)
	{
		my $r = try_sql($node, 'postgres', $sql);
		$res{last} = $r;
		if ($r->{ret} == 0)
		{
			last if ++$res{ok} >= $want;
		}
		else
		{
			push @{ $res{errors} }, [ $r->{sqlstate} // 'none', $r->{err} ];
			usleep(100_000);
		}
		last if time - $t0 >= $opt{seconds};
	}
	$res{seconds} = time - $t0;
	return \%res;
}

# A test: every refusal in $errors (as repeat_sql collects them) was 58000
# "clock is N ms behind the ... persisted mark".
sub only_behind_mark_refusals
{
	my ($errors, $message) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @other = grep { !($_->[0] eq '58000' && $_->[1] =~ BEHIND_MARK_RE) } @$errors;
	is(scalar(@other), 0, $message) or diag explain \@other;
	return !@other;
}

# After a (re)start or a crash: run $sql (repeat_sql with %opt: seconds,
# successes) until it has succeeded or the time is up. Tests that it
# succeeded at least once and that every refusal meanwhile was 58000 behind
# the persisted mark; $label starts the test names. Returns the repeat_sql
# result.
sub issued_after_restart
{
	my ($node, $sql, $label, %opt) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $r = repeat_sql($node, $sql, %opt);
	my @errors = @{ $r->{errors} };
	note sprintf('%s: %d successes in %.1f s, %d refusals%s',
		$label, $r->{ok}, $r->{seconds}, scalar @errors,
		@errors ? "; first: $errors[0][1]" : '');
	cmp_ok($r->{ok}, '>', 0, "$label: IDs are issued within $opt{seconds} s")
	  or diag "last error: $r->{last}{err}";
	only_behind_mark_refusals(\@errors,
		"$label: every refusal meanwhile is 58000 behind the persisted mark");
	return $r;
}

# The node name leaf_id uses by default: <system identifier>:<port>.
sub default_node_name
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		q{SELECT system_identifier || ':' || current_setting('port') FROM pg_control_system()});
}

# Columns of leaf_snowflake_status, e.g. 'worker_id, worker_id_source'.
sub snowflake_status
{
	my ($node, $columns) = @_;
	return $node->safe_psql('postgres', "SELECT $columns FROM leaf_snowflake_status");
}

# leaf_worker.last_timestamp (Unix ms) of a worker id.
sub persisted_mark
{
	my ($node, $worker_id) = @_;
	return $node->safe_psql('postgres',
		"SELECT last_timestamp FROM leaf_id_catalog.leaf_worker WHERE worker_id = $worker_id");
}

# Draw IDs for $phase into "ids" in $batches statements of $size IDs each,
# $pause seconds apart (one psql run), so that they span some time.
sub draw_spread
{
	my ($node, $phase, $batches, $size, $pause) = @_;
	my $insert =
	  "INSERT INTO ids SELECT $phase, leaf_snowflake_next() FROM generate_series(1, $size);";
	return $node->safe_psql('postgres',
		join("\nSELECT pg_sleep($pause);\n", ($insert) x $batches));
}

# The Unix ms of the smallest and of the largest ID of $phase.
sub phase_ms_range
{
	my ($node, $phase) = @_;
	my $epoch = LEAF_EPOCH_MS;
	return split /\|/, $node->safe_psql('postgres',
		"SELECT (min(id) >> 22) + $epoch, (max(id) >> 22) + $epoch FROM ids WHERE phase = $phase");
}

# How many rows of "ids" repeat an ID of another row (0: no duplicates).
sub repeated_ids
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT count(*) - count(DISTINCT id) FROM ids');
}

# How many IDs of phase $earlier were drawn again in phase $later.
sub shared_ids
{
	my ($node, $earlier, $later) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM ids a JOIN ids b USING (id) WHERE a.phase = $earlier AND b.phase = $later");
}

# 't' if every ID of $phase is larger than every ID of the @earlier phases.
sub phase_above
{
	my ($node, $phase, @earlier) = @_;
	my $in = join(', ', @earlier);
	return $node->safe_psql('postgres', qq{
SELECT (SELECT min(id) FROM ids WHERE phase = $phase)
     > (SELECT max(id) FROM ids WHERE phase IN ($in))});
}

# 't' if no millisecond of an ID in "ids" is beyond the mark persisted for
# $worker_id.
sub ids_within_mark
{
	my ($node, $worker_id) = @_;
	return $node->safe_psql('postgres', qq{
SELECT (SELECT max(id) FROM ids) >> 22
       <= (SELECT last_timestamp FROM leaf_id_catalog.leaf_worker WHERE worker_id = $worker_id) - @{[LEAF_EPOCH_MS]}});
}

# A pgbench command line (for IPC::Run) running the script file $script
# against the node's postgres database; @options go before the connection.
sub pgbench_command
{
	my ($node, $script, @options) = @_;
	return [
		'pgbench', '-n', @options,
		'-h', $node->host, '-p', $node->port,
		'-f', $script, 'postgres'
	];
}

1;
