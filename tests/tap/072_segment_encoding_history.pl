# A tag never issues under two encodings. A tag's plain
# IDs and its opaque IDs (or the IDs of two domains) can be equal, so a tag
# that issued under one encoding must refuse another, also after its row was
# deleted, its shared-memory slot freed and the server restarted, and with
# leaf_alloc.opaque_check emptied by hand. The refusal (55000) comes before
# the refill writes anything: max_id and the row's fingerprint stay as they
# were, so a restart does not let the new encoding through either. The
# record outlives the row in leaf_alloc_encoding.
#  A. plain tag, 5,000 IDs, row deleted, slot freed by the resync, inserted
#     again with a 16-bit domain (the reproduction: 361 and 386 IDs twice);
#  B. the same with a restart between the delete and the insert;
#  C. an opaque tag whose opaque_check is set to NULL and its domain changed,
#     across a restart;
#  D. an opaque tag deleted and inserted again plain, across a restart;
#  E. control: a plain tag deleted and inserted again plain (above its IDs)
#     goes on;
#  F. a plain tag's max_id moved back to 1, across a restart: the refill
#     starts at the tag's recorded end (leaf_alloc_encoding.reserved_end);
#  G. an opaque tag's old row (max_id and its grant, which a tag admin may
#     have read) put back, across a restart; and the row deleted and
#     inserted again at 1 with a fresh grant: no ID twice.
# No ID is issued twice over all of it.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SegmentTap;

my $node = leaf_node('history', "leaf_id.tag_resync_interval = 1\n");
$node->safe_psql('postgres', q{
-- (a 16-bit domain as 0.4.0 made them, as in the reproduction)
INSERT INTO leaf_id_catalog.leaf_opaque_domain (name, bits, key) VALUES ('d16', 16, leaf_id_random_key());
SELECT leaf_opaque_create('d20', 20);
CREATE TABLE ids (tag text, id bigint);
});
my %drawn;

sub draw
{
	my ($tag, $n, $what) = @_;
	my $r = try_sql($node, 'postgres',
		"INSERT INTO ids SELECT '$tag', leaf_segment_next('$tag') FROM generate_series(1, $n)");
	is($r->{ret}, 0, "$what: $n IDs of $tag") or diag $r->{err};
	return;
}

sub refused
{
	my ($tag, $what) = @_;
	my $before = $node->safe_psql('postgres',
		"SELECT max_id || ':' || COALESCE(opaque_check::text, 'null') FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = '$tag'");
	my $r = try_sql($node, 'postgres',
		"INSERT INTO ids SELECT '$tag', leaf_segment_next('$tag') FROM generate_series(1, 5000)");
	is($r->{sqlstate}, '55000', "$what: refused with 55000") or diag $r->{err};
	like($r->{err}, qr/another encoding/, "$what: the message says why");
	is( $node->safe_psql('postgres',
			"SELECT max_id || ':' || COALESCE(opaque_check::text, 'null') FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = '$tag'"),
		$before, "$what: the refill wrote nothing (max_id and opaque_check as before)");
	return;
}

sub slot_gone
{
	my ($tag) = @_;
	# (a missing tag's slot is never matched again: the tag inserted again
	# gets another slot, which knows no encoding)
	ok( wait_until(30, sub {
				$node->safe_psql('postgres',
					"SELECT count(*) FROM leaf_segment_status WHERE tag = '$tag' AND status <> 'missing'") eq '0';
			}),
		"the resync found $tag deleted: its slot is missing");
	return;
}

sub opaque_row
{
	my ($tag, $domain, $max_id) = @_;
	return "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id, opaque_domain, opaque_grant) "
	  . "VALUES ('$tag', 100, $max_id, '$domain', leaf_opaque_grant('$domain', '$tag', $max_id))";
}

# --- A. plain, deleted, slot freed, opaque again --------------------------------
$node->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('a', 100)});
draw('a', 5000, 'A');
$node->safe_psql('postgres', q{DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'a'});
slot_gone('a');
$node->safe_psql('postgres', opaque_row('a', 'd16', 1));
refused('a', 'A: a plain tag inserted again with a 16-bit domain');

# --- B. the same across a restart --------------------------------------------------
$node->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('b', 100)});
draw('b', 5000, 'B');
$node->safe_psql('postgres', q{DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'b'});
$node->restart;
$node->safe_psql('postgres', opaque_row('b', 'd16', 1));
refused('b', 'B: ... with a restart between the delete and the insert');
$node->restart;
refused('b', 'B: ... and after one more restart');

