# leaf_id and pg_dump / pg_restore (README, "Backup, dump and restore").
#
# A database "app" uses both modes (tags with cached segments, a claimed
# snowflake worker id) and is dumped with pg_dump -Fc while its server keeps
# running:
#  1. the dumped max_id is above every cached range: IDs the source draws
#     after the dump from the segments it had cached are below it;
#  2. restored into a fresh cluster (a replacement server), segment IDs are
#     above every ID the source drew before and after the dump, and the
#     restored server claims a worker id of its own, leaving the source's row;
#     the source went on refilling after the dump: the documented catch-up
#     (raise max_id to the source's, leaf_id_reset_cache()) puts the
#     restored IDs above those too;
#  3. on the same server under a new name while "app" exists: the copy's
#     registry names this server for the id "app" uses, so the copy's claim
#     releases that row, which keeps the dumped mark (last_timestamp, the
#     same before and after the release), and takes a free id instead of
#     issuing with app's; a node name of its own (ALTER DATABASE ... SET
#     leaf_id.node_name) is then the copy's generator's node name and the
#     name its new id is registered under (neither before the rename);
#  4. on the same server after DROP DATABASE app: the restored max_id is the
#     dumped one; the documented catch-up puts IDs above the old database's;
#     the restored database takes this server's worker id back, and its IDs
#     are above the old database's.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use SnowflakeTap qw(default_node_name LEAF_EPOCH_MS);
use Test::More;

my $src = leaf_node('dump_source');
$src->safe_psql('postgres', 'CREATE DATABASE app');
$src->safe_psql('app', q{
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('order', 1000), ('small', 10);
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT leaf_segment_next('order'), item text);
CREATE TABLE smalls (id bigint PRIMARY KEY DEFAULT leaf_segment_next('small'));
CREATE TABLE events (id bigint PRIMARY KEY DEFAULT leaf_snowflake_next(), what text);
});

# draw IDs of $tag in database $db of $node, as one statement; returns them
sub draw
{
	my ($node, $db, $tag, $n) = @_;
	return [ split /\n/,
		$node->safe_psql($db, "SELECT leaf_segment_next('$tag', $n)") ];
}

sub max_id
{
	my ($node, $db, $tag) = @_;
	return $node->safe_psql($db,
		"SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = '$tag'");
}

sub worker_id
{
	my ($node, $db) = @_;
	return $node->safe_psql($db, 'SELECT worker_id FROM leaf_snowflake_status');
}

# rows through the defaults: several segments of both tags, a worker id
$src->safe_psql('app', q{
INSERT INTO orders (item) SELECT 'o' FROM generate_series(1, 2500);
INSERT INTO smalls SELECT FROM generate_series(1, 95);
INSERT INTO events (what) SELECT 'e' FROM generate_series(1, 100);
});
# wait until both segments of each tag are cached (the prefetch is done)
ok( wait_until(
		20,
		sub {
			$src->safe_psql('app',
				q{SELECT bool_and(next_ready) FROM leaf_segment_status WHERE tag IN ('order', 'small')}
			) eq 't';
		}),
	'premise: both tags have their next segment cached');
my %before;
for my $tag ('order', 'small')
{
	my $table = $tag eq 'order' ? 'orders' : 'smalls';
	$before{$tag} = $src->safe_psql('app', "SELECT max(id) FROM $table");
}
my $src_worker = worker_id($src, 'app');
my $src_node = default_node_name($src);
my $src_flake_max = $src->safe_psql('app', 'SELECT max(id) FROM events');

my $dump = $PostgreSQL::Test::Utils::tmp_check . '/app.dump';
my %dumped = map { $_ => max_id($src, 'app', $_) } ('order', 'small');
$src->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $src->connstr('app') ],
	'pg_dump -Fc of a database that uses both modes');
is(max_id($src, 'app', $_), $dumped{$_}, "premise: no refill of $_ during the dump")
  for ('order', 'small');

# ---------------------------------------------------------------------------
# 1. after the dump the source draws from the segments it had cached
my %after;
for my $tag ('order', 'small')
{
	# what is left of the current segment: drawing it does not switch
	# segments, so no refill starts
	my $left = $src->safe_psql('app',
		"SELECT CASE current_buffer WHEN 0 THEN buffer0_end - buffer0_next ELSE buffer1_end - buffer1_next END FROM leaf_segment_status WHERE tag = '$tag'"
	);
	cmp_ok($left, '>', 1, "premise: $tag has cached IDs left");
	my $n = $left - 1;
	$n = 500 if $n > 500;
	$after{$tag} = draw($src, 'app', $tag, $n);
	is(max_id($src, 'app', $tag), $dumped{$tag},
		"$tag: the IDs drawn after the dump came from the cached segments (no refill)");
	cmp_ok(max_of(@{ $after{$tag} }), '<', $dumped{$tag},
		"$tag: the dumped max_id is above the cached ranges (IDs drawn after the dump from them are below it)"
	);
}

