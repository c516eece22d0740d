# Helpers shared by the leaf_id segment-mode TAP tests (tests/tap/0xx_*.pl).
#
# Built on PostgreSQL's own test framework (PostgreSQL::Test::Cluster); run
# the tests with scripts/test-tap.sh.

package SegmentTap;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

our @EXPORT = qw(
  leaf_node try_sql sqlstate_of draw_ids duplicates max_of min_of
  wait_for_number
  start_client finish_clients client_ids backend_pid worker_pid wait_until
  wait_for_server read_ids_file start_load issued_count
  kill9_under_load no_duplicates_over_all_rounds
  session session_query status_tags
  insert_snowflake_ids phase_above note_skip skip_all_noted
);

# A skip of what the test command must test: noted in LEAF_ID_SKIPS_FILE
# (scripts/test.sh sets it: its last lines list the skips, and the run
# fails on them unless LEAF_ID_REQUIRE_ALL=0), and said in the test's output.
# A test run by hand (no file) just skips.
sub note_skip
{
	my ($what) = @_;
	my $file = $ENV{LEAF_ID_SKIPS_FILE};
	if ($file)
	{
		my $test = $0 =~ s{.*/}{}r;
		open my $fh, '>>', $file or die "could not append to $file: $!";
		print $fh "TAP $test: SKIPPED ($what)\n";
		close $fh;
	}
	note "SKIP: $what";
	return;
}

# plan skip_all, noted as note_skip does.
sub skip_all_noted
{
	my ($why) = @_;
	note_skip($why);
	plan skip_all => $why;
}

# Insert $count snowflake IDs as rows (phase $phase, kind 'snowflake') of
# table ids, retrying for up to $seconds while the worker gets ready (after a
# start its claim takes a moment). Returns the last try_sql result, {ok} set
# when it succeeded.
sub insert_snowflake_ids
{
	my ($node, $phase, $count, $seconds) = @_;
	my $r;
	wait_until(
		$seconds,
		sub {
			$r = try_sql($node, 'postgres',
				"INSERT INTO ids SELECT $phase, 'snowflake', leaf_snowflake_next() FROM generate_series(1, $count)");
			return $r->{ok} = ($r->{ret} == 0);
		});
	return $r;
}

# 't' when, for each of @kinds, every ID of table ids' phase 2 is above
# every ID of its phase 1.
sub phase_above
{
	my ($node, @kinds) = @_;
	my $values = join(', ', map { "('$_')" } @kinds);
	return $node->safe_psql(
		'postgres', qq{
SELECT bool_and((SELECT min(id) FROM ids n WHERE n.phase = 2 AND n.kind = o.kind)
              > (SELECT max(id) FROM ids p WHERE p.phase = 1 AND p.kind = o.kind))
FROM (VALUES $values) o(kind)});
}

# A started node with leaf_id preloaded and the extension created in the
# postgres database. $extra: more postgresql.conf lines.
sub leaf_node
{
	my ($name, $extra) = @_;
	$extra = '' unless defined $extra;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'leaf_id'
max_worker_processes = 16
max_connections = 40
log_statement = 'none'
log_min_messages = warning
lc_messages = 'C'
$extra
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION leaf_id');
	return $node;
}

