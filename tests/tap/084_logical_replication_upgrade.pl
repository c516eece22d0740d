# A major upgrade by logical replication (blue/green), as docs/operations.md
# gives it: PostgreSQL 17 (blue, the old major's install in target/pg17, as
# TAP 075 uses it) publishes FOR ALL TABLES, which takes leaf_id's tables
# with the application's; PostgreSQL 18 (green, this suite's server) has
# leaf_id created and the application's schema, subscribes, and draws
# nothing until the cutover. Runs in the 18 suite (skipped on the others),
# from the newest older major of LEAF_ID_UPGRADE_FROM (17 in the test
# command).
#
# Blue draws 20,000 rows before the subscription and 20,000 while it
# streams (a plain tag, an opaque tag and snowflake IDs as column defaults),
# the cutover stops blue's drawing, waits for green to catch up, drops the
# subscription and stops blue; green, with blue's node name (its worker id
# carries over), draws 20,000 rows. The step is held at 1,000
# (leaf_id.max_step), so that blue refills about 20 times while the
# subscription streams. Checked: every key of the 60,000 rows is
# distinct in each column (green's table has blue's rows and their unique
# keys, so a repeat would fail the insert), green's plain and opaque IDs
# continue above blue's (by the opaque tag's decoded counter), green holds
# blue's worker id and its snowflake IDs are above every one of blue's.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

use constant ROWS => 20000;

my $probe = PostgreSQL::Test::Cluster->new('logical_probe');
plan skip_all => 'the upgrade by logical replication runs in the PostgreSQL 18 suite'
  unless $probe->pg_version->major >= 18;
my $root = $ENV{LEAF_ID_TAP_ROOT} or BAIL_OUT('LEAF_ID_TAP_ROOT is not set (run scripts/test-tap.sh)');
my @olds = grep { -e "$root/target/pg$_/lib/leaf_id.so" }
  (defined $ENV{LEAF_ID_UPGRADE_FROM} ? split(' ', $ENV{LEAF_ID_UPGRADE_FROM}) : (15, 16, 17));
skip_all_noted('the upgrade by logical replication: no older major with leaf_id installed (LEAF_ID_UPGRADE_FROM)') unless @olds;
my $m = (sort { $b <=> $a } @olds)[0];
my $path = "$root/target/pg$m";

my $conf = q{
shared_preload_libraries = 'leaf_id'
max_worker_processes = 16
lc_messages = 'C'
log_min_messages = warning
leaf_id.node_name = 'blue'
leaf_id.refill_timeout = 30000
leaf_id.max_step = 1000
};
my $schema = q{
CREATE TABLE orders (
  id bigint PRIMARY KEY DEFAULT leaf_segment_next('order'),
  public_id bigint NOT NULL UNIQUE DEFAULT leaf_segment_next('public_order'),
  sf bigint NOT NULL UNIQUE DEFAULT leaf_snowflake_next(),
  server text NOT NULL);
};

my $blue = PostgreSQL::Test::Cluster->new('blue', install_path => $path);
$blue->init(allows_streaming => 'logical');
$blue->append_conf('postgresql.conf', $conf);
$blue->start;
like($blue->safe_psql('postgres', 'SHOW server_version'), qr/^$m\./, "blue is PostgreSQL $m");
$blue->safe_psql(
	'postgres', qq{
CREATE EXTENSION leaf_id;
SELECT leaf_opaque_create('public_ids', bits => 53);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('order', 1000);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant)
  VALUES ('public_order', 1000, 'public_ids', leaf_opaque_grant('public_ids', 'public_order', 1));
$schema
INSERT INTO orders (server) SELECT 'blue' FROM generate_series(1, @{[ROWS]});
CREATE PUBLICATION blue_green FOR ALL TABLES;
});
is( $blue->safe_psql(
		'postgres', q{SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_publication_tables
		              WHERE pubname = 'blue_green' AND tablename LIKE 'leaf%'}),
	'leaf_alloc,leaf_alloc_encoding,leaf_alloc_tuning,leaf_opaque_domain,leaf_worker',
	'FOR ALL TABLES publishes leaf_id\'s tables');

my $green = PostgreSQL::Test::Cluster->new('green');
$green->init;
$green->append_conf('postgresql.conf', $conf);
$green->start;
$green->safe_psql('postgres', "CREATE EXTENSION leaf_id;\n$schema");
(my $blue_conn = $blue->connstr('postgres')) =~ s/'/''/g;
$green->safe_psql('postgres', "CREATE SUBSCRIPTION blue_green CONNECTION '$blue_conn' PUBLICATION blue_green");
$green->wait_for_subscription_sync($blue, 'blue_green');

# blue goes on drawing while the subscription streams
$blue->safe_psql('postgres', 'INSERT INTO orders (server) SELECT \'blue\' FROM generate_series(1, ' . ROWS . ')');
my $blue_max = $blue->safe_psql('postgres', q{SELECT max(id) || ' ' || max(leaf_opaque_decode('public_ids', public_id)) || ' ' || max(sf) FROM orders});
my ($blue_max_id, $blue_max_counter, $blue_max_sf) = split ' ', $blue_max;
my $blue_wid = $blue->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status');

# the cutover: blue's drawing stopped, green caught up, the subscription
# dropped, blue stopped
$blue->wait_for_catchup('blue_green');
is($green->safe_psql('postgres', 'SELECT count(*) FROM orders'), 2 * ROWS, 'green has every row blue drew');
is( $green->safe_psql('postgres', q{SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'order'}),
	$blue->safe_psql('postgres', q{SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'order'}),
	'green has blue\'s max_id of the tag');
$green->safe_psql('postgres', 'DROP SUBSCRIPTION blue_green');
$blue->stop;

# green draws: segment from the replicated max_id; snowflake with blue's
# node name, taking blue's row once blue's lease has passed
my $r = try_sql($green, 'postgres', 'INSERT INTO orders (server) SELECT \'green\' FROM generate_series(1, ' . ROWS . ')');
is($r->{ret}, 0, 'green draws 20,000 rows after the cutover, every insert succeeds') or diag $r->{err};
is( $green->safe_psql(
		'postgres', q{SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || count(DISTINCT public_id) || ' ' || count(DISTINCT sf) FROM orders}),
	join(' ', (3 * ROWS) x 4),
	'60,000 rows: every segment, opaque and snowflake key distinct');
is($green->safe_psql('postgres', qq{SELECT min(id) > $blue_max_id FROM orders WHERE server = 'green'}),
	't', 'green\'s plain segment IDs are above every one of blue\'s');
is( $green->safe_psql(
		'postgres', qq{SELECT min(leaf_opaque_decode('public_ids', public_id)) > $blue_max_counter FROM orders WHERE server = 'green'}),
	't', 'green\'s opaque IDs continue above blue\'s counters (the key came over)');
is($green->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status'), $blue_wid, 'green holds blue\'s worker id');
is($green->safe_psql('postgres', qq{SELECT min(sf) > $blue_max_sf FROM orders WHERE server = 'green'}),
	't', 'green\'s snowflake IDs are above every one of blue\'s');
$green->stop;
done_testing();
