# leaf_id snowflake mode: two live servers with one node
# name (a physical copy, a promoted standby: the default name is system
# identifier and port) never hold one worker id at once.
#
# Each server lifetime writes a random owner token into the leaf_worker row
# it holds; renewals must find it. Here one server plays both parts: a psql
# session stands in for "the other server" by writing another token into the
# row and renewing its lease, as a copy would through a shared registry.
#  1. a restart of the same data directory in the same boot keeps its token
#     (the owner file): after a crash it holds its row at once and issues
#     above the old lease, after a clean shutdown (no token in the row) too;
#     a start that cannot prove that (the file's boot id edited, as after a
#     reboot) gets a new token and takes its own row back once the old
#     lifetime's lease has passed, without refusing calls;
#  2. while another token keeps renewing the row, this server refuses (55006)
#     and issues nothing; when the renewals stop, it takes the row back and
#     issues above the other holder's lease;
#  3. a live generator whose row is taken over stops at its lease: no ID of
#     it is above the mark the new holder starts from; it claims again and,
#     once the new holder stops renewing, takes the id back.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap qw(try_sql wait_until);
use SnowflakeTap;
use Test::More;
use Time::HiRes qw(usleep time);

my $conf = "log_min_messages = warning\nlc_messages = 'C'\nleaf_id.refill_timeout = 6000\n";
my $node = snowflake_node('sfowner', $conf,
	'CREATE TABLE ids (phase int, id bigint, at timestamptz DEFAULT clock_timestamp())');
my $now_ms = q{(extract(epoch FROM clock_timestamp()) * 1000)::bigint};
my $epoch = LEAF_EPOCH_MS;

sub row
{
	my ($cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM leaf_id_catalog.leaf_worker WHERE worker_id = 0");
}

sub draw
{
	my ($phase, $n) = @_;
	return try_sql($node, 'postgres',
		"INSERT INTO ids (phase, id) SELECT $phase, leaf_snowflake_next() FROM generate_series(1, $n)");
}

is(draw(1, 1000)->{ret}, 0, 'snowflake works');
is(snowflake_status($node, 'worker_id'), '0', 'premise: the node holds worker id 0');
my $token1 = row('owner_token');
like($token1, qr/^\d+$/, 'the row carries an owner token');

# ---------------------------------------------------------------------------
# 1. restarts
$node->stop('fast');
$node->start;
is(row('owner_token IS NULL'), 't', 'a clean shutdown leaves the row without a token');
my $r = repeat_sql($node, 'INSERT INTO ids (phase, id) SELECT 2, leaf_snowflake_next()', seconds => 10);
is($r->{ok}, 1, 'after a clean restart IDs are issued') or diag explain $r->{errors};
is(scalar @{ $r->{errors} }, 0, 'after a clean restart no call is refused, not even the first')
  or diag explain $r->{errors};
is(row('owner_token'), $token1,
	'a restart of the same data directory in the same boot keeps its owner token (pgsql_tmp_leaf_id_owner)');
ok($node->log_contains(qr/this restart of the data directory keeps owner token $token1/), 'which is logged');

$node->stop('immediate');
$node->start;
my $lease_before = row('last_timestamp');
is(row('owner_token'), $token1, 'after a crash the row still has the old lifetime\'s token');
my $t0 = time;
$r = try_sql($node, 'postgres', 'INSERT INTO ids (phase, id) SELECT 3, leaf_snowflake_next() RETURNING id');
my $took = time - $t0;
is($r->{ret}, 0, 'after a crash the first call is served (it waits for the old lease, not refused)')
  or diag $r->{err};
is(row('owner_token'), $token1, 'the restarted server holds its row with the same token, without a takeover');
cmp_ok(($r->{out} >> 22) + $epoch, '>', $lease_before,
	'its first ID is above the old lifetime\'s lease');
note sprintf('first call after the crash took %.1f s', $took);

# a crash, then a start that cannot prove it is the same data directory in
# the same boot (the file's boot id differs, as after a reboot): a new
# token, which takes the row over once the old lease has passed
$node->stop('immediate');
my $file = $node->data_dir . '/pgsql_tmp_leaf_id_owner';
my $text = slurp_file($file);
like($text, qr/^boot_id=\S+$/m, 'premise: the owner file records the boot');
$text =~ s/^boot_id=.*$/boot_id=another-boot/m;
open(my $fh, '>', $file) or die $!;
print $fh $text;
close $fh;
$node->start;
$lease_before = row('last_timestamp');
is(row('owner_token'), $token1, 'after the crash the row has the old token');
$t0 = time;
$r = try_sql($node, 'postgres', 'INSERT INTO ids (phase, id) SELECT 3, leaf_snowflake_next() RETURNING id');
$took = time - $t0;
is($r->{ret}, 0, 'after a "reboot" the first call is served (it waits for the old lease)') or diag $r->{err};
my $token3 = row('owner_token');
ok($token3 ne $token1 && $token3 =~ /^\d+$/, 'the rebooted server took its row back with a new token');
cmp_ok(($r->{out} >> 22) + $epoch, '>', $lease_before, 'its first ID is above the old lifetime\'s lease');
note sprintf('first call after the "reboot" took %.1f s', $took);
ok($node->log_contains(qr/took snowflake worker id 0 of node .* back from owner token Some\($token1\)/),
	'the take-back is logged');

# ---------------------------------------------------------------------------
# 2. another live holder with the same node name
# make this server's generator let go cleanly (its worker exits), then the
# "other server" holds the row and renews it every 300 ms for 8 s
my $wpid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'leaf_id snowflake worker'");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
ok(wait_until(20, sub { row('owner_token IS NULL') eq 't' }), 'premise: the worker let go of the row');
my $other = $node->background_psql('postgres');
$other->query_safe(
	"UPDATE leaf_id_catalog.leaf_worker SET owner_token = 4242, last_timestamp = $now_ms + 3000 WHERE worker_id = 0");
my $renewer = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		"DO \$\$ BEGIN FOR i IN 1..27 LOOP
		   UPDATE leaf_id_catalog.leaf_worker SET last_timestamp = $now_ms + 3000 WHERE worker_id = 0 AND owner_token = 4242;
		   COMMIT; PERFORM pg_sleep(0.3); END LOOP; END \$\$"
	],
	'>', \my $rout, '2>', \my $rerr);
