# Text that is not UTF-8 never reaches leaf_id's code as characters.
#  A. In a UTF-8 database the server does not check the encoding of a custom
#     setting sent at connection start (PGOPTIONS), so current_setting() hands
#     a function bytes that are not UTF-8. leaf_id checks every text argument:
#     600 bytes of 0x80 as a tag are 22021 (they were taken for 0 characters,
#     and the copy into the tag slot panicked: XX000), one byte 0xFF is 22021
#     (the worker looked up another name: 42704), the batch form and
#     leaf_opaque_grant too, also right after a valid tag (the session's last
#     tag is taken without a check only when the bytes are the same); valid
#     tags go on drawing.
#  B. In a LATIN1 database the batch form refuses a tag that is not UTF-8 with
#     22021, as the single form does (pgrx's conversion panicked: XX000).
#  C. In a LATIN1 database a row whose biz_tag is not ASCII does not stop the
#     worker's check for deleted tags (it read the names as Rust strings and
#     the check failed, unlogged, at every round): a deleted tag stops issuing
#     (42704) within the resync interval, and no failed check is logged; a
#     tag whose LATIN1 bytes are also UTF-8 is compared by those bytes and
#     goes on drawing.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('text_not_utf8');
$node->init(extra => ['--no-locale', '--encoding=UTF8']);
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'leaf_id'
max_worker_processes = 16
lc_messages = 'C'
leaf_id.tag_resync_interval = 1
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('open', 1000, 10);
SELECT leaf_opaque_create('d', bits => 53);
});

# --- A: bytes that are not UTF-8, through custom settings ----------------------
{
	local $ENV{PGOPTIONS} = '-c x.long=' . ("\x80" x 600) . " -c x.one=\xff -c x.mid=op\xffn";
	my @cases = (
		[ q{SELECT leaf_segment_next(current_setting('x.long'))}, '600 bytes of 0x80 as a tag' ],
		[ q{SELECT leaf_segment_next(current_setting('x.one'))}, 'the byte 0xFF as a tag' ],
		[ q{SELECT leaf_segment_next('open'); SELECT leaf_segment_next(current_setting('x.mid'))},
			'a tag that is not UTF-8 right after a valid one' ],
		[ q{SELECT * FROM leaf_segment_next(current_setting('x.one'), 2)}, 'the batch form' ],
		[ q{SELECT leaf_opaque_grant(current_setting('x.one'), 'open', 1)}, 'leaf_opaque_grant\'s domain' ],
		[ q{SELECT leaf_opaque_grant('d', current_setting('x.one'), 1)}, 'leaf_opaque_grant\'s tag' ],
		[ q{SELECT leaf_opaque_decode(current_setting('x.one'), 1)}, 'leaf_opaque_decode\'s domain', '42704' ],
	);
	for my $c (@cases)
	{
		my $r = try_sql($node, 'postgres', $c->[0]);
		# (a name only shown in a message is shown, not refused: 42704)
		my $want = $c->[2] // '22021';
		is($r->{sqlstate}, $want, "$c->[1]: $want") or diag "ret $r->{ret}, out $r->{out}, err $r->{err}";
		unlike($r->{err}, qr/panicked|XX000/, "$c->[1]: no panic");
		is($r->{out}, $c->[0] =~ /'open'\); SELECT/ ? '1000' : '', "$c->[1]: no ID of it");
	}
	my $r = try_sql($node, 'postgres', q{SELECT length(current_setting('x.long'))});
	note "the setting as the server has it: $r->{out}$r->{err}";
}
is($node->safe_psql('postgres', q{SELECT leaf_segment_next('open') >= 1000}), 't', 'the valid tag goes on drawing');
my $log = slurp_file($node->logfile);
unlike($log, qr/PANIC|panicked|server process .* was terminated/, 'no panic and no crash in the server log');

# --- B and C: a LATIN1 database --------------------------------------------------
$node->safe_psql('postgres', q{CREATE DATABASE latin TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'});
$node->safe_psql('latin', q{
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step)
VALUES ('caf' || chr(233), 1, 10), ('gone', 5000, 100000), (chr(195) || chr(169), 7000, 100000);
});
my $r = try_sql($node, 'latin', q{SELECT * FROM leaf_segment_next('caf' || chr(233), 2)});
is($r->{sqlstate}, '22021', 'LATIN1: the batch form refuses a tag that is not UTF-8 (22021)')
  or diag "ret $r->{ret}, out $r->{out}, err $r->{err}";
unlike($r->{err}, qr/panicked|XX000/, 'LATIN1: ... without a panic');

is($node->safe_psql('latin', q{SELECT leaf_segment_next('gone')}), '5000', 'LATIN1: an ASCII tag draws');
# the bytes C3 A9 are two LATIN1 characters and valid UTF-8: such a tag
# draws, and the check for deleted tags compares it by its stored bytes
# (read as UTF-8 conversions, they differed: the tag was dropped as deleted)
is($node->safe_psql('latin', q{SELECT leaf_segment_next(chr(195) || chr(169))}), '7000',
	'LATIN1: a tag whose bytes are also UTF-8 draws');
sleep 3;    # three rounds of the check (leaf_id.tag_resync_interval = 1)
is($node->safe_psql('latin', q{SELECT leaf_segment_next(chr(195) || chr(169))}), '7001',
	'LATIN1: ... and still draws after the check for deleted tags');
$node->safe_psql('latin', q{DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'gone'});
my $offset = -s $node->logfile;
# (its cached segments of step 100000 outlast the polls: only the check for
# deleted tags can make it stop within the wait)
my $gone = wait_until(
	30,
	sub {
		my $g = try_sql($node, 'latin', q{SELECT leaf_segment_next('gone')});
		return ($g->{sqlstate} // '') eq '42704';
	});
ok($gone, 'LATIN1: with a non-ASCII biz_tag in leaf_alloc, a deleted tag stops issuing (42704) after the resync');
$log = substr(slurp_file($node->logfile), $offset);
unlike($log, qr/check for deleted tags failed/, 'LATIN1: no failed check for deleted tags in the log');

$node->stop;
done_testing();