# ---------------------------------------------------------------------------
# 2. a fresh cluster: a replacement server
my $new = leaf_node('dump_replacement');
$new->safe_psql('postgres', 'CREATE DATABASE app');
$new->command_ok([ 'pg_restore', '-d', $new->connstr('app'), $dump ],
	'pg_restore into a fresh cluster');
is($new->safe_psql('app', 'SELECT count(*) FROM orders'),
	'2500', 'the rows are restored');
for my $tag ('order', 'small')
{
	is(max_id($new, 'app', $tag), $dumped{$tag}, "$tag: the dumped max_id is restored");
	my $ids = draw($new, 'app', $tag, 50);
	cmp_ok(min_of(@{$ids}), '>', $before{$tag},
		"$tag: restored IDs are above every ID drawn before the dump");
	cmp_ok(min_of(@{$ids}), '>', max_of(@{ $after{$tag} }),
		"$tag: restored IDs are above every ID the source drew after the dump from its cache");
}
$new->safe_psql('app', q{INSERT INTO orders (item) VALUES ('restored')});

my $new_flake = $new->safe_psql('app', q{INSERT INTO events (what) VALUES ('restored') RETURNING id});
my $new_worker = worker_id($new, 'app');
isnt($new_worker, $src_worker,
	'the restored server claimed a worker id of its own, not the dumped server\'s');
is( $new->safe_psql('app', "SELECT node_name FROM leaf_id_catalog.leaf_worker WHERE worker_id = $src_worker"),
	$src_node,
	'the dumped server\'s registry row is left as it was (its id stays taken)');
is( $new->safe_psql('app',
		"SELECT (leaf_snowflake_decode($new_flake)).worker_id"),
	$new_worker,
	'restored snowflake IDs carry the new worker id');

# the source goes on past its cache (refills after the dump): the catch-up of
# the README raises the restored max_id to the source's
my $later = draw($src, 'app', 'order', 5000);
cmp_ok(max_id($src, 'app', 'order'), '>', $dumped{order},
	'premise: the source refilled after the dump');
my $src_max_now = max_id($src, 'app', 'order');
$new->safe_psql('app',
	"UPDATE leaf_id_catalog.leaf_alloc SET max_id = GREATEST(max_id, $src_max_now) WHERE biz_tag = 'order'; SELECT leaf_id_reset_cache();"
);
my $caught_up = draw($new, 'app', 'order', 50);
cmp_ok(min_of(@{$caught_up}), '>', max_of(@{$later}),
	'after the catch-up, restored IDs are above the source\'s IDs drawn after the dump');

# ---------------------------------------------------------------------------
# 3. the same server, restored under a new name while "app" exists and uses
# its worker id
$src->safe_psql('app', q{INSERT INTO events (what) VALUES ('keep the generator busy')});
$src->safe_psql('postgres', 'CREATE DATABASE app_copy');
$src->command_ok([ 'pg_restore', '-d', $src->connstr('app_copy'), $dump ],
	'pg_restore on the same server under a new name');
is( $src->safe_psql('app_copy',
		"SELECT node_name FROM leaf_id_catalog.leaf_worker WHERE worker_id = $src_worker"),
	$src_node,
	'premise: the copy\'s registry names this server for the id app uses');
# the mark the copy restored for app's id: the dumped one, at or above every
# snowflake ID app drew before the dump (nothing in the copy renews that row)
my $copy_mark = $src->safe_psql('app_copy',
	"SELECT last_timestamp FROM leaf_id_catalog.leaf_worker WHERE worker_id = $src_worker");
cmp_ok($copy_mark, '>=', ($src_flake_max >> 22) + LEAF_EPOCH_MS,
	'premise: the restored row\'s mark covers app\'s IDs before the dump');
# the copy's row names this server for app's id: the copy's claim releases
# that row (keeping its mark) and moves to a free id
my $r = wait_for_number($src, 'app_copy',
	'SET leaf_id.refill_timeout = 5000; SELECT leaf_snowflake_next()', 20);