my @refusals;
my $issued = 0;
my $deadline = time + 6;
while (time < $deadline)
{
	my $x = try_sql($node, 'postgres', 'INSERT INTO ids (phase, id) SELECT 4, leaf_snowflake_next()');
	if ($x->{ret} == 0) { $issued++ }
	else { push @refusals, [ $x->{sqlstate} // 'none', $x->{err} ] }
}
is($issued, 0, 'while another token renews the row, this server issues nothing');
ok(@refusals > 0 && !grep({ $_->[0] ne '55006' } @refusals),
	'every call was refused with 55006') or diag explain \@refusals;
like($refusals[-1][1] // '', qr/held by another live server: it renewed the lease/,
	'the refusal says another live server renewed it');
is(row('owner_token'), '4242', 'the other holder keeps the row');
$renewer->finish;
$other->quit;
my $other_lease = row('last_timestamp');
$r = repeat_sql($node, 'INSERT INTO ids (phase, id) SELECT 5, leaf_snowflake_next() RETURNING id', seconds => 15);
is($r->{ok}, 1, 'once the renewals stop, this server takes the id back and issues')
  or diag explain $r->{errors};
cmp_ok(($r->{last}{out} >> 22) + $epoch, '>', $other_lease,
	'its IDs are above the other holder\'s last lease');
isnt(row('owner_token'), '4242', 'the row has this server\'s token again');

# ---------------------------------------------------------------------------
# 3. a live generator whose row is taken over (as a copy would, after this
# server's lease ran out while it could not renew). The new holder renews for
# 4 s and stops: this server issues nothing in the milliseconds it held,
# from the mark at the take-over to its last lease, and takes the id back.
$node->safe_psql('postgres', 'CREATE TABLE holder (first_mark bigint, last_mark bigint)');
my $load = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		"DO \$\$ BEGIN FOR i IN 1..80 LOOP
		   BEGIN INSERT INTO ids (phase, id) SELECT 6, leaf_snowflake_next() FROM generate_series(1, 50);
		   EXCEPTION WHEN OTHERS THEN NULL; END;
		   COMMIT; PERFORM pg_sleep(0.1); END LOOP; END \$\$"
	],
	'>', \my $lout, '2>', \my $lerr);
usleep(1_000_000);
$node->safe_psql('postgres', qq{
DO \$\$ DECLARE m bigint; BEGIN
  UPDATE leaf_id_catalog.leaf_worker SET owner_token = 777 WHERE worker_id = 0 RETURNING last_timestamp INTO m;
  INSERT INTO holder VALUES (m, m);
  COMMIT;
  FOR i IN 1..13 LOOP
    PERFORM pg_sleep(0.3);
    UPDATE leaf_id_catalog.leaf_worker SET last_timestamp = $now_ms + 3000 WHERE worker_id = 0 AND owner_token = 777
      RETURNING last_timestamp INTO m;
    UPDATE holder SET last_mark = m;
    COMMIT;
  END LOOP; END \$\$});
my ($first_mark, $last_mark) = split /\|/, $node->safe_psql('postgres', 'SELECT first_mark, last_mark FROM holder');
cmp_ok($last_mark, '>', $first_mark + 3000, 'premise: the other holder renewed for seconds');
$load->finish;
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM ids WHERE phase = 6 AND (id >> 22) + $epoch > $first_mark AND (id >> 22) + $epoch <= $last_mark"),
	'0',
	'no ID of this server falls in the milliseconds the other holder held');
cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM ids WHERE phase = 6 AND (id >> 22) + $epoch <= $first_mark"),
	'>', 0, 'premise: IDs were issued before the take-over');
cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM ids WHERE phase = 6 AND (id >> 22) + $epoch > $last_mark"),
	'>', 0, 'and after the other holder stopped, this server took the id back and issued above its last lease');
ok($node->log_contains(qr/renewal failed: the leaf_worker row of worker id 0 is not held by this server: it has node "[^"]*" and owner token 777/),
	'the failed renewal says why');
isnt(row('owner_token'), '777', 'the row is this server\'s again');

is(repeated_ids($node), '0', 'no ID was issued twice in all phases');
$node->stop;
done_testing();
