# Helpers shared by the leaf_id Citus TAP tests (tests/citus/*.pl): a Citus
# cluster of one coordinator and two workers, local PostgreSQL clusters that
# talk to each other over 127.0.0.1, each with
# shared_preload_libraries = 'citus,leaf_id'.
#
# Run the tests with scripts/test-citus.sh (Citus must be installed; that
# script installs it from LEAF_ID_CITUS_TARBALL when it is missing).

package CitusTap;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use SegmentTap ();

our @EXPORT = qw(
  SHARE_TABLES_SQL
  citus_node citus_cluster add_citus_node node_label
  run_sessions leaf_worker_id_of start_after_kill9
  DRAWLOG_SQL start_drawing stop_drawing summary first_ok_after
  shard_of hold_shard_row stop_node snowflake_wids_of snowflake_calls
  sleep_full prepare_in_doubt in_doubt_gid resolve_in_doubt
);

# Sleep $seconds in full: Perl's sleep returns early when a signal comes (a
# client process ending sends SIGCHLD), which cut a 12 s wait to 2.8 s on
# PostgreSQL 17 and made the test look at the wrong interval.
sub sleep_full
{
	my ($seconds) = @_;
	my $until = Time::HiRes::time() + $seconds;
	while ((my $left = $until - Time::HiRes::time()) > 0)
	{
		Time::HiRes::sleep($left);
	}
	return;
}

# The one documented set-up statement, run on the coordinator after
# CREATE EXTENSION leaf_id: the two shared tables become reference tables
# (a copy on every node, every write on all of them).
use constant SHARE_TABLES_SQL =>
  q{SELECT create_reference_table('leaf_id_catalog.leaf_opaque_domain'), create_reference_table('leaf_id_catalog.leaf_alloc'), create_reference_table('leaf_id_catalog.leaf_alloc_encoding'), create_reference_table('leaf_id_catalog.leaf_worker')};

# A started node with Citus and leaf_id preloaded, listening on 127.0.0.1
# (besides its socket), CREATE EXTENSION citus done (Citus needs it on every
# node). $extra: more postgresql.conf lines; %init: options of
# PostgreSQL::Test::Cluster::init (allows_streaming => 1 for copies).
sub citus_node
{
	my ($name, $extra, %init) = @_;
	$extra //= '';
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%init);
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'citus,leaf_id'
listen_addresses = '127.0.0.1'
max_worker_processes = 32
max_connections = 300
citus.max_adaptive_executor_pool_size = 4
citus.shard_count = 8
log_statement = 'none'
log_min_messages = warning
lc_messages = 'C'
citus.log_remote_commands = off
$extra
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION citus');
	return $node;
}