ok($r->{ok}, 'the copy issues snowflake IDs');
my $copy_worker = worker_id($src, 'app_copy');
isnt($copy_worker, $src_worker, '... with another worker id than app');
is(worker_id($src, 'app'), $src_worker, 'app kept its worker id');
is( $src->safe_psql('app_copy', "SELECT node_name FROM leaf_id_catalog.leaf_worker WHERE worker_id = $src_worker"),
	"released:$src_worker", 'the copy released its row of app\'s id');
is( $src->safe_psql('app_copy',
		"SELECT last_timestamp FROM leaf_id_catalog.leaf_worker WHERE worker_id = $src_worker"),
	$copy_mark,
	'... and the released row keeps its mark');
# the documented step still works: a node name of its own for the copy
$src->safe_psql('postgres',
	q{ALTER DATABASE app_copy SET leaf_id.node_name = 'dump_source:app_copy'});
# (before the new name takes effect, no row and no generator carry it: the
# checks below can only pass after the rename)
is( $src->safe_psql('app_copy',
		q{SELECT count(*) FROM leaf_id_catalog.leaf_worker WHERE node_name = 'dump_source:app_copy'}),
	'0', 'premise: no row of the copy\'s registry has the new node name yet');
isnt($src->safe_psql('app_copy', 'SELECT node_name FROM leaf_snowflake_status'),
	'dump_source:app_copy', 'premise: the copy\'s generator has another node name yet');
my $pid = worker_pid($src, 'app_copy', 'snowflake');
like($pid, qr/^\d+$/, 'premise: the copy has one snowflake worker');
$src->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok(wait_until(20, sub { worker_pid($src, 'app_copy', 'snowflake') ne $pid }),
	'the copy\'s worker exited (it starts again with the new node name)');
$r = wait_for_number($src, 'app_copy',
	'SET leaf_id.refill_timeout = 5000; SELECT leaf_snowflake_next()', 20);
ok($r->{ok}, 'with a node name of its own the copy issues snowflake IDs');
is($src->safe_psql('app_copy', 'SELECT node_name FROM leaf_snowflake_status'),
	'dump_source:app_copy', '... under the new node name');
my $renamed_worker = worker_id($src, 'app_copy');
is( $src->safe_psql('app_copy',
		q{SELECT worker_id FROM leaf_id_catalog.leaf_worker WHERE node_name = 'dump_source:app_copy'}),
	$renamed_worker, '... with the id registered under it');
is( $src->safe_psql('app_copy', "SELECT (leaf_snowflake_decode($r->{out})).worker_id"),
	$renamed_worker, '... which its IDs carry');
isnt($renamed_worker, $src_worker, '... another worker id than app\'s');
is(worker_id($src, 'app'), $src_worker, 'app still has its worker id');

# ---------------------------------------------------------------------------
# 4. the same server: DROP DATABASE app, restore it under the same name
my $old_max = max_id($src, 'app', 'order');
my $old_flake_max = $src->safe_psql('app',
	q{INSERT INTO events (what) VALUES ('last before the drop') RETURNING id});
$src->safe_psql('postgres', 'DROP DATABASE app WITH (FORCE)');
$src->safe_psql('postgres', 'CREATE DATABASE app');
$src->command_ok([ 'pg_restore', '-d', $src->connstr('app'), $dump ],
	'pg_restore on the same server after DROP DATABASE');
is(max_id($src, 'app', 'order'), $dumped{order},
	'the restored max_id is the dumped one, below what the old database reserved since'
);
# the documented step: max_id from before the drop
$src->safe_psql('app',
	"UPDATE leaf_id_catalog.leaf_alloc SET max_id = GREATEST(max_id, $old_max) WHERE biz_tag = 'order'");
my $again = draw($src, 'app', 'order', 50);
cmp_ok(min_of(@{$again}), '>', max_of(@{$later}),
	'with max_id carried over, IDs are above every ID of the old database');
my $flake = $src->safe_psql('app',
	q{SET leaf_id.refill_timeout = 5000; INSERT INTO events (what) VALUES ('after') RETURNING id});
is(worker_id($src, 'app'), $src_worker,
	'the restored database takes this server\'s worker id back');
cmp_ok($flake, '>', $old_flake_max,
	'its snowflake IDs are above the old database\'s');
cmp_ok($old_flake_max, '>', $src_flake_max, 'premise: the old database issued after the dump');

$new->stop;
$src->stop;
done_testing();