# --- C. opaque_check emptied by hand, the domain changed ----------------------------
$node->safe_psql('postgres', opaque_row('c', 'd20', 1));
draw('c', 3000, 'C');
$node->restart;
$node->safe_psql('postgres', q{UPDATE leaf_id_catalog.leaf_alloc SET opaque_check = NULL, opaque_domain = 'd16',
  opaque_grant = leaf_opaque_grant('d16', 'c', max_id) WHERE biz_tag = 'c'});
refused('c', 'C: an opaque tag with opaque_check NULL and another domain');

# --- D. opaque, deleted, plain again -------------------------------------------------
$node->safe_psql('postgres', opaque_row('dd', 'd20', 1));
draw('dd', 3000, 'D');
$node->safe_psql('postgres', q{DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'dd'});
$node->restart;
$node->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('dd', 100)});
refused('dd', 'D: an opaque tag inserted again plain');

# --- E. control: the same encoding goes on -------------------------------------------
$node->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('e', 100)});
draw('e', 2000, 'E');
my $above = $node->safe_psql('postgres', q{SELECT max(id) + 1 FROM ids WHERE tag = 'e'});
$node->safe_psql('postgres', q{DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'e'});
$node->restart;
$node->safe_psql('postgres', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('e', 100, $above)");
draw('e', 2000, 'E: a plain tag inserted again plain, above its IDs');

# --- F. a plain tag's max_id moved back, across a restart ----------------------------
$node->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('f', 100)});
draw('f', 3000, 'F');
$node->safe_psql('postgres', q{UPDATE leaf_id_catalog.leaf_alloc SET max_id = 1 WHERE biz_tag = 'f'});
$node->restart;
draw('f', 3000, 'F: max_id moved back to 1, after a restart');
is($node->safe_psql('postgres', q{SELECT count(*) - count(DISTINCT id) FROM ids WHERE tag = 'f'}), '0',
	'F: no ID of the tag twice (the refill starts at the recorded end)');

# --- G. an opaque tag's old row put back with its grant, across a restart ------------
# (a tag admin who read the row once may write max_id and opaque_grant back:
# the grant of that max_id is valid, but the IDs after it were issued)
$node->safe_psql('postgres', opaque_row('g', 'd20', 1));
draw('g', 2000, 'G');
my $old_row = $node->safe_psql('postgres', q{SELECT max_id || ',' || opaque_grant FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'g'});
my ($old_max, $old_grant) = split /,/, $old_row;
# more, until the tag has issued counters above that max_id (the row's
# max_id covers both cached segments: it takes a refill or two)
my $past = 0;
for (1 .. 20)
{
	draw('g', 1000, 'G: more');
	$past = $node->safe_psql('postgres',
		"SELECT max(leaf_opaque_decode('d20', id)) > $old_max + 500 FROM ids WHERE tag = 'g'") eq 't';
	last if $past;
}
ok($past, "G: the tag issued counters above the old max_id $old_max");
$node->safe_psql('postgres',
	"UPDATE leaf_id_catalog.leaf_alloc SET max_id = $old_max, opaque_grant = $old_grant WHERE biz_tag = 'g'");
$node->restart;
draw('g', 3000, "G: the row of max_id $old_max put back with its grant, after a restart");
is($node->safe_psql('postgres', q{SELECT count(*) - count(DISTINCT id) FROM ids WHERE tag = 'g'}), '0',
	'G: no ID of the tag twice');
# and deleted and inserted again lower, with a decoder's fresh grant
$node->safe_psql('postgres', q{DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'g'});
$node->restart;
$node->safe_psql('postgres', opaque_row('g', 'd20', 1));
draw('g', 2000, 'G: deleted and inserted again at max_id 1, after a restart');
is($node->safe_psql('postgres', q{SELECT count(*) - count(DISTINCT id) FROM ids WHERE tag = 'g'}), '0',
	'G: still no ID of the tag twice');

is($node->safe_psql('postgres', 'SELECT count(*) - count(DISTINCT (tag, id)) FROM ids'), '0',
	'no ID of a tag issued twice');
is($node->safe_psql('postgres', q{SELECT count(*) FROM ids WHERE tag IN ('a', 'b', 'c', 'dd')}), '16000',
	'the refused encodings issued nothing');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(biz_tag || '=' || (opaque_check = 0)::text, ',' ORDER BY biz_tag) FROM leaf_id_catalog.leaf_alloc_encoding}),
	'a=true,b=true,c=false,dd=false,e=true,f=true,g=false', 'leaf_alloc_encoding holds the encoding each tag issued under');

$node->stop;
done_testing();