# The cluster: a coordinator and two workers, registered with each other
# (citus_set_coordinator_host, citus_add_node), leaf_id created on the
# coordinator (Citus propagates it to the workers) and its two tables made
# reference tables (SHARE_TABLES_SQL). $opt{workers}: how many workers
# (default 2); $opt{conf}: more postgresql.conf lines for every node;
# $opt{init}: a hash of options for every node's init; $opt{version}: the
# catalog version to create (its tables in public before 0.7.0).
# Returns ($coordinator, @workers).
sub citus_cluster
{
	my (%opt) = @_;
	my $n = $opt{workers} // 2;
	my %init = %{ $opt{init} // {} };
	my $coord = citus_node('coord', $opt{conf}, %init);
	my @workers = map { citus_node("worker$_", $opt{conf}, %init) } 1 .. $n;
	$coord->safe_psql('postgres',
		"SELECT citus_set_coordinator_host('127.0.0.1', " . $coord->port . ')');
	add_citus_node($coord, $_) for @workers;
	if ($opt{version})
	{
		$coord->safe_psql('postgres', "CREATE EXTENSION leaf_id VERSION '$opt{version}'");
		$coord->safe_psql('postgres', SHARE_TABLES_SQL =~ s/leaf_id_catalog\.//gr);
	}
	else
	{
		$coord->safe_psql('postgres', 'CREATE EXTENSION leaf_id');
		$coord->safe_psql('postgres', SHARE_TABLES_SQL);
	}
	return ($coord, @workers);
}

# citus_add_node of $worker, run on the coordinator.
sub add_citus_node
{
	my ($coord, $worker) = @_;
	return $coord->safe_psql('postgres',
		"SELECT citus_add_node('127.0.0.1', " . $worker->port . ')');
}

# The node's name in test messages.
sub node_label { return $_[0]->name }

# Run @sessions at once: each is [node, name, sql]; the SQL (a script: COPY
# FROM STDIN with its data works) runs in one psql (ON_ERROR_STOP) against the
# node's postgres database. All start after
# every one connected and waits on a gate (an advisory lock taken on each
# node), so they overlap. Returns a hash name => { rc, out, err }.
sub run_sessions
{
	my ($timeout, @sessions) = @_;
	my %nodes = map { $_->[0]->name => $_->[0] } @sessions;
	my %gates;
	for my $name (sort keys %nodes)
	{
		$gates{$name} = $nodes{$name}->background_psql('postgres');
		$gates{$name}->query_safe('SELECT pg_advisory_lock(4242)');
	}
	my %res;
	for my $s (@sessions)
	{
		my ($node, $name, $sql) = @$s;
		my $r = $res{$name} = { out => '', err => '' };
		my $script = "$PostgreSQL::Test::Utils::tmp_check/$name.sql";
		open my $fh, '>', $script or die "could not write $script: $!";
		print $fh $sql;
		close $fh;
		$r->{h} = IPC::Run::start(
			[
				'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1',
				'-d', $node->connstr('postgres') . " application_name=$name",
				'-c', 'SELECT pg_advisory_lock_shared(4242); SELECT pg_advisory_unlock_shared(4242)',
				'-f', $script
			],
			'<', \undef, '>', \$r->{out}, '2>', \$r->{err},
			IPC::Run::timeout($timeout));
	}
	for my $name (sort keys %nodes)
	{
		my $want = grep { $_->[0]->name eq $name } @sessions;
		$nodes{$name}->poll_query_until('postgres',
			"SELECT count(*) >= $want FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = 4242")
		  or die "sessions on $name did not reach the gate";
	}
	$gates{$_}->query_safe('SELECT pg_advisory_unlock(4242)') for sort keys %gates;
	$_->quit for values %gates;
	for my $s (@sessions)
	{
		my $r = $res{ $s->[1] };
		my $ok = eval { $r->{h}->finish };
		$r->{err} .= "\n$@" if $@;
		$r->{rc} = $ok ? 0 : ((($r->{h}->full_result(0) // 256) >> 8) || 1);
		delete $r->{h};
	}
	return \%res;
}

# The snowflake worker id a node's generator uses (it claims one if needed:
# a first claim of an id waits out leaf_id.lease_ahead, 3 s, before it
# issues, longer than the 3 s refill_timeout some tests set for their
# nodes, so this call waits up to 20 s).
sub leaf_worker_id_of
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		'SET leaf_id.refill_timeout = 20000; SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');
}

# Start $node again after its postmaster was killed (kill -9): its children
# leave within moments (they notice the death), and until then the data
# directory is still in use, so try for up to 10 s. True once started.
sub start_after_kill9
{
	my ($node) = @_;
	for (1 .. 40)
	{
		Time::HiRes::usleep(250_000);
		return 1 if $node->start(fail_ok => 1);
		$node->{_pid} = undef;    # a failed start read the dead postmaster's pid file
	}
	return 0;
}

# The worker ids (the IDs' 10 bits) of the snowflake IDs that drawing session
# $session logged on $node, comma-separated: two nodes that share a
# millisecond issue the same ID only if they share a worker id.
sub snowflake_wids_of
{
	my ($node, $session) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(string_agg(DISTINCT ((id >> 12) & 1023)::text, ','), '') FROM drawlog WHERE session LIKE '$session' AND id IS NOT NULL");
}

# Drawing sessions that log every call, for tests that kill or stop nodes
# under load (205, 208). On each node, local objects (DDL propagation off):
# the log of every call and a procedure that draws (segment IDs of tag 'dn'
# or snowflake IDs) until told to stop (or a safety deadline). Run
# DRAWLOG_SQL on every node first.
use constant DRAWLOG_SQL => q{
SET citus.enable_ddl_propagation = off;
CREATE TABLE drawlog (session text, t float8, ms float8, id bigint, state text, msg text);
CREATE TABLE drawctl (stop bool);
INSERT INTO drawctl VALUES (false);
CREATE PROCEDURE draw_for(p_session text, p_mode text, p_seconds float8) LANGUAGE plpgsql AS $$
DECLARE
  t_end timestamptz := clock_timestamp() + p_seconds * interval '1 second';
  t0 timestamptz; v bigint; st text; m text;
BEGIN
  WHILE clock_timestamp() < t_end AND NOT (SELECT stop FROM drawctl) LOOP
    t0 := clock_timestamp(); v := NULL; st := NULL; m := NULL;
    BEGIN
      IF p_mode = 'segment' THEN v := leaf_segment_next('dn'); ELSE v := leaf_snowflake_next(); END IF;
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, m = MESSAGE_TEXT;
    END;
    INSERT INTO drawlog VALUES (p_session, extract(epoch FROM t0),
      extract(epoch FROM clock_timestamp() - t0) * 1000, v, st, m);
    COMMIT;
    PERFORM pg_sleep(CASE WHEN st IS NULL THEN 0.002 ELSE 0.05 END);
  END LOOP;
END $$;
};

# Start a drawing session (a psql in the background).
our @running;
sub start_drawing
{
	my ($node, $session, $mode) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		  '-c', "CALL draw_for('$session', '$mode', 240)" ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(300));
	push @running, [ $node, $session, $h, \$err ];
}

sub stop_drawing
{
	my %nodes = map { $_->[0]->name => $_->[0] } @running;
	$_->safe_psql('postgres', 'UPDATE drawctl SET stop = true') for values %nodes;
	for my $r (@running)
	{
		my $ok = eval { $r->[2]->finish };
		ok($ok, "session $r->[1] ended cleanly") or diag "${ $r->[3] } $@";
	}
	@running = ();
	$_->safe_psql('postgres', 'UPDATE drawctl SET stop = false') for values %nodes;
}

# Per session, between $from and $to (epoch seconds): successes, the last
# success, the first failure, the failures' SQLSTATEs and messages and their
# longest wait.
sub summary
{
	my ($node, $session, $from, $to) = @_;
	my $row = $node->safe_psql(
		'postgres', qq{
SELECT count(id), coalesce(max(t) FILTER (WHERE id IS NOT NULL), 0),
       coalesce(min(t) FILTER (WHERE id IS NULL), 0),
       count(*) FILTER (WHERE id IS NULL),
       coalesce(max(ms) FILTER (WHERE id IS NULL), 0),
       coalesce(string_agg(DISTINCT state || ' ' || msg, ' | ') FILTER (WHERE id IS NULL), '')
FROM drawlog WHERE session = '$session' AND t >= $from AND t < $to});
	my @f = split /\|/, $row, 6;
	return { ok => $f[0], last_ok => $f[1], first_err => $f[2], errors => $f[3], max_err_ms => $f[4],
		states => $f[5] };
}

# The node's copy of leaf_id's reference table $table: its shard's name.
sub shard_of
{
	my ($node, $table) = @_;
	return $node->safe_psql('postgres',
		"SELECT shard_name(t, shardid) FROM pg_dist_shard, "
		  . "COALESCE(to_regclass('leaf_id_catalog.$table'), to_regclass('public.$table')) AS t WHERE logicalrelid = t");
}

# A session on $node that holds the rows of its copy of $table matching
# $where (an UPDATE that changes nothing, in an open transaction), so that
# writes of those rows from other nodes wait there. Returns the session
# (a background psql; ROLLBACK and quit it to let go) and the error of the
# UPDATE ('' if none).
sub hold_shard_row
{
	my ($node, $table, $where) = @_;
	my $shard = shard_of($node, $table);
	my $key = { leaf_alloc => 'biz_tag', leaf_worker => 'worker_id' }->{$table};
	my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 120);
	$s->query("BEGIN; SET LOCAL citus.enable_manual_changes_to_shards = on; "
		  . "UPDATE $shard SET $key = $key WHERE $where;");
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($s, $err);
}

# Leave on $node a prepared transaction that holds its copy's rows of
# $table matching $where, as a node killed between a Citus write's PREPARE
# TRANSACTION and its COMMIT PREPARED keeps one when it starts again (it
# stays until Citus' recovery on the initiator resolves it, which skips
# nodes that are not active). Its gid (in_doubt_gid) is Citus' form for a
# transaction of the node of group $group (default 0, the coordinator)
# that pg_dist_transaction does not list, with a distributed transaction
# number no node reaches in a test (what Citus' recovery asks to know one
# in progress), so that recovery, and resolve_in_doubt, roll it back.
# Returns '' when it is prepared, or the error when the rows could not be
# locked within 2 s (another prepared transaction holds them already).
sub prepare_in_doubt
{
	my ($node, $table, $where, $group) = @_;
	my $shard = shard_of($node, $table);
	my $gid = in_doubt_gid($group);
	my ($ret, $out, $err) = $node->psql('postgres',
		"BEGIN; SET LOCAL citus.enable_manual_changes_to_shards = on; SET LOCAL lock_timeout = '2s'; "
		  . "UPDATE $shard SET update_time = update_time WHERE $where; PREPARE TRANSACTION '$gid'",
		on_error_stop => 1);
	return $ret == 0 ? '' : $err;
}

# The gid of prepare_in_doubt's transaction for group $group (default 0).
sub in_doubt_gid
{
	my ($group) = @_;
	return 'citus_' . ($group // 0) . '_' . $$ . '_999999999_0';
}

# Resolve the prepared transactions on $node as Citus' recovery would
# (transaction_recovery.c): a gid citus_<group>_... whose initiator, the
# node of that group among @nodes, lists it in pg_dist_transaction committed
# there, so COMMIT PREPARED; any other is rolled back. Returns a list of
# "gid: COMMIT|ROLLBACK".
sub resolve_in_doubt
{
	my ($node, @nodes) = @_;
	my %by_port = map { $_->port => $_ } @nodes;
	my @done;
	for my $gid (split /\n/, $node->safe_psql('postgres', 'SELECT gid FROM pg_prepared_xacts ORDER BY gid'))
	{
		my $what = 'ROLLBACK';
		if ($gid =~ /^citus_(\d+)_/)
		{
			my $port = $node->safe_psql('postgres',
				"SELECT nodeport FROM pg_dist_node WHERE groupid = $1 AND noderole = 'primary'");
			my $initiator = $by_port{$port};
			$what = 'COMMIT'
			  if $initiator
			  && $initiator->safe_psql('postgres', "SELECT count(*) FROM pg_dist_transaction WHERE gid = '$gid'") > 0;
		}
		$node->safe_psql('postgres', "$what PREPARED '$gid'");
		push @done, "$gid: $what";
	}
	return @done;
}

# Stop every process of $node (SIGSTOP), as a network partition would: its
# port still accepts connections and nothing answers. The postmaster first,
# so that no backend is forked after its children are listed. Returns the
# pids (kill 'CONT' to resume).
sub stop_node
{
	my ($node) = @_;
	my $pid = $node->{_pid};
	kill 'STOP', $pid;
	my @pids = ($pid, map { /(\d+)/ ? $1 : () } split /\n/, `ps -o pid= --ppid $pid`);
	kill 'STOP', @pids;
	return @pids;
}

# The first success at or after $from, 0 if none.
sub first_ok_after
{
	my ($node, $session, $from) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(min(t), 0) FROM drawlog WHERE session = '$session' AND id IS NOT NULL AND t >= $from");
}

# Call leaf_snowflake_next() on $node every 200 ms for $seconds. Returns a
# hash: ids (the IDs issued), with (how many of them have a worker id in
# @$wids), refused (how many calls failed), states (SQLSTATE => count of the
# refusals), errors (every refusal's error report), last (the try_sql result
# of the last call).
sub snowflake_calls
{
	my ($node, $seconds, $wids) = @_;
	my %want = map { $_ => 1 } @$wids;
	my %out = (ids => [], with => 0, refused => 0, states => {}, errors => []);
	my $end = time + $seconds;
	while (time < $end)
	{
		my $r = SegmentTap::try_sql($node, 'postgres',
			'SELECT x, (leaf_snowflake_decode(x)).worker_id FROM leaf_snowflake_next() x');
		$out{last} = $r;
		if ($r->{ret} == 0)
		{
			my ($x, $w) = split /\|/, $r->{out};
			push @{ $out{ids} }, $x;
			$out{with}++ if $want{$w};
		}
		else
		{
			$out{refused}++;
			$out{states}{ $r->{sqlstate} // 'none' }++;
			push @{ $out{errors} }, $r->{err};
		}
		usleep(200_000);
	}
	return %out;
}

1;