# Run SQL (psql, ON_ERROR_STOP, VERBOSITY verbose). Returns a hash:
# ret (psql exit code), out, err, sqlstate (of the first ERROR, or undef).
sub try_sql
{
	my ($node, $db, $sql, %opt) = @_;
	my ($ret, $out, $err) = $node->psql(
		$db,
		"\\set VERBOSITY verbose\n$sql",
		timeout => $opt{timeout} // 60);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return { ret => $ret, out => $out, err => $err, sqlstate => $state };
}

# Run $sql in $db (try_sql) until it succeeds (psql exit status 0) and prints
# one integer, or $seconds have passed (0: one try). Returns the try_sql
# result of the last try, with {ok} set when it succeeded so.
sub wait_for_number
{
	my ($node, $db, $sql, $seconds) = @_;
	my $r;
	wait_until(
		$seconds,
		sub {
			$r = try_sql($node, $db, $sql);
			return $r->{ok} = ($r->{ret} == 0 && $r->{out} =~ /^-?\d+$/);
		});
	return $r;
}

sub sqlstate_of
{
	my ($node, $db, $sql) = @_;
	return try_sql($node, $db, $sql)->{sqlstate};
}

# $n IDs of $tag from one statement of one session, in order.
sub draw_ids
{
	my ($node, $db, $tag, $n) = @_;
	my $out = $node->safe_psql($db,
		"SELECT leaf_segment_next('$tag') FROM generate_series(1, $n)");
	return split /\n/, $out;
}

# Values that occur more than once.
sub duplicates
{
	my %seen;
	$seen{$_}++ for @_;
	return sort { $a <=> $b } grep { $seen{$_} > 1 } keys %seen;
}

sub max_of
{
	my $m;
	for (@_) { $m = $_ if !defined $m || $_ > $m }
	return $m;
}

sub min_of
{
	my $m;
	for (@_) { $m = $_ if !defined $m || $_ < $m }
	return $m;
}

# Integers of a file, one a line; a last line without its newline (output
# cut short) is ignored.
sub read_ids_file
{
	my ($file) = @_;
	return () unless -e $file;
	my $text = slurp_file($file);
	my @lines = split /\n/, $text, -1;
	pop @lines;    # "" after the last newline, or an incomplete line
	return grep { /^-?\d+$/ } @lines;
}

# A psql client in the background running $sql (a script) in database $db
# with application_name $name; its stdout (the IDs it received, one a
# line) goes to a file, so nothing has to be pumped while it runs.
sub start_client
{
	my ($node, $db, $name, $sql, %opt) = @_;
	my $dir = $PostgreSQL::Test::Utils::tmp_check;
	my $script = "$dir/$name.sql";
	my $outfile = "$dir/$name.out";
	my $errfile = "$dir/$name.err";
	open my $fh, '>', $script or die "could not write $script: $!";
	print $fh $sql;
	close $fh;
	unlink $outfile, $errfile;
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr($db) . " application_name=$name",
			'-f', $script
		],
		'<', \undef,
		'>', $outfile,
		'2>', $errfile,
		IPC::Run::timeout($opt{timeout} // 180));
	return {
		h => $h,
		name => $name,
		out => $outfile,
		err => $errfile,
	};
}

# Wait (bounded) for the clients to exit; kill those that do not.
# Sets {rc} and {stderr} of each.
sub finish_clients
{
	my ($timeout, @clients) = @_;
	my $deadline = time + $timeout;
	for my $c (@clients)
	{
		while ($c->{h}->pumpable && time < $deadline)
		{
			eval { $c->{h}->pump_nb };
			usleep(50_000);
		}
		if ($c->{h}->pumpable)
		{
			diag "client $c->{name} did not exit; killing it";
			$c->{h}->kill_kill;
			$c->{killed} = 1;
		}
		eval { $c->{h}->finish };
		$c->{rc} = $c->{killed} ? -1 : ($c->{h}->result(0) // -1);
		$c->{stderr} = -e $c->{err} ? slurp_file($c->{err}) : '';
	}
	return;
}

sub client_ids
{
	my ($c) = @_;
	return read_ids_file($c->{out});
}

# Backend pid of a session, by application_name.
sub backend_pid
{
	my ($node, $db, $name) = @_;
	return $node->safe_psql($db,
		"SELECT pid FROM pg_stat_activity WHERE application_name = '$name' LIMIT 1"
	);
}

# Pid of the leaf_id worker of mode $mode ('segment' or 'snowflake') of
# database $db; without $mode the pids of both, joined by commas (empty if
# none runs).
sub worker_pid
{
	my ($node, $db, $mode) = @_;
	my $type = defined $mode ? "= 'leaf_id $mode worker'" : "IN ('leaf_id segment worker', 'leaf_id snowflake worker')";
	return $node->safe_psql('postgres',
		"SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity WHERE backend_type $type AND datname = '$db'"
	);
}

# Poll $cond (a code ref) every 100ms until true or $seconds pass.
sub wait_until
{
	my ($seconds, $cond) = @_;
	my $deadline = time + $seconds;
	while (time < $deadline)
	{
		return 1 if $cond->();
		usleep(100_000);
	}
	return $cond->() ? 1 : 0;
}

# After a crash: wait until the server accepts connections and is out of
# recovery.
sub wait_for_server
{
	my ($node) = @_;
	return $node->poll_query_until('postgres',
		'SELECT NOT pg_is_in_recovery()');
}

# Clients that draw IDs of $tag in a loop until they are stopped (or, bounded,
# run out of statements): two insert them into table "issued" in autocommit
# (rows committed before a crash survive), one only selects them, one inserts
# them in a transaction that never commits. Every client prints every ID it
# receives. Options: call (the SQL that draws an ID, instead of
# leaf_segment_next('$tag')), setup (SQL each client runs first). Returns the
# clients (see start_client).
sub start_load
{
	my ($node, $prefix, $tag, $statements, %opt) = @_;
	$statements //= 40_000;
	my $call = $opt{call} // "leaf_segment_next('$tag')";
	my $setup = $opt{setup} // '';
	my @clients;
	for my $i (1 .. 2)
	{
		push @clients,
		  start_client($node, 'postgres', "${prefix}_ins$i",
			$setup
			  . "INSERT INTO issued (id, client) SELECT $call, '${prefix}_ins$i' FROM generate_series(1, 5) RETURNING id;\n"
			  x $statements);
	}
	push @clients,
	  start_client($node, 'postgres', "${prefix}_sel",
		$setup . "SELECT $call FROM generate_series(1, 10);\n" x $statements);
	push @clients,
	  start_client($node, 'postgres', "${prefix}_opentx",
		$setup
		  . "BEGIN;\n"
		  . "INSERT INTO issued (id, client) SELECT $call, '${prefix}_opentx' RETURNING id;\n"
		  x $statements);
	return @clients;
}

sub issued_count
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT count(*) FROM issued');
}

# A background psql session that goes on after errors, with VERBOSITY
# verbose (errors carry their SQLSTATE).
sub session
{
	my ($node, $db) = @_;
	my $s = $node->background_psql($db, on_error_stop => 0, timeout => 120);
	$s->set_query_timer_restart;
	$s->query("\\set VERBOSITY verbose");
	$s->{stderr} = '';
	return $s;
}

# Run SQL in a session: (stdout, stderr, sqlstate of the first ERROR).
sub session_query
{
	my ($s, $sql) = @_;
	my $out = $s->query($sql);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($out, $err, $state);
}

# Tags that leaf_segment_status lists in the database.
sub status_tags
{
	my ($node, $db) = @_;
	return split /\n/,
	  $node->safe_psql($db, 'SELECT tag FROM leaf_segment_status ORDER BY tag');
}

# One crash round: start the load (start_load with prefix "r$round" and
# @load, its arguments after the prefix), wait until $rows more rows are
# committed in "issued" and every client has drawn IDs, kill -9 the process
# $target->() names ($what), and wait until the postmaster has reinitialized
# shared memory and the server is back. Tests each step, that no ID reached
# two clients and that the never-committed rows are gone. Returns the IDs
# the clients received before the crash.
sub kill9_under_load
{
	my ($node, $round, $what, $target, $rows, @load) = @_;
	my $n0 = issued_count($node);
	my @clients = start_load($node, "r$round", @load);
	ok( wait_until(60, sub { issued_count($node) >= $n0 + $rows }),
		"round $round: load is running ($rows rows committed)");
	# every client must have received IDs before the crash
	ok( wait_until(30, sub { !grep { !-s $_->{out} } @clients }),
		"round $round: every client has drawn IDs");

	my $pid = $target->();
	like($pid, qr/^\d+$/, "round $round: found the $what (pid $pid)");
	my $log_offset = -s $node->logfile;
	ok(kill('KILL', $pid), "round $round: kill -9 $what");

	finish_clients(60, @clients);
	for my $c (@clients)
	{
		ok(!$c->{killed} && $c->{rc} != 0,
			"round $round: client $c->{name} was cut off by the crash (exit $c->{rc})"
		);
	}
	ok(wait_for_server($node), "round $round: server is back");
	ok( $node->log_contains(qr/\(PID $pid\) was terminated by signal 9/,
			$log_offset),
		"round $round: postmaster saw the kill");
	ok( $node->log_contains(
			qr/all server processes terminated; reinitializing/, $log_offset),
		"round $round: postmaster reinitialized (crash recovery)");

	my @received = map { client_ids($_) } @clients;
	is_deeply([ duplicates(@received) ], [],
		"round $round: no ID was received twice before the crash");
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM issued WHERE client = 'r${round}_opentx'"),
		'0',
		"round $round: rows of the never-committed transaction are gone");
	return @received;
}

# After crash rounds: no ID is committed twice in table "issued", and no ID
# reached two clients.
sub no_duplicates_over_all_rounds
{
	my ($node, @all_received) = @_;
	is( $node->safe_psql(
			'postgres',
			'SELECT count(*) FROM (SELECT id FROM issued GROUP BY id HAVING count(*) > 1) d'
		),
		'0',
		'no ID committed twice in "issued" over all rounds');
	my @dups = duplicates(@all_received);
	is_deeply(\@dups, [], 'no ID received twice by clients over all rounds')
	  or diag 'duplicated: ' . join(' ', @dups[ 0 .. ($#dups < 9 ? $#dups : 9) ]);
}

1;
