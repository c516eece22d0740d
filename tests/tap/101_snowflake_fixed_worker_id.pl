# leaf_id snowflake mode: a worker id configured with leaf_id.worker_id.
#
# - every ID carries the configured worker id (decode and the bit layout agree);
# - leaf_worker registers the id under this node's name;
# - leaf_snowflake_status reports source 'setting';
# - IDs of one statement are distinct and strictly increasing, and no ID is
#   beyond the high-water mark persisted in leaf_worker.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SnowflakeTap;

my $node = snowflake_node('snowflake_fixed', "leaf_id.worker_id = 42\n");

my $expected_node = default_node_name($node);

$node->safe_psql('postgres', <<'SQL');
CREATE TABLE ids (n int PRIMARY KEY, id bigint NOT NULL);
INSERT INTO ids SELECT g, leaf_snowflake_next() FROM generate_series(1, 20000) g;
SQL

is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT id) FROM ids'),
	'20000|20000', '20000 IDs, all distinct');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (
  SELECT id, lag(id) OVER (ORDER BY n) AS prev FROM ids) s
WHERE id <= prev}),
	'0',
	'IDs of one statement are strictly increasing in call order');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM ids, LATERAL leaf_snowflake_decode(id) d
WHERE d.worker_id <> 42}),
	'0',
	'every ID decodes to worker id 42');

my $epoch = LEAF_EPOCH_MS;
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM ids, LATERAL leaf_snowflake_decode(id) d
WHERE id < 0
   OR ((id >> 12) & 1023) <> 42
   OR (id & 4095) <> d.sequence
   OR (id >> 22) + $epoch <> (extract(epoch FROM d.timestamp) * 1000)::bigint
   OR leaf_snowflake_min_id(d.timestamp) > id
   OR leaf_snowflake_min_id(d.timestamp) <> ((id >> 22) << 22)}),
	'0',
	'bit layout: (ms - epoch) << 22 | 42 << 12 | sequence, and decode/min_id agree with it');

is( $node->safe_psql(
		'postgres', q{
SELECT bool_and(abs(extract(epoch FROM d.timestamp - now())) < 60)
FROM ids, LATERAL leaf_snowflake_decode(id) d}),
	't',
	'decoded timestamps are close to the current time');

is( $node->safe_psql(
		'postgres', q{SELECT worker_id, node_name FROM leaf_id_catalog.leaf_worker ORDER BY worker_id}),
	"42|$expected_node",
	'leaf_worker has exactly one row: worker id 42 with this node\'s name');

is(snowflake_status($node, 'state, worker_id, worker_id_source, node_name'),
	"ready|42|setting|$expected_node",
	'status: ready, worker id 42 from the setting, this node\'s name');

# No issued millisecond is beyond the persisted high-water mark.
is(ids_within_mark($node, 42),
	't',
	'the last issued millisecond is not beyond leaf_worker.last_timestamp');

# The generator's mark (shared memory) is published only after the worker's
# commit, so read it first; the table, read afterwards, is at least as far.
my ($issued_ms, $mark_ms) = split /\|/, snowflake_status($node, q{
       (extract(epoch FROM last_issued) * 1000)::bigint,
       (extract(epoch FROM persisted_mark) * 1000)::bigint});
my $table_mark = persisted_mark($node, 42);
ok($mark_ms ne '' && $issued_ms <= $mark_ms && $mark_ms <= $table_mark,
	"status: last_issued ($issued_ms) <= persisted_mark ($mark_ms) <= leaf_worker.last_timestamp ($table_mark)"
);

# A further call continues above everything issued so far.
is( $node->safe_psql('postgres', 'SELECT leaf_snowflake_next() > (SELECT max(id) FROM ids)'),
	't', 'a later call is larger than all earlier IDs');

$node->stop;
done_testing();
