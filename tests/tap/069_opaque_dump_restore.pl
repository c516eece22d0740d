# leaf_id opaque IDs and pg_dump / pg_restore: the dump keeps each
# domain's key and every tag's domain, so every ID decodes the same after a
# restore into a fresh cluster, and the restored tag goes on with IDs that
# the source never issued, above its counters.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $src = leaf_node('opaque_dump_source');
$src->safe_psql('postgres', 'CREATE DATABASE app');
$src->safe_psql('app', q{
CREATE EXTENSION leaf_id;
SELECT leaf_opaque_create('public_order', bits => 53);
SELECT leaf_opaque_create('unused', bits => 63);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('order', 100, 'public_order', leaf_opaque_grant('public_order', 'order', 1));
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT leaf_segment_next('order'), item text);
INSERT INTO orders (item) SELECT 'o' FROM generate_series(1, 1000);
});
my $fingerprint = q{SELECT string_agg(name || ':' || bits || ':' || md5(key), ',' ORDER BY name) FROM leaf_id_catalog.leaf_opaque_domain};
my $decoded = q{SELECT string_agg(leaf_opaque_decode('public_order', id)::text, ',' ORDER BY id) FROM orders};
my %src = (
	keys => $src->safe_psql('app', $fingerprint),
	decoded => $src->safe_psql('app', $decoded),
	max_counter => $src->safe_psql('app', q{SELECT max(leaf_opaque_decode('public_order', id)) FROM orders}),
);

my $dump = $PostgreSQL::Test::Utils::tmp_check . '/opaque.dump';
$src->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $src->connstr('app') ], 'pg_dump -Fc');

my $new = leaf_node('opaque_dump_restore');
$new->safe_psql('postgres', 'CREATE DATABASE app');
$new->command_ok([ 'pg_restore', '-d', $new->connstr('app'), $dump ], 'pg_restore into a fresh cluster');
is($new->safe_psql('app', $fingerprint), $src{keys}, 'every domain is restored with its width and key');
is($new->safe_psql('app', q{SELECT opaque_domain FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'order'}),
	'public_order', "the tag's domain is restored");
is($new->safe_psql('app', $decoded), $src{decoded}, 'every ID decodes to the same counter after the restore');
is($new->safe_psql('app', q{SELECT count(*) FROM orders WHERE leaf_opaque_encode('public_order', leaf_opaque_decode('public_order', id)) <> id}),
	'0', '... and encodes back');

my @new_ids = split /\n/, $new->safe_psql('app', q{INSERT INTO orders (item) SELECT 'r' FROM generate_series(1, 300) RETURNING id});
is(scalar @new_ids, 300, 'the restored tag issues (the encoding recorded before the dump is accepted)');
is($new->safe_psql('app', 'SELECT count(DISTINCT id) FROM orders'), '1300', 'no restored ID is one the source issued');
cmp_ok($new->safe_psql('app', q{SELECT min(leaf_opaque_decode('public_order', id)) FROM orders WHERE item = 'r'}),
	'>', $src{max_counter}, "the restored tag's counters are above the source's");

$_->stop for ($src, $new);
done_testing();
