# leaf_segment_next(tag) reads its text argument in place (src/runtime/
# text_arg.rs, for speed): a short tag where it lies, a compressed or
# out-of-line (TOAST) one detoasted first. Checked here:
#  - multi-byte tags (UTF-8) draw from their own rows;
#  - an oversized tag that reaches the function compressed (a column value
#    of a table, compressed inline) and one that reaches it as a TOAST
#    pointer (stored external) are refused with 22023 and their true length
#    in characters (read without the detoast, the length would be the
#    pointer's or the compressed bytes');
#  - a NULL tag is 22004;
#  - in a LATIN1 database an ASCII tag draws, a non-ASCII one is refused
#    with 22021 (leaf_id keeps tags as UTF-8), never a crash or XX000.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('tag_argument');
$node->init(extra => ['--no-locale', '--encoding=UTF8']);
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'leaf_id'
max_worker_processes = 16
lc_messages = 'C'
});
$node->start;

$node->safe_psql('postgres', q{
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('été', 1000, 10), ('ete', 5000, 10), ('日本', 9000, 10);
});

# --- multi-byte tags -----------------------------------------------------------
is($node->safe_psql('postgres',
	q{SELECT leaf_segment_next('été'), leaf_segment_next('ete'), leaf_segment_next('日本'), leaf_segment_next('été')}),
	'1000|5000|9000|1001', 'UTF-8 tags draw from their own rows (été, ete, 日本)');

# --- oversized tags, compressed and out of line ---------------------------------
# 'x' repeated compresses well: stored inline, compressed (4-byte header,
# compressed bit); random characters do not compress: with STORAGE EXTERNAL
# the value is a TOAST pointer in the heap tuple. The function gets the
# column's datum as it is stored.
$node->safe_psql('postgres', q{
CREATE TABLE long_tags (kind text PRIMARY KEY, tag text);
ALTER TABLE long_tags ALTER COLUMN tag SET STORAGE MAIN;
INSERT INTO long_tags VALUES ('compressed', repeat('x', 6000));
CREATE TABLE long_tags_ext (kind text PRIMARY KEY, tag text);
ALTER TABLE long_tags_ext ALTER COLUMN tag SET STORAGE EXTERNAL;
INSERT INTO long_tags_ext
  SELECT 'external', string_agg(chr(65 + (random() * 25)::int), '') FROM generate_series(1, 3000);
INSERT INTO long_tags_ext VALUES ('external_utf8', repeat('é', 2500));
});
is($node->safe_psql('postgres',
	q{SELECT pg_column_compression(tag) IS NOT NULL, pg_column_size(tag) < 1000 FROM long_tags}),
	't|t', 'premise: the 6000-character tag is stored compressed, inline');
# (pg_column_size() reports an external value's stored size, not its
# pointer's: the TOAST table's chunks tell instead)
is($node->safe_psql('postgres',
	q{SELECT count(DISTINCT chunk_id) FROM pg_toast.pg_toast_} . $node->safe_psql('postgres',
		q{SELECT 'long_tags_ext'::regclass::oid})),
	'2', 'premise: the other two are stored out of line (a TOAST pointer in the row)');

for my $case (['long_tags', 'compressed', 6000], ['long_tags_ext', 'external', 3000],
	['long_tags_ext', 'external_utf8', 2500])
{
	my ($table, $kind, $chars) = @$case;
	my ($rc, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT leaf_segment_next(tag) FROM $table WHERE kind = '$kind'");
	like($err, qr/ERROR:  22023: leaf_id tag is $chars characters long; the limit is 128/,
		"the $kind tag of $chars characters is refused with 22023 and its true length");
}

# 128 characters is the limit, whatever their bytes (256 bytes of é)
$node->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES (repeat('é', 128), 1, 10)});
is($node->safe_psql('postgres', q{SELECT leaf_segment_next(repeat('é', 128))}), '1',
	'a tag of 128 two-byte characters draws');

my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\nSELECT leaf_segment_next(NULL)");
like($err, qr/ERROR:  22004: leaf_id tag must not be NULL/, 'a NULL tag is 22004');

# --- a LATIN1 database -----------------------------------------------------------
$node->safe_psql('postgres',
	q{CREATE DATABASE latin ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
$node->safe_psql('latin', q{
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('plain', 700, 10);
});
is($node->safe_psql('latin', q{SELECT leaf_segment_next('plain'), leaf_segment_next('plain')}),
	'700|701', 'LATIN1 database: an ASCII tag draws');
($rc, $out, $err) = $node->psql('latin', "\\set VERBOSITY verbose\nSELECT leaf_segment_next('caf' || chr(233))");
like($err, qr/ERROR:  22021: leaf_id takes text of UTF-8 characters only/,
	'LATIN1 database: a non-ASCII tag is refused with 22021');
is($node->safe_psql('latin', q{SELECT leaf_segment_next('plain')}), '702',
	'LATIN1 database: the session draws on after the refusal');

$node->stop;
done_testing();
