# Split brain and the old primary's return, with
# leaf_id.synchronized_standby_slots = '*' and two asynchronous standbys on
# slots s1 and s2:
#  A. s1 is promoted while the primary still runs (s2 still follows the
#     primary), and both draw at once for about 8 s. The old primary hands
#     out at most what it held when s1 was promoted: per tag its two
#     segments (2 x step = 2000 segment IDs), snowflake IDs up to its lease
#     (at most leaf_id.lease_ahead, 3 s, after the promotion); then it
#     refuses with 55P03 naming slot s1. No ID twice over both servers.
#  B. the old primary, stopped, rewound with pg_rewind against s1 and started
#     as its standby, refuses both functions with 25006; s1 goes on.
# Without the wait, A's old primary goes on issuing (and its segment IDs are
# ones s1 issues too).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SegmentTap;
use FailoverTap;
use Time::HiRes qw(usleep time);

my ($primary, $s1, $s2) = failover_cluster("leaf_id.synchronized_standby_slots = '*'\n");
my %before = (seg => [], snow => []);
my %old = (seg => [], snow => []);
my %new = (seg => [], snow => []);

finish_drawing(\%before, 120, start_drawing($primary, 'before'));
is(scalar @{ $before{seg} }, 6000, 'the primary drew 6000 segment IDs');
$primary->wait_for_catchup($_, 'flush') for ($s1, $s2);

# --- A: s1 promoted, the primary still running -------------------------------
$s1->promote;
$s1->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()') or die 's1 was not promoted';
my $t_promoted = time;
my @old = start_drawing($primary, 'old', pause => 0.1, statements => 80);
my @new = start_drawing($s1, 'new', pause => 0.1, statements => 80);
finish_drawing(\%old, 120, @old);
finish_drawing(\%new, 120, @new);

my $old_seg = scalar @{ $old{seg} };
note "A: after the promotion the old primary handed out $old_seg segment and "
  . scalar(@{ $old{snow} }) . ' snowflake IDs; the promoted s1 '
  . scalar(@{ $new{seg} }) . ' and ' . scalar(@{ $new{snow} });
cmp_ok($old_seg, '<=', 2000, 'A: the old primary hands out at most its two segments (2 x 1000) after the promotion');
for my $c (@old)
{
	like($c->{stderr}, qr/ERROR:\s+55P03: .*standby slot "s1"/,
		"A: then the old primary refuses $c->{name} with 55P03 naming slot s1")
	  or diag "rc $c->{rc}: $c->{stderr}";
}
my $old_last_ms = @{ $old{snow} } ? (max_of(@{ $old{snow} }) >> 22) + 1288834974657 : 0;
note sprintf('A: the old primary\'s last snowflake ID is %.0f ms after the promotion', $old_last_ms - $t_promoted * 1000)
  if $old_last_ms;
cmp_ok($old_last_ms, '<=', ($t_promoted + 3.5) * 1000,
	'A: its snowflake IDs end with its lease (3 s after the promotion)');
is(scalar(grep { $_->{rc} != 0 } grep { $_->{name} !~ /_snow$/ } @new), 0, 'A: the promoted s1 hands out segment IDs all along')
  or diag join("\n", map { "$_->{name}: $_->{stderr}" } @new);
is_deeply([ duplicates(@{ $before{seg} }, @{ $old{seg} }, @{ $new{seg} }) ], [],
	'A: no segment ID twice over the old primary and s1');
is_deeply([ duplicates(@{ $before{snow} }, @{ $old{snow} }, @{ $new{snow} }) ], [],
	'A: no snowflake ID twice over the old primary and s1');
my ($new_snow_state) = map { $_->{stderr} =~ /ERROR:\s+(\w{5})/ ? $1 : 'none' } grep { $_->{name} =~ /_snow$/ } @new;
note 'A: the promoted s1\'s snowflake client: ' . scalar(@{ $new{snow} }) . " IDs, its error: $new_snow_state";
cmp_ok(scalar @{ $new{snow} }, '>', 0, 'A: the promoted s1 issues snowflake IDs');
is($s1->safe_psql('postgres', "SELECT string_agg(DISTINCT d.worker_id::text, ',') FROM (VALUES ($new{snow}[0]::bigint), ($new{snow}[-1]::bigint)) v(id), LATERAL leaf_snowflake_decode(v.id) d"),
	'7', 'A: with worker id 7, as the old primary');
cmp_ok(min_of(@{ $new{snow} }) // 0, '>', max_of(@{ $before{snow} }, @{ $old{snow} }),
	'A: every snowflake ID of s1 is above every one of the old primary');

# --- B: the old primary rewound, back as s1's standby ------------------------
$primary->stop;
# pg_rewind copies the source's configuration files: keep the old primary's
my $conf = $primary->data_dir . '/postgresql.conf';
my $saved_conf = slurp_file($conf);
my $rewind = run_log(
	[
		'pg_rewind', '--target-pgdata', $primary->data_dir,
		'--source-server', $s1->connstr('postgres')
	]);
ok($rewind, 'B: pg_rewind of the old primary against s1');
open my $fh, '>', $conf or die "could not write $conf: $!";
print $fh $saved_conf;
close $fh;
$primary->enable_streaming($s1);
$primary->start;
$primary->poll_query_until('postgres', 'SELECT pg_is_in_recovery()') or die 'the old primary is not a standby';
for my $f ("leaf_segment_next('order')", 'leaf_snowflake_next()')
{
	my $r = try_sql($primary, 'postgres', "SELECT $f");
	is($r->{sqlstate}, '25006', "B: the rewound old primary refuses $f with 25006");
}
my @s1_after = draw_ids($s1, 'postgres', 'order', 1000);
is_deeply([ duplicates(@{ $before{seg} }, @{ $old{seg} }, @{ $new{seg} }, @s1_after) ], [],
	'B: s1 goes on, no segment ID twice');

$_->stop for ($primary, $s1, $s2);
done_testing();
