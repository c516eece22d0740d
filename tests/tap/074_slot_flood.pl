# One tenant cannot take the shared slots from the others.
# Tag slots and database slots are shared by every database of the server;
# here leaf_id.max_tags = 64 and leaf_id.max_databases = 3, so a database's
# share is 21 (leaf_id.max_tags_per_database = -1, the default).
#  A. The flood: mallory, a role with nothing but CONNECT, runs 4 sessions in
#     database flood that invent tag names with leaf_id.refill_timeout = 1 ms
#     (every call gives up at once and leaves its slot waiting for the first
#     refill), while flood's segment worker is held up: a tag admin holds the
#     row of tag stuck, whose refills a caller keeps asking for, so each one
#     waits for the lock (5 s). Meanwhile a new tag in database victim must
#     still work (without a bound per database the invented tags took every
#     slot: 53400 "all 64 leaf_id tag slots are in use"); mallory's own
#     calls get 53400 naming the bound (half a share, at least 8, of a
#     database's tags may wait for their first refill at once).
#  B. Once the worker is free again the invented tags are answered (42704,
#     looked up for all waiting tags in one transaction) and flood works.
#  C. Two greedy databases: the tag admin of flood and a superuser in
#     database greedy each insert 70 real tags and draw from each, while a
#     session in victim draws. Beyond its share a database gets a slot only
#     while every other database that uses leaf_id (a worker runs, or a tag
#     is cached) can still reach its share and one share stays for a
#     newcomer: the rest get 53400 naming the share, and victim can then
#     still make and use 19 new tags, up to its share. (With half of
#     max_tags per database, as first built, the two could take every slot;
#     a database whose worker has left it counts as a newcomer: the
#     newcomers share one share.)
#  D. Database slots: flood and victim hold two of the three (and postgres,
#     where the extension was created, may hold the third); d3 and then d4
#     get one once the workers of a database have left it (idle): they got
#     53400 "used by 3 databases" before (database slots were only given
#     back by DROP DATABASE); d3 comes back later with IDs above its
#     earlier ones.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use SegmentTap;

my $node = leaf_node('flood', q{
leaf_id.max_tags = 64
leaf_id.max_databases = 3
leaf_id.worker_idle_timeout = 1000
max_worker_processes = 24
});
$node->safe_psql('postgres', q{
CREATE ROLE mallory LOGIN;
CREATE ROLE ta LOGIN;
CREATE DATABASE flood;
CREATE DATABASE victim;
CREATE DATABASE d3;
CREATE DATABASE d4;
CREATE DATABASE greedy;
});
for my $db (qw(flood victim d3 d4 greedy))
{
	$node->safe_psql($db, 'CREATE EXTENSION leaf_id');
}
$node->safe_psql('flood', q{
GRANT USAGE ON SCHEMA leaf_id_catalog TO ta;
GRANT SELECT, INSERT, UPDATE ON leaf_id_catalog.leaf_alloc TO ta;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('stuck', 10);
});
is($node->safe_psql('flood', "SELECT leaf_segment_next('stuck')"), '1', 'flood: tag stuck works');

