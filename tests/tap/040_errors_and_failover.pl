# leaf_id errors that need their own server set-up, and failover:
#  - the library not in shared_preload_libraries: 55000, no ID
#  - no background worker slot: 53400 naming max_worker_processes
#  - a refill that does not come in time: 55P03, nothing half-done
#  - a standby refuses (25006); after promotion, with synchronous replication,
#    every new ID is above every ID the old primary handed out
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SegmentTap;
use Time::HiRes qw(usleep time);

# --- not preloaded
{
	my $node = PostgreSQL::Test::Cluster->new('not_preloaded');
	$node->init;
	$node->append_conf('postgresql.conf', "lc_messages = 'C'\n");
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION leaf_id');
	$node->safe_psql('postgres',
		"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('t', 10)");
	my $r = try_sql($node, 'postgres', "SELECT leaf_segment_next('t')");
	is($r->{sqlstate}, '55000', 'not preloaded: segment call fails with 55000');
	like($r->{err}, qr/shared_preload_libraries/, 'the message names shared_preload_libraries');
	$r = try_sql($node, 'postgres', 'SELECT leaf_snowflake_next()');
	is($r->{sqlstate}, '55000', 'not preloaded: snowflake call fails with 55000');
	is($node->safe_psql('postgres', "SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 't'"),
		'1', 'nothing was reserved');
	$node->stop;
}

# --- an invalid epoch stops the server at start, with a clear message
{
	my $node = PostgreSQL::Test::Cluster->new('bad_epoch');
	$node->init;
	my $future = int(time() * 1000) + 86_400_000;
	for my $case ([ $future, qr/leaf_id\.epoch_ms = $future is in the future/ ],
		# (a non-negative epoch cannot have run out of its 41 bits before 2039)
		[ '-5', qr/leaf_id\.epoch_ms = -5 is in the future or negative/ ],
		[ 'soon', qr/leaf_id\.epoch_ms = "soon" is not a number/ ])
	{
		my ($value, $message) = @$case;
		$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'leaf_id'
leaf_id.epoch_ms = '$value'
lc_messages = 'C'
});
		my $log_offset = -s $node->logfile || 0;
		ok(!$node->start(fail_ok => 1), "epoch $value: the server refuses to start");
		my $log = slurp_file($node->logfile, $log_offset);
		like($log, $message, "epoch $value: the log says why");
	}
}

# --- no worker slot: all max_worker_processes taken by nothing else is hard to
# arrange; with max_worker_processes = 0 no dynamic worker can start
{
	my $node = PostgreSQL::Test::Cluster->new('no_worker_slot');
	$node->init;
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'leaf_id'
max_worker_processes = 0
max_parallel_workers = 0
lc_messages = 'C'
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION leaf_id');
	$node->safe_psql('postgres',
		"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('t', 10)");
	my $r = try_sql($node, 'postgres', "SELECT leaf_segment_next('t')");
	is($r->{sqlstate}, '53400', 'no worker slot: 53400');
	like($r->{err}, qr/max_worker_processes/, 'the hint names max_worker_processes');
	is($node->safe_psql('postgres', "SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 't'"),
		'1', 'nothing was reserved');
	$node->stop;
}

# --- refill timeout: a session holds the tag's row lock, so the worker's
# refill blocks; the caller gives up after leaf_id.refill_timeout
{
	my $node = leaf_node('refill_timeout');
	$node->safe_psql('postgres',
		"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('locked', 10)");
	my $holder = $node->background_psql('postgres');
	$holder->query_safe("BEGIN; SELECT * FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'locked' FOR UPDATE;");
	my $t0 = time;
	my $r = try_sql($node, 'postgres',
		"SET leaf_id.refill_timeout = '1s'; SELECT leaf_segment_next('locked');");
	my $waited = time - $t0;
	is($r->{sqlstate}, '55P03', 'refill not in time: 55P03');
	ok($waited >= 0.9 && $waited < 5,
		sprintf('the call waited about leaf_id.refill_timeout (1 s): %.2f s', $waited));
	like($r->{err}, qr/timed out waiting for a refill of leaf_id tag "locked"/, 'message names the tag');
	$holder->query_safe('ROLLBACK');
	$holder->quit;
	# once the lock is gone, IDs flow and start at the table's max_id
	my @ids = draw_ids($node, 'postgres', 'locked', 25);
	is($ids[0], '1', 'after the timeout, the first ID is the first reserved one');
	is_deeply([ duplicates(@ids) ], [], 'no duplicates');
	$node->stop;
}

