# leaf_id on Citus: the rows of leaf_worker deleted while their holders issue
# (an operator "resetting the registry"). A deleted row
# leaves no mark, so the id looks free; another node that claims it must not
# issue in the milliseconds its holder may still use (up to the holder's
# lease), and the holder, whose renewal finds no row, must stop and claim
# again rather than fail until a restart.
#
# Every node draws snowflake IDs with random_sequence_start off (every
# millisecond starts at sequence 0, so two nodes that share a worker id and
# a millisecond issue the same ID). The rows are deleted on the coordinator,
# and the node with the largest id claims again at once
# (leaf_id_reset_cache()): the lowest free id is the holder's. Checked: the
# taker got the holder's id, its first millisecond with it is above the
# holder's last, the holder goes on with another id, and no ID twice.
# Before: the taker issued at once (a new row's floor was 0), the holder went
# on up to its lease and then failed with 55000 at every renewal, and IDs
# were issued twice.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use CitusTap;
use SegmentTap qw(wait_until);

my ($coord, $w1, $w2) = citus_cluster(conf => "leaf_id.random_sequence_start = off\n");
my @nodes = ($coord, $w1, $w2);
my %id = map { $_->name => leaf_worker_id_of($_) } @nodes;
my @by_id = sort { $id{ $a->name } <=> $id{ $b->name } } @nodes;
my ($holder, $taker) = ($by_id[0], $by_id[-1]);
my $x = $id{ $holder->name };
note 'worker ids: ' . join(', ', map { "$_=$id{$_}" } sort keys %id) . '; holder ' . $holder->name . ', taker ' . $taker->name;
$_->safe_psql('postgres', DRAWLOG_SQL) for @nodes;
start_drawing($_, $_->name . '_snow', 'snowflake') for @nodes;
my $count = sub {
	my ($node, $where) = @_;
	return $node->safe_psql('postgres', "SELECT count(*) FROM drawlog l, leaf_snowflake_decode(l.id) d WHERE l.id IS NOT NULL AND $where");
};
ok(wait_until(20, sub { $count->($holder, 'true') > 200 && $count->($taker, 'true') > 200 }),
	'premise: the holder and the taker issue snowflake IDs');

# --- the holder's and the taker's rows deleted; the taker claims at once -------
# (the third node keeps its row: it does not claim again, and cannot take
# the holder's id first; the holder claims again without its lost id)
$coord->safe_psql('postgres', "DELETE FROM leaf_id_catalog.leaf_worker WHERE worker_id IN ($x, $id{ $taker->name })");
my $t_delete = time;
$taker->safe_psql('postgres', 'SELECT leaf_id_reset_cache()');
ok( wait_until(20, sub { $taker->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status') eq $x }),
	"the taker claims the lowest free id, the holder's $x");
ok(wait_until(20, sub { $count->($taker, "d.worker_id = $x") > 100 }), "the taker issues with id $x");
ok( wait_until(20, sub { $count->($holder, "d.worker_id <> $x AND l.t >= $t_delete") > 100 }),
	'the holder, its row gone, claims another id and issues with it');
sleep_full(1);
stop_drawing();

my $ms_with_x = qq{SELECT (extract(epoch FROM d.timestamp) * 1000)::bigint ms_of, l.t FROM drawlog l,
  leaf_snowflake_decode(l.id) d WHERE l.id IS NOT NULL AND d.worker_id = $x};
my ($holder_last, $holder_after) = split /\|/,
  $holder->safe_psql('postgres', "SELECT max(ms_of), count(*) FILTER (WHERE t >= $t_delete) FROM ($ms_with_x) x");
my $taker_first = $taker->safe_psql('postgres', "SELECT min(ms_of) FROM ($ms_with_x) x");
note "holder's last millisecond with id $x: $holder_last ($holder_after IDs after the delete); taker's first: $taker_first";
cmp_ok($holder_after, '>', 0, 'premise: the holder issued with the id after its row was deleted (it was live)');
cmp_ok($taker_first, '>', $holder_last, "the taker's IDs with id $x start above the holder's last millisecond with it");
my $failures = $holder->safe_psql('postgres',
	"SELECT coalesce(string_agg(DISTINCT state, ','), '') FROM drawlog WHERE id IS NULL AND t >= $t_delete");
note "the holder's failed calls after the delete: SQLSTATEs '$failures'";

my (%seen, $dup);
$dup = 0;
for my $n (@nodes)
{
	$dup += $seen{$_}++ ? 1 : 0 for split /\n/, $n->safe_psql('postgres', 'SELECT id FROM drawlog WHERE id IS NOT NULL');
}
note 'snowflake IDs issued: ' . scalar(keys %seen);
is($dup, 0, 'no snowflake ID issued twice');

$_->stop for ($w2, $w1, $coord);
done_testing();
