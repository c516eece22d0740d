# pg_upgrade with leaf_id in use, within the major the suite runs on (15 to
# 15, ..., 18 to 18; from 15, 16 and 17 to 18: 075_pg_upgrade_from_older_majors).
#
# The old cluster draws segment IDs of a tag and snowflake IDs under a fixed
# node name, is stopped cleanly, and pg_upgrade moves it into a new cluster
# with leaf_id preloaded. The new cluster's segment IDs are above every ID
# the old one issued (its cached segments are lost, never issued again), its
# snowflake IDs keep the node's worker id and are above the old ones, and no
# ID is issued twice.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $conf = "leaf_id.node_name = 'upgraded-node'\n";
my $old = leaf_node('old', $conf);
$old->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('order', 100);
CREATE TABLE ids (phase int, kind text, id bigint);
INSERT INTO ids SELECT 1, 'segment', leaf_segment_next('order') FROM generate_series(1, 250);
INSERT INTO ids SELECT 1, 'snowflake', leaf_snowflake_next() FROM generate_series(1, 2000);
});
my $old_wid = $old->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status');
$old->stop;

my $new = PostgreSQL::Test::Cluster->new('new');
$new->init;
$new->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'leaf_id'
lc_messages = 'C'
log_min_messages = warning
$conf
});
my $bindir = $old->config_data('--bindir');
command_ok(
	[
		'pg_upgrade', '--no-sync',
		'-d', $old->data_dir, '-D', $new->data_dir,
		'-b', $bindir, '-B', $bindir,
		'-p', $old->port, '-P', $new->port,
		'-s', $new->host,
	],
	'pg_upgrade moves the cluster with leaf_id into the new one');
$new->start;

is($new->safe_psql('postgres', "SELECT extversion = default_version FROM pg_extension, pg_available_extensions WHERE extname = 'leaf_id' AND name = 'leaf_id'"),
	't', 'the extension is there, at its version');
my $r = try_sql($new, 'postgres',
	"INSERT INTO ids SELECT 2, 'segment', leaf_segment_next('order') FROM generate_series(1, 250)");
is($r->{ret}, 0, 'segment IDs after the upgrade') or diag $r->{err};
my $sf = insert_snowflake_ids($new, 2, 2000, 20);
ok($sf->{ok}, 'snowflake IDs after the upgrade (within the old lease\'s end)') or diag $sf->{err};

is(phase_above($new, 'segment', 'snowflake'), 't', 'in both modes every ID after the upgrade is above every ID before it');
is($new->safe_psql('postgres', 'SELECT count(*) - count(DISTINCT id) FROM ids'), '0', 'no ID twice');
is($new->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status'),
	$old_wid, 'the node keeps its snowflake worker id');

$new->stop;
done_testing();