# --- DROP EXTENSION and CREATE EXTENSION at once: the new leaf_alloc starts
# over, so nothing cached from the dropped one may be handed out, and in this
# server lifetime the new table's ranges start above the old reservations
# (the old IDs may still be in the database's tables)
{
	my $node = leaf_node('recreate');
	$node->safe_psql('postgres',
		"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('r', 1000)");
	my @old = draw_ids($node, 'postgres', 'r', 10);
	my $sf_old = $node->safe_psql('postgres', 'SELECT leaf_snowflake_next()');
	my $out = $node->safe_psql('postgres', qq{
DROP EXTENSION leaf_id;
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('r', 1000);
SELECT leaf_segment_next('r') FROM generate_series(1, 2000);
});
	my @new = split /\n/, $out;
	my %old = map { $_ => 1 } @old;
	ok($new[0] > max_of(@old),
		"after re-creation the first ID ($new[0]) is above the dropped extension's IDs");
	is_deeply([ grep { $old{$_} } @new ], [], 'no ID of the dropped extension is handed out again');
	is_deeply([ duplicates(@new) ], [], 'no ID repeated within the new extension');
	my $sf_new = '';
	for (1 .. 100)
	{
		my $t = try_sql($node, 'postgres', 'SELECT leaf_snowflake_next()');
		if (!$t->{sqlstate}) { ($sf_new = $t->{out}) =~ s/\s+//g; last; }
		usleep(100_000);
	}
	cmp_ok($sf_new, '>', $sf_old, 'snowflake goes on above the old IDs after re-creation');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM leaf_id_catalog.leaf_worker'), '1',
		'the worker id was claimed again in the new registry');
	$node->stop;
}

# --- standby and failover with synchronous replication
{
	my $primary = PostgreSQL::Test::Cluster->new('primary');
	$primary->init(allows_streaming => 1);
	$primary->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'leaf_id'
max_worker_processes = 16
lc_messages = 'C'
});
	$primary->start;
	$primary->safe_psql('postgres', 'CREATE EXTENSION leaf_id');
	$primary->safe_psql('postgres',
		"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('f', 100)");
	$primary->backup('b');
	my $standby = PostgreSQL::Test::Cluster->new('standby');
	$standby->init_from_backup($primary, 'b', has_streaming => 1);
	$standby->start;
	$primary->append_conf('postgresql.conf', "synchronous_standby_names = '" . $standby->name . "'\n");
	$primary->reload;
	$primary->poll_query_until('postgres',
		"SELECT sync_state = 'sync' FROM pg_stat_replication")
	  or die 'standby did not become synchronous';

	my @before = draw_ids($primary, 'postgres', 'f', 5000);
	my $sf_before = $primary->safe_psql('postgres',
		'SELECT max(leaf_snowflake_next()) FROM generate_series(1, 1000)');
	$primary->wait_for_catchup($standby, "replay");

	my $r = try_sql($standby, 'postgres', "SELECT leaf_segment_next('f')");
	is($r->{sqlstate}, '25006', 'standby: segment call refused with 25006');
	$r = try_sql($standby, 'postgres', 'SELECT leaf_snowflake_next()');
	is($r->{sqlstate}, '25006', 'standby: snowflake call refused with 25006');

	# more IDs right before the crash, no explicit catch-up: synchronous
	# replication must have carried every refill they came from
	push @before, draw_ids($primary, 'postgres', 'f', 5000);
	my $max_before = max_of(@before);
	$primary->stop('immediate');
	$standby->promote;
	my @after = draw_ids($standby, 'postgres', 'f', 2000);
	cmp_ok(min_of(@after), '>', $max_before,
		'after failover every new ID is above every ID of the old primary');
	is_deeply([ duplicates(@before, @after) ], [], 'no ID repeated across the failover');

	# snowflake: the promoted node has another node name (port), so it claims
	# another worker id; its IDs cannot collide with the old primary's
	my $sf_after = '';
	for (1 .. 100)
	{
		my $t = try_sql($standby, 'postgres', 'SELECT leaf_snowflake_next()');
		if (!$t->{sqlstate}) { ($sf_after = $t->{out}) =~ s/\s+//g; last; }
		usleep(100_000);
	}
	isnt($sf_after, '', 'snowflake works on the promoted node');
	my $workers = $standby->safe_psql('postgres',
		"SELECT (SELECT worker_id FROM leaf_snowflake_decode($sf_before)) <> (SELECT worker_id FROM leaf_snowflake_decode($sf_after))");
	is($workers, 't', 'the promoted node uses another worker id than the old primary');
	$standby->stop;
}

done_testing();
