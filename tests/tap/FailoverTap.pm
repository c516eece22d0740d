# Helpers of the failover TAP tests (tests/tap/076, 077): a primary with two
# asynchronous streaming standbys on physical slots, and clients that draw
# IDs of both modes from it.

package FailoverTap;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;
use Time::HiRes ();

our @EXPORT = qw(failover_cluster start_drawing finish_drawing failover_to check_worker_activity);

# A primary (tag 'order', step 1000; snowflake worker id 7 under node name
# node_a, both in postgresql.conf, so that a standby made from it has them)
# and standbys s1 and s2 streaming from it through slots s1 and s2, started
# and connected. $extra: more postgresql.conf lines of the primary (and so of
# the standbys). wal_log_hints and wal_keep_size let pg_rewind rewind the old
# primary.
sub failover_cluster
{
	my ($extra) = @_;
	my $primary = PostgreSQL::Test::Cluster->new('primary');
	$primary->init(allows_streaming => 1);
	$primary->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'leaf_id'
max_worker_processes = 16
lc_messages = 'C'
log_min_messages = warning
wal_log_hints = on
# the old primary's WAL back to the divergence, for pg_rewind
wal_keep_size = '256MB'
leaf_id.refill_timeout = 3000
leaf_id.standby_confirm_timeout = 3000
leaf_id.max_step = 1000
leaf_id.worker_id = 7
leaf_id.node_name = 'node_a'
leaf_id.random_sequence_start = off
} . ($extra // ''));
	$primary->start;
	$primary->safe_psql('postgres', 'CREATE EXTENSION leaf_id');
	$primary->safe_psql('postgres', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('order', 1000)");
	# a monitoring role: pg_monitor only (check_worker_activity)
	$primary->safe_psql('postgres', 'CREATE ROLE leaf_watcher IN ROLE pg_monitor');
	$primary->safe_psql('postgres', "SELECT pg_create_physical_replication_slot('$_')") for ('s1', 's2');
	$primary->backup('b');
	my @standbys;
	for my $name ('s1', 's2')
	{
		my $s = PostgreSQL::Test::Cluster->new($name);
		$s->init_from_backup($primary, 'b', has_streaming => 1);
		$s->append_conf('postgresql.conf', "primary_slot_name = '$name'\n");
		$s->start;
		push @standbys, $s;
	}
	$primary->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM pg_replication_slots WHERE active AND restart_lsn IS NOT NULL")
	  or die 'the standbys did not connect';
	return ($primary, @standbys);
}

# Clients that draw IDs (segment_clients of tag 'order', 3 by default, and
# one of snowflake unless snowflake => 0), 100 a statement, until a
# statement fails (ON_ERROR_STOP) or their statements run out; each waits
# pause s between statements. Returns them.
sub start_drawing
{
	my ($node, $phase, %opt) = @_;
	my $pause = $opt{pause} // 0;
	my $n = $opt{statements} // 20;
	my $sleep = $pause ? "SELECT pg_sleep($pause) \\g /dev/null\n" : '';
	my @c;
	for my $i (1 .. ($opt{segment_clients} // 3))
	{
		push @c, start_client($node, 'postgres', "${phase}_seg$i",
			"\\set VERBOSITY verbose\n"
			  . ("SELECT leaf_segment_next('order') FROM generate_series(1, 100);\n$sleep" x $n));
	}
	push @c, start_client($node, 'postgres', "${phase}_snow",
		"\\set VERBOSITY verbose\n"
		  . ("SELECT leaf_snowflake_next() FROM generate_series(1, 100);\n$sleep" x $n))
	  if $opt{snowflake} // 1;
	return @c;
}

# Wait (bounded) for the clients, and add what they drew to $drawn->{seg}
# and $drawn->{snow}. Returns the clients.
sub finish_drawing
{
	my ($drawn, $timeout, @c) = @_;
	finish_clients($timeout, @c);
	for my $c (@c)
	{
		push @{ $drawn->{ $c->{name} =~ /_snow$/ ? 'snow' : 'seg' } }, client_ids($c);
	}
	return @c;
}

# D of the failover tests: the primary killed (kill -9), $standby (which
# stopped at $t_stop and so missed everything after it) started with its
# clock (its worker's and its sessions') reading 4 s after it stopped, a new
# primary whose clock is behind, and promoted. Checks that it issues snowflake
# IDs with worker id 7 (as the old primary), every one above every snowflake
# ID the old primary issued (its high-water mark is one the standby had), and
# segment IDs, none twice over everything in $drawn.
sub failover_to
{
	my ($drawn, $primary, $standby, $t_stop) = @_;
	my $name = $standby->name;
	my $last_snow = SegmentTap::max_of(@{ $drawn->{snow} });
	note sprintf("C: the primary issued its last snowflake ID %.0f ms after $name stopped",
		($last_snow >> 22) + 1288834974657 - $t_stop * 1000);
	$primary->kill9;
	$standby->append_conf('postgresql.conf',
		'leaf_id.test_clock_offset_ms = ' . int(($t_stop + 4 - Time::HiRes::time()) * 1000) . "\n");
	$standby->start;
	$standby->promote;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()') or die "$name was not promoted";
	my @snow_after;
	my $refusal = '';
	my $deadline = Time::HiRes::time() + 30;
	while (Time::HiRes::time() < $deadline && !@snow_after)
	{
		my $s = SegmentTap::try_sql($standby, 'postgres', 'SELECT leaf_snowflake_next() FROM generate_series(1, 200)');
		if ($s->{ret} == 0) { @snow_after = grep { /^\d+$/ } split /\n/, $s->{out} }
		else
		{
			$refusal = $s->{err};
			Time::HiRes::usleep(200_000);
		}
	}
	note "D: the promoted ${name}'s snowflake: " . (@snow_after ? scalar(@snow_after) . ' IDs' : "refused: $refusal");
	cmp_ok(scalar @snow_after, '>', 0, "D: the promoted $name issues snowflake IDs, its clock set to 4 s after it stopped");
	is(@snow_after ? $standby->safe_psql('postgres', "SELECT worker_id FROM leaf_snowflake_decode($snow_after[0])") : '',
		'7', 'D: with worker id 7, as the old primary');
	cmp_ok(SegmentTap::min_of(@snow_after) // 0, '>', $last_snow,
		'D: every one is above every snowflake ID the old primary issued');
	is_deeply([ SegmentTap::duplicates(@{ $drawn->{snow} }, @snow_after) ], [], 'D: no snowflake ID twice');

	my @after = finish_drawing($drawn, 120,
		start_drawing($standby, 'd', statements => 20, segment_clients => 3, snowflake => 0));
	is(scalar(grep { $_->{rc} != 0 } @after), 0, "D: the promoted $name hands out segment IDs")
	  or diag join("\n", map { "$_->{name}: $_->{stderr}" } @after);
	is_deeply([ SegmentTap::duplicates(@{ $drawn->{seg} }) ], [],
		"D: no segment ID twice over the primary and the promoted $name");
	note 'D: IDs drawn in all: ' . scalar(@{ $drawn->{seg} }) . ' segment, '
	  . (scalar(@{ $drawn->{snow} }) + scalar(@snow_after)) . ' snowflake';
}

# Checks that the worker's row in pg_stat_activity matches $re while a
# caller waits for a refill (a client asks for 2000 IDs of tag 'order'
# meanwhile, and is refused when the worker's commit is not confirmed):
# "query | wait_event" of the first row whose query starts with
# "leaf_id worker:", polled for up to 5 s ('' when none came). The status
# view must show the same wait with its lag ($lag: 'bytes' or 'null'), and
# a since from the window [$from, $to] (Unix seconds): the worker's commits
# have gone unconfirmed since the standby stopped, whichever other
# standby lagged behind one of them meanwhile. $phase names the checks
# ('C' unless given).
sub check_worker_activity
{
	my ($node, $re, $what, $view_re, $lag, $from, $to, $phase) = @_;
	$phase //= 'C';
	my $c = SegmentTap::start_client($node, 'postgres', 'activity_probe',
		"SELECT count(leaf_segment_next('order')) FROM generate_series(1, 2000);\n");
	my ($seen, $view) = ('', '');
	my $deadline = Time::HiRes::time() + 5;
	while (Time::HiRes::time() < $deadline && ($seen eq '' || $view eq ''))
	{
		$seen = $node->safe_psql('postgres',
			"SELECT query || ' | ' || coalesce(wait_event, '') FROM pg_stat_activity "
			  . "WHERE query LIKE 'leaf_id worker: %' LIMIT 1") if $seen eq '';
		# the status view (catalog 0.5.2): the segment worker's row, read as
		# a pg_monitor member
		$view = $node->safe_psql('postgres',
			"SET ROLE leaf_watcher; SELECT standby_wait || ' | ' "
			  . "|| (standby_wait_since BETWEEN to_timestamp($from) AND to_timestamp($to)) || ' | ' "
			  . "|| extract(epoch FROM standby_wait_since) || ' | ' "
			  . "|| coalesce(standby_lag_bytes::text, 'null') || ' | ' || (pid IS NOT NULL) "
			  . "FROM leaf_id_worker_status WHERE mode = 'segment' AND standby_wait IS NOT NULL") if $view eq '';
		Time::HiRes::usleep(50_000) if $seen eq '' || $view eq '';
	}
	SegmentTap::finish_clients(30, $c);
	note "$phase: the worker in pg_stat_activity: $seen";
	note "$phase: the worker in leaf_id_worker_status: $view";
	like($seen, $re, "$phase: the worker's row in pg_stat_activity $what");
	my $lag_re = $lag eq 'bytes' ? qr/[1-9]\d*/ : qr/null/;
	note sprintf("$phase: the window of its since: %.3f to %.3f", $from, $to);
	like($view, qr/^$view_re \| true \| [0-9.]+ \| $lag_re \| true$/,
		"$phase: leaf_id_worker_status shows a pg_monitor member the same wait, since the standby stopped, and the lag ($lag)");
}

1;
