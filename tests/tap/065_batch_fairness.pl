# A huge batch call lets every other session through: pgbench's single calls
# (one ID per round trip, 1 client, 3 s) keep at least a third of their rate
# alone while another session draws leaf_snowflake_next(2147483647) (or
# leaf_segment_next(tag, 2147483647)), and pg_cancel_backend ends the batch
# within a second. The batch is produced as its rows are read, in chunks of
# 256; a snowflake batch leaves the top 1,024 sequence numbers of every
# millisecond to single calls.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SegmentTap;
use SnowflakeTap qw(pgbench_command);

my $node = leaf_node('batch_fair');
$node->safe_psql('postgres', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('fair', 100000)");

# single calls' rate (tps) over 3 s
sub single_rate
{
	my ($call) = @_;
	my $script = $node->basedir . '/single.sql';
	open my $fh, '>', $script or die $!;
	print $fh "SELECT $call;\n";
	close $fh;
	my ($out, $err) = ('', '');
	IPC::Run::run(pgbench_command($node, $script, '-c', '1', '-T', '3'),
		'>', \$out, '2>', \$err)
	  or die "pgbench failed: $err";
	my ($tps) = $out =~ /tps = ([\d.]+)/ or die "no tps in: $out";
	return $tps;
}

for my $mode (
	[ 'snowflake', 'leaf_snowflake_next()',      'leaf_snowflake_next(2147483647)' ],
	[ 'segment',   "leaf_segment_next('fair')", "leaf_segment_next('fair', 2147483647)" ])
{
	my ($name, $single, $batch) = @$mode;
	single_rate($single);    # warm up (claims, first refills)
	my $alone = single_rate($single);
	my $b = $node->background_psql('postgres');
	my $pid = $b->query_safe('SELECT pg_backend_pid()');
	$b->query_until(qr/started/, "\\echo started\nSELECT count(*) FROM $batch;\n");
	$node->poll_query_until('postgres',
		"SELECT state = 'active' FROM pg_stat_activity WHERE pid = $pid")
	  or die 'the batch did not start';
	my $beside = single_rate($single);
	ok($beside >= $alone / 3,
		"$name: single calls beside a huge batch keep a third of their rate ($beside vs $alone tps alone)");
	is($node->safe_psql('postgres', "SELECT state FROM pg_stat_activity WHERE pid = $pid"),
		'active', "$name: the batch was still running");
	my $t0 = time;
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	my $ended = $node->poll_query_until('postgres',
		"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $pid AND state = 'active')");
	my $took = time - $t0;
	ok($ended && $took < 1.5, sprintf("$name: the batch ended %.2f s after its cancel", $took));
	$b->{run}->kill_kill;
}

# a batch of a few IDs still returns them all, in order, once each
is( $node->safe_psql('postgres',
		"SELECT count(DISTINCT id) || ',' || bool_and(id > lag) FROM (SELECT id, lag(id, 1, 0::bigint) OVER () FROM leaf_snowflake_next(10000) id) s"),
	'10000,true', 'a batch of 10,000 snowflake IDs: distinct and increasing');
is( $node->safe_psql('postgres',
		"SELECT count(DISTINCT id) FROM leaf_segment_next('fair', 300000) id"),
	'300000', 'a batch of 300,000 segment IDs: distinct');
done_testing();
