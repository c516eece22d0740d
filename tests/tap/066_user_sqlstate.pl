# leaf_id, both modes: the SQLSTATE of an error that a user's trigger on
# leaf_alloc or leaf_worker raises in the background worker reaches the
# caller as raised, also a code PostgreSQL does not define (pgrx knows only
# PostgreSQL's codes and reads any other as XX000), and a PL/pgSQL handler
# can catch it by that code. Nothing of it stays behind: the session's next
# errors keep their own codes.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node('user_sqlstate', "leaf_id.refill_timeout = 5000\n");

# A trigger on leaf_alloc that raises $code for one tag's reservation.
sub trigger_raising
{
	my ($tag, $code) = @_;
	$node->safe_psql(
		'postgres', qq{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('$tag', 10);
CREATE FUNCTION refuse_$tag() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN RAISE EXCEPTION 'no refill for $tag today' USING ERRCODE = '$code'; END \$\$;
CREATE TRIGGER refuse_$tag BEFORE UPDATE ON leaf_id_catalog.leaf_alloc FOR EACH ROW
  WHEN (OLD.biz_tag = '$tag') EXECUTE FUNCTION refuse_$tag();
});
}

# 1. a code PostgreSQL does not define, a class of its own
trigger_raising('odd', 'LF001');
my $r = try_sql($node, 'postgres', "SELECT leaf_segment_next('odd')");
is($r->{sqlstate}, 'LF001', "segment: the trigger's own SQLSTATE reaches the caller")
  or diag $r->{err};
like($r->{err}, qr/no refill for odd today/, 'with its message');
is($r->{out}, '', 'and no ID');

# 2. a PL/pgSQL handler catches it by its code; the session's next errors
# keep theirs (an XX000 of the user's own, then a division by zero)
$r = try_sql(
	$node, 'postgres', q{
DO $$
BEGIN
  PERFORM leaf_segment_next('odd');
  RAISE EXCEPTION 'not reached';
EXCEPTION WHEN SQLSTATE 'LF001' THEN
  RAISE NOTICE 'caught %', SQLSTATE;
END $$;
DO $$ BEGIN RAISE EXCEPTION 'an internal error of mine' USING ERRCODE = 'XX000'; END $$;
});
like($r->{err}, qr/NOTICE:  00000: caught LF001/, 'a handler catches the error by its own code')
  or diag $r->{err};
is($r->{sqlstate}, 'XX000', "the session's next XX000 stays XX000");
$r = try_sql($node, 'postgres', "DO \$\$ BEGIN PERFORM leaf_segment_next('odd'); EXCEPTION WHEN OTHERS THEN NULL; END \$\$; SELECT 1/0");
is($r->{sqlstate}, '22012', 'and a division by zero after a caught one stays 22012')
  or diag $r->{err};

# 3. a code PostgreSQL defines, and a real XX000, stay as raised
trigger_raising('known', '22023');
is(try_sql($node, 'postgres', "SELECT leaf_segment_next('known')")->{sqlstate},
	'22023', 'a known SQLSTATE stays as it is');
trigger_raising('internal', 'XX000');
is(try_sql($node, 'postgres', "SELECT leaf_segment_next('internal')")->{sqlstate},
	'XX000', 'an XX000 of the trigger stays XX000');

# a trigger that logs the error as a WARNING and rethrows it (a bare RAISE)
$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('rethrown', 10);
CREATE FUNCTION refuse_rethrown() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  BEGIN
    RAISE EXCEPTION 'inner refusal' USING ERRCODE = 'LF003';
  EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'logged: %', SQLERRM;
    RAISE;
  END;
END $$;
CREATE TRIGGER refuse_rethrown BEFORE UPDATE ON leaf_id_catalog.leaf_alloc FOR EACH ROW
  WHEN (OLD.biz_tag = 'rethrown') EXECUTE FUNCTION refuse_rethrown();
});
is(try_sql($node, 'postgres', "SELECT leaf_segment_next('rethrown')")->{sqlstate},
	'LF003', 'an error logged as a WARNING and rethrown keeps its own code');

# 4. without the trigger the tag is served from its start
$node->safe_psql('postgres', 'DROP TRIGGER refuse_odd ON leaf_id_catalog.leaf_alloc');
is(try_sql($node, 'postgres', "SELECT leaf_segment_next('odd')")->{out},
	'1', 'without the trigger the tag starts at 1');

# 5. snowflake: the claim of a worker id from leaf_worker
$node->safe_psql(
	'postgres', q{
CREATE FUNCTION refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'no worker ids today' USING ERRCODE = 'LF002'; END $$;
CREATE TRIGGER refuse_claim BEFORE INSERT OR UPDATE ON leaf_id_catalog.leaf_worker
  FOR EACH ROW EXECUTE FUNCTION refuse_claim();
});
$r = try_sql($node, 'postgres', 'SELECT leaf_snowflake_next()');
is($r->{sqlstate}, 'LF002', "snowflake: the trigger's own SQLSTATE reaches the caller")
  or diag $r->{err};
like($r->{err}, qr/no worker ids today/, 'with its message');
$node->safe_psql('postgres', 'DROP TRIGGER refuse_claim ON leaf_id_catalog.leaf_worker');
my $ok = wait_until(
	20,
	sub {
		try_sql($node, 'postgres', 'SELECT leaf_snowflake_next() > 0')->{out} eq 't';
	});
ok($ok, 'without the trigger a worker id is claimed');

$node->stop;
done_testing();
