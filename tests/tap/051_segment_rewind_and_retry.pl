# leaf_id segment mode, what an operator may do to leaf_alloc while the
# server runs:
#  - a tag deleted and inserted again with max_id = max(id) + 1, and an
#    UPDATE that moves max_id back on a live tag: no ID is handed out twice
#    (a primary key would raise 23505); the reservation moves forward and
#    logs a WARNING;
#  - a trigger that skips or changes the reservation's UPDATE, or keeps its
#    recorded end in leaf_alloc_encoding from moving: no ID of an unrecorded
#    range is handed out, the call fails with 55000;
#  - a prefetch that fails once (an admin holds the row longer than the
#    worker's lock_timeout) is retried without waiting for callers to drain
#    both segments.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node('rewind', "leaf_id.max_step = 10\n");
$node->safe_psql(
	'postgres', q{
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT leaf_segment_next('order'), n int);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('order', 10);
});

sub insert_rows
{
	my ($n, $what) = @_;
	my $r = try_sql($node, 'postgres',
		"INSERT INTO orders (n) SELECT g FROM generate_series(1, $n) g");
	is($r->{sqlstate}, undef, "$what: $n inserts, no duplicate key")
	  or diag $r->{err};
}

sub wait_prefetched
{
	return wait_until(
		20,
		sub {
			$node->safe_psql('postgres',
				"SELECT next_ready FROM leaf_segment_status WHERE tag = 'order'") eq 't';
		});
}

insert_rows(25, 'before');
ok(wait_prefetched(), 'the next segment is prefetched');

# 1. delete the tag and insert it again, "natural" max_id = max(id) + 1,
# while this server still caches segments of the old row
$node->safe_psql(
	'postgres', q{
DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'order';
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) SELECT 'order', 10, max(id) + 1 FROM orders;
});
insert_rows(60, 're-created tag');

# 2. move max_id back on the live tag
ok(wait_prefetched(), 'prefetched again');
$node->safe_psql('postgres',
	"UPDATE leaf_id_catalog.leaf_alloc SET max_id = (SELECT max(id) - 5 FROM orders) WHERE biz_tag = 'order'");
insert_rows(60, 'rewound max_id');
is($node->safe_psql('postgres', 'SELECT count(*) = count(DISTINCT id) FROM orders'),
	't', 'every ID in orders is distinct');
ok( $node->wait_for_log(
		qr/WARNING:  leaf_id: leaf_alloc\.max_id of tag "order" is \d+, below \d+ that was already reserved for it/
	),
	'the moved reservation is logged as a WARNING');
my $end = $node->safe_psql('postgres',
	"SELECT max_id > (SELECT max(id) FROM orders) FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'order'");
is($end, 't', 'leaf_alloc.max_id is above every ID handed out');

# 3. a trigger that skips the reservation's UPDATE, then one that changes it
for my $trigger (
	[ 'skips', 'RETURN NULL' ],
	[ 'changes', 'NEW.max_id := OLD.max_id + 1; RETURN NEW' ])
{
	my ($what, $body) = @$trigger;
	my $log_offset = -s $node->logfile;
	$node->safe_psql(
		'postgres', qq{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('trig_$what', 10, 1000);
CREATE FUNCTION trig_$what() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN $body; END \$\$;
CREATE TRIGGER trig_$what BEFORE UPDATE ON leaf_id_catalog.leaf_alloc FOR EACH ROW
  WHEN (OLD.biz_tag = 'trig_$what') EXECUTE FUNCTION trig_$what();
});
	my $r = try_sql($node, 'postgres',
		"SET leaf_id.refill_timeout = 5000; SELECT leaf_segment_next('trig_$what')");
	is($r->{sqlstate}, '55000', "a trigger that $what the reservation: the call fails with 55000")
	  or diag $r->{err} . $r->{out};
	like($r->{err}, qr/could not record the reservation of tag "trig_$what"/,
		'and says why');
	is($r->{out}, '', "no ID of an unrecorded range (trigger $what)");
	$node->safe_psql('postgres', "DROP TRIGGER trig_$what ON leaf_id_catalog.leaf_alloc");
	my $after = try_sql($node, 'postgres', "SELECT leaf_segment_next('trig_$what')");
	is($after->{out}, '1000', "without the trigger the tag starts at its max_id");
}

# 3b. a trigger that keeps the recorded end in leaf_alloc_encoding (which
# keeps a tag above its ranges after a restart) from moving: refused too
# (the refill went on, and a max_id moved back after a restart could then
# repeat IDs)
$node->safe_psql('postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('keep_end', 10, 2000);
CREATE FUNCTION keep_end() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.reserved_end := OLD.reserved_end; RETURN NEW; END $$;
CREATE TRIGGER keep_end BEFORE UPDATE ON leaf_id_catalog.leaf_alloc_encoding FOR EACH ROW
  WHEN (OLD.biz_tag = 'keep_end') EXECUTE FUNCTION keep_end()});
my $kept = try_sql($node, 'postgres', "SET leaf_id.refill_timeout = 5000; SELECT leaf_segment_next('keep_end')");
is($kept->{sqlstate}, '55000', 'a trigger that keeps the recorded end: the call fails with 55000')
  or diag $kept->{err} . $kept->{out};
like($kept->{err}, qr/could not record the end of the reservation of tag "keep_end" in leaf_alloc_encoding/,
	'and says why');
is($kept->{out}, '', 'no ID of a range whose end is not recorded');
$node->safe_psql('postgres', 'DROP TRIGGER keep_end ON leaf_id_catalog.leaf_alloc_encoding');
is(try_sql($node, 'postgres', "SELECT leaf_segment_next('keep_end') >= 2000")->{out}, 't',
	'without the trigger the tag issues');

# 4. a failed prefetch is retried: an admin holds the row past the worker's
# lock_timeout (5 s) while the prefetch runs
$node->safe_psql('postgres',
	"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('held', 1000)");
is($node->safe_psql('postgres', "SELECT leaf_segment_next('held')"), '1', 'held works');
# past 10% of the first segment: the next one is prefetched
$node->safe_psql('postgres', "SELECT count(leaf_segment_next('held')) FROM generate_series(1, 150)");
ok( wait_until(
		20,
		sub {
			$node->safe_psql('postgres',
				"SELECT next_ready FROM leaf_segment_status WHERE tag = 'held'") eq 't';
		}),
	'held: next segment prefetched');
my $waits_before = $node->safe_psql('postgres',
	"SELECT waits FROM leaf_segment_status WHERE tag = 'held'");
my $admin = session($node, 'postgres');
session_query($admin, "BEGIN; SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'held' FOR UPDATE;");
# into the second segment: the first one wants a refill, which the lock blocks
$node->safe_psql('postgres', "SELECT count(leaf_segment_next('held')) FROM generate_series(1, 949)");
ok( $node->wait_for_log(qr/refill of tag "held" failed: .*lock timeout/, 0),
	'the prefetch failed on the held row (lock_timeout)');
session_query($admin, 'COMMIT;');
$admin->quit;
ok( wait_until(
		20,
		sub {
			$node->safe_psql('postgres',
				"SELECT next_ready FROM leaf_segment_status WHERE tag = 'held'") eq 't';
		}),
	'after the row is released the prefetch is retried without any caller waiting');
is($node->safe_psql('postgres', "SELECT waits FROM leaf_segment_status WHERE tag = 'held'"),
	$waits_before, 'no call had to wait for a refill meanwhile');

done_testing();