# --- A. the flood, with flood's worker held up
my $holder = session($node, 'flood');
session_query($holder, "SET ROLE ta; BEGIN; UPDATE leaf_id_catalog.leaf_alloc SET description = 'held' WHERE biz_tag = 'stuck'");
my $keeper = start_client($node, 'flood', 'keeper', q{
SET leaf_id.refill_timeout = 2000;
DO $$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
  WHILE clock_timestamp() < t0 + interval '14 s' LOOP
    BEGIN
      PERFORM leaf_segment_next('stuck');
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
  END LOOP;
END $$;
});
# wait until the keeper has used up stuck's segments: the worker waits for the row
ok(wait_until(30, sub {
	$node->safe_psql('flood', "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
	  WHERE NOT l.granted AND a.backend_type = 'leaf_id segment worker'") > 0 }),
	"A: flood's segment worker waits for the held row of stuck");

my @flood;
for my $n (1 .. 4)
{
	push @flood, start_client($node, 'flood', "flood$n", qq{
SET ROLE mallory;
SET leaf_id.refill_timeout = 1;
CREATE TEMP TABLE states (s text);
DO \$\$
DECLARE t0 timestamptz := clock_timestamp(); i int := 0; st text;
BEGIN
  WHILE clock_timestamp() < t0 + interval '8 s' LOOP
    i := i + 1;
    BEGIN
      PERFORM leaf_segment_next('invented_${n}_' || i);
      st := 'ok';
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE;
      IF st = '53400' THEN
        GET STACKED DIAGNOSTICS st = MESSAGE_TEXT;
        st := '53400 ' || CASE WHEN st LIKE '%wait for their first refill%' THEN 'bound' ELSE st END;
      END IF;
    END;
    INSERT INTO states VALUES (st);
  END LOOP;
END \$\$;
SELECT s || ': ' || count(*) FROM states GROUP BY s ORDER BY s;
}, timeout => 60);
}
# at each of the victim's calls below, the flood is on: its clients run and
# flood's worker still waits for the held row
my $flood_on = sub {
	return $node->safe_psql('flood', q{
SELECT (SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
        WHERE NOT l.granted AND a.backend_type = 'leaf_id segment worker') > 0
   AND (SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'flood_' AND state = 'active') = 4});
};
sleep 3;
$node->safe_psql('victim', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('new1', 1000, 10), ('new2', 2000, 10)");
is($flood_on->(), 't', 'A: premise: the four flood clients run and flood\'s worker waits for the row');
my $r = try_sql($node, 'victim', "SELECT leaf_segment_next('new1')");
is($r->{out}, '1000', 'A: during the flood a new tag of database victim works')
  or diag $r->{err};
sleep 2;
is($flood_on->(), 't', 'A: premise: two seconds later the flood is still on');
$r = try_sql($node, 'victim', "SELECT leaf_segment_next('new2')");
is($r->{out}, '2000', 'A: and another one two seconds later') or diag $r->{err};
finish_clients(60, @flood);
my %states;
for my $c (@flood)
{
	is($c->{rc}, 0, "A: $c->{name} ran") or diag $c->{stderr};
	for (split /\n/, slurp_file($c->{out}))
	{
		my ($s, $n) = /^(.*): (\d+)$/ or next;
		$states{$s} += $n;
	}
}
note 'A: what the flood got: ' . join(', ', map { "$_ $states{$_}" } sort keys %states);
ok(($states{'53400 bound'} // 0) > 0, "A: the flood's own calls hit the bound of its database (53400)");
is(scalar(grep { /^53400/ && $_ ne '53400 bound' } keys %states), 0,
	'A: no flood call found every slot of the server taken');

# --- B. the worker free again
session_query($holder, 'ROLLBACK');
$holder->quit;
finish_clients(30, $keeper);
$node->safe_psql('flood', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('after', 500, 10)");
$r = try_sql($node, 'flood', "SELECT leaf_segment_next('after')", timeout => 30);
is($r->{out}, '500', 'B: flood gets a new tag once its worker is free') or diag $r->{err};
$r = try_sql($node, 'flood', "SET ROLE mallory; SELECT leaf_segment_next('invented_x')");
is($r->{sqlstate}, '42704', 'B: an invented tag gets 42704') or diag $r->{err};
my $loading = $node->safe_psql('flood', "SELECT count(*) FROM leaf_segment_status WHERE status = 'loading'");
ok(wait_until(20, sub { $node->safe_psql('flood', "SELECT count(*) FROM leaf_segment_status WHERE status = 'loading'") == 0 }),
	"B: no invented tag of the flood is left waiting for a first refill (were $loading)");

# --- C. two greedy databases (victim in use meanwhile: a session draws)
my $drawer = start_client($node, 'victim', 'drawer', q{
DO $$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
  WHILE clock_timestamp() < t0 + interval '40 s' AND NOT EXISTS (SELECT 1 FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'stop') LOOP
    PERFORM leaf_segment_next('new1');
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
}, timeout => 60);
sleep 1;
my $greedy_sql = q{
CREATE TEMP TABLE got (s text);
DO $$
DECLARE st text;
BEGIN
  FOR g IN 1..70 LOOP
    BEGIN
      PERFORM leaf_segment_next('real_' || g);
      st := 'ok';
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS st = MESSAGE_TEXT;
      st := CASE WHEN st LIKE '%its share of 21%' THEN 'share' ELSE st END;
    END;
    INSERT INTO got VALUES (st);
  END LOOP;
END $$;
SELECT s || ': ' || count(*) FROM got GROUP BY s ORDER BY s};
$node->safe_psql('flood', q{SET ROLE ta;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) SELECT 'real_' || g, 10 FROM generate_series(1, 70) g});
$node->safe_psql('greedy', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) SELECT 'real_' || g, 10 FROM generate_series(1, 70) g});
for my $db ('flood', 'greedy')
{
	$r = try_sql($node, $db, ($db eq 'flood' ? 'SET ROLE ta;' : '') . $greedy_sql, timeout => 120);
	my %got = map { /^(.*): (\d+)$/ ? ($1 => $2) : () } split /\n/, $r->{out};
	note "C: $db\'s 70 tags: " . join(', ', map { "$_ $got{$_}" } sort keys %got);
	cmp_ok($got{ok} // 0, '>=', 15, "C: $db gets slots for its tags, about its share");
	is(($got{ok} // 0) + ($got{share} // 0), 70, "C: $db: the others got 53400 naming its share")
	  or diag $r->{err};
}
$node->safe_psql('victim', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) SELECT 'v' || g, 5000 + 100 * g, 10 FROM generate_series(1, 19) g");
$r = try_sql($node, 'victim', "SELECT count(DISTINCT leaf_segment_next('v' || g)) FROM generate_series(1, 19) g");
is($r->{out}, '19', 'C: victim still makes and uses 19 new tags (with new1 and new2: its share of 21)') or diag $r->{err};
$node->safe_psql('victim', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('stop', 1)");
finish_clients(30, $drawer);
is($drawer->{rc}, 0, 'C: victim drew all along') or diag $drawer->{stderr};
ok(wait_until(30, sub { worker_pid($node, 'flood') eq '' && worker_pid($node, 'greedy') eq '' }),
	'C: the workers of flood and greedy leave them (idle)');

# --- D. database slots
$node->safe_psql('d3', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('d', 10)");
$node->safe_psql('d4', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('d', 10)");
$r = try_sql($node, 'd3', "SELECT leaf_segment_next('d') FROM generate_series(1, 5);
  SELECT leaf_snowflake_next() FROM generate_series(1, 5)", timeout => 30);
my @d3 = split /\n/, $r->{out};
is(scalar(@d3), 10, 'D: d3 gets a database slot') or diag $r->{err};
ok(wait_until(30, sub { worker_pid($node, 'd3') eq '' }), "D: d3's workers leave it (idle)");
$r = try_sql($node, 'd4', "SELECT leaf_segment_next('d'); SELECT count(DISTINCT leaf_snowflake_next()) FROM generate_series(1, 5)", timeout => 30);
is($r->{out}, "1\n5", 'D: d4 gets the slot of a database that was left') or diag $r->{err};
ok(wait_until(30, sub { worker_pid($node, 'd4') eq '' && worker_pid($node, 'd3') eq '' }), "D: d4's workers leave it too");
$r = try_sql($node, 'd3', "SELECT leaf_segment_next('d'); SELECT leaf_snowflake_next() FROM generate_series(1, 5)", timeout => 30);
my @d3b = split /\n/, $r->{out};
is(scalar(@d3b), 6, 'D: d3 comes back') or diag $r->{err};
ok(@d3b && $d3b[0] > $d3[4], "D: d3's segment IDs go on above its earlier ones ($d3b[0] > $d3[4])");
is_deeply([ duplicates(@d3[5 .. 9], @d3b[1 .. $#d3b]) ], [], "D: no snowflake ID of d3 twice");
ok($d3b[1] > $d3[9], "D: d3's snowflake IDs go on above its earlier ones");

$node->stop;

# --- E. the reserved-range marks (here 32: leaf_id.test_marks)
# A tag admin's tags fill them: with a catalog that records each tag's end
# (0.5.0 on), a mark of such a tag is reused, so her 50 tags and another
# database's new tag all work (every mark taken stopped every database's
# new tags with 53400 until a restart: reproduced with 16,384 tag names);
# a tag whose mark went on above its recorded end, re-created lower, repeats
# no ID.
my $m = leaf_node('marks', q{
leaf_id.max_tags = 64
leaf_id.max_tags_per_database = 64
leaf_id.test_marks = 32
leaf_id.tag_resync_interval = 1
});
$m->safe_psql('postgres', 'CREATE DATABASE other');
$m->safe_psql('other', 'CREATE EXTENSION leaf_id');
$m->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) SELECT 'm' || g, 10 FROM generate_series(1, 50) g});
my @m1 = split /\n/, $m->safe_psql('postgres', q{SELECT leaf_segment_next('m1') FROM generate_series(1, 5)});
$r = try_sql($m, 'postgres', q{SELECT count(leaf_segment_next('m' || g)) FROM generate_series(1, 50) g});
is($r->{out}, '50', 'E: 50 tags with 32 marks all get IDs') or diag $r->{err};
$m->safe_psql('other', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('o', 10)");
$r = try_sql($m, 'other', "SELECT leaf_segment_next('o')");
is($r->{out}, '1', 'E: and a new tag of another database') or diag $r->{err};
# m1's mark is long reused; it is deleted and inserted again at max_id 1
$m->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'm1'");
ok(wait_until(20, sub { (try_sql($m, 'postgres', "SELECT leaf_segment_next('m1')")->{sqlstate} // '') eq '42704' }),
	'E: m1 deleted: 42704');
$m->safe_psql('postgres', "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step) VALUES ('m1', 1, 10)");
my @m1b = split /\n/, $m->safe_psql('postgres', q{SELECT leaf_segment_next('m1') FROM generate_series(1, 5)});
ok(@m1b == 5 && $m1b[0] > $m1[-1] && !grep({ my $x = $_; grep { $_ == $x } @m1 } @m1b),
	"E: m1 re-created lower starts above its earlier IDs (@m1b after @m1)");
$m->stop;
done_testing();
