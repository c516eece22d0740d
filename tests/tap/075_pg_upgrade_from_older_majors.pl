# pg_upgrade to PostgreSQL 18 from every older major leaf_id supports (15,
# 16 and 17), with both modes and an opaque domain in use. Runs in the 18
# suite (skipped on the others): the old servers are those of the other
# majors' suites, with their own leaf_id installed (target/pg16, target/pg17,
# from the wheels), and for 15 the wheel's 15.19 with the leaf_id built for
# Debian's 15 copied in (scripts/pg15-old.sh). Not Debian's 15 itself: its
# build gives every column an attribute option, pg_attver, that 18's
# pg_upgrade refuses, which is that build's trait, not PostgreSQL's.
#
# LEAF_ID_UPGRADE_FROM (the test command sets it: "15 16 17", less the
# majors it does not run) names the old majors that must be there; a major
# it names whose install has no leaf_id fails. Unset (a run by hand), every
# old major found in target/ is tested and the others are skipped, each
# with a line that says so.
#
# Per old major: a plain tag, an opaque tag (53-bit domain) and snowflake IDs
# under a fixed node name are drawn, the old cluster is stopped cleanly and
# pg_upgrade moves it into a new 18 cluster with leaf_id preloaded and its
# clock 60 s behind. There the snowflake mode must refuse (58000, the mark
# came over); with the clock back, every new ID of each tag and of the
# snowflake mode is above every ID before the upgrade (opaque: by the
# decoded counter), the old opaque IDs decode the same, the keys, the worker
# id, the registry's mark and the tags' recorded encodings and reserved ends
# are kept, and no ID is issued twice.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

use constant OFFSET_MS => 60000;

my $probe = PostgreSQL::Test::Cluster->new('upgrade_probe');
plan skip_all => 'pg_upgrade from older majors runs in the PostgreSQL 18 suite'
  unless $probe->pg_version->major >= 18;

my $root = $ENV{LEAF_ID_TAP_ROOT} or BAIL_OUT('LEAF_ID_TAP_ROOT is not set (run scripts/test-tap.sh)');
my $required = defined $ENV{LEAF_ID_UPGRADE_FROM};
my @olds = $required ? split(' ', $ENV{LEAF_ID_UPGRADE_FROM}) : (15, 16, 17);
# (the test command runs the older majors' suites first: none means none ran)
skip_all_noted('pg_upgrade from older majors: LEAF_ID_UPGRADE_FROM names no older major') unless @olds;

my $conf = qq{
shared_preload_libraries = 'leaf_id'
max_worker_processes = 16
lc_messages = 'C'
log_min_messages = warning
leaf_id.lease_ahead = 3000
leaf_id.heartbeat_interval = 1000
};

my $state_sql = {
	keys => q{SELECT string_agg(name || ':' || bits || ':' || md5(key), ',' ORDER BY name) FROM leaf_id_catalog.leaf_opaque_domain},
	decoded => q{SELECT string_agg(id || '=' || leaf_opaque_decode('public_order', id), ',' ORDER BY id) FROM ids WHERE kind = 'opaque'},
	encodings => q{SELECT string_agg(biz_tag || ':' || opaque_check, ',' ORDER BY biz_tag) FROM leaf_id_catalog.leaf_alloc_encoding},
	worker => q{SELECT worker_id || ':' || node_name FROM leaf_id_catalog.leaf_worker WHERE node_name = current_setting('leaf_id.node_name')},
};

my $tested = 0;
for my $m (@olds)
{
	my $path = "$root/target/pg$m";
	my $lib = "$path/lib/leaf_id.so";
	if (!-e $lib)
	{
		if ($required)
		{
			fail("PostgreSQL $m: no leaf_id in $path (LEAF_ID_UPGRADE_FROM names it; "
				  . ($m == 15 ? 'scripts/pg15-old.sh' : "PG_MAJOR=$m scripts/install.sh") . ' puts it there)');
		}
		else
		{
			note_skip("pg_upgrade from PostgreSQL $m: no leaf_id in $path");
		}
		next;
	}
	$tested++;
	upgrade_from($m, $path);
}
diag 'no older major was found: nothing was upgraded' unless $tested || $required;

done_testing();

sub upgrade_from
{
	my ($m, $path) = @_;
	my $node_conf = "$conf\nleaf_id.node_name = 'upgraded-from-$m'\n";
	my $old = PostgreSQL::Test::Cluster->new("old$m", install_path => $path);
	$old->init;
	$old->append_conf('postgresql.conf', $node_conf);
	$old->start;
	like($old->safe_psql('postgres', 'SHOW server_version'), qr/^$m\./, "PostgreSQL $m: the old server is $m");
	$old->safe_psql(
		'postgres', q{
CREATE EXTENSION leaf_id;
SELECT leaf_opaque_create('public_order', bits => 53);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('order', 100);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant)
  VALUES ('secret', 100, 'public_order', leaf_opaque_grant('public_order', 'secret', 1));
CREATE TABLE ids (phase int, kind text, id bigint);
INSERT INTO ids SELECT 1, 'segment', leaf_segment_next('order') FROM generate_series(1, 250);
INSERT INTO ids SELECT 1, 'opaque', leaf_segment_next('secret') FROM generate_series(1, 300);
INSERT INTO ids SELECT 1, 'snowflake', leaf_snowflake_next() FROM generate_series(1, 2000);
});
	my %before = map { $_ => $old->safe_psql('postgres', $state_sql->{$_}) } keys %$state_sql;
	my $ends_before = $old->safe_psql('postgres', q{SELECT string_agg(biz_tag || ':' || reserved_end, ',' ORDER BY biz_tag) FROM leaf_id_catalog.leaf_alloc_encoding});
	my $mark_before = $old->safe_psql('postgres', q{SELECT last_timestamp FROM leaf_id_catalog.leaf_worker WHERE node_name = current_setting('leaf_id.node_name')});
	my $max_opaque = $old->safe_psql('postgres', q{SELECT max(leaf_opaque_decode('public_order', id)) FROM ids WHERE kind = 'opaque'});
	$old->stop;

	my $new = PostgreSQL::Test::Cluster->new("new_from$m");
	# the old cluster has no data checksums; 18's initdb turns them on
	$new->init(no_data_checksums => 1);
	$new->append_conf('postgresql.conf', $node_conf . 'leaf_id.test_clock_offset_ms = -' . OFFSET_MS . "\n");
	my $newbin = $new->config_data('--bindir');
	command_ok(
		[
			"$newbin/pg_upgrade", '--no-sync',
			'-d', $old->data_dir, '-D', $new->data_dir,
			'-b', "$path/bin", '-B', $newbin,
			'-p', $old->port, '-P', $new->port,
			'-s', $new->host,
		],
		"PostgreSQL $m: pg_upgrade to 18 with leaf_id in use");
	$new->start;

	is( $new->safe_psql('postgres', q{SELECT extversion = default_version FROM pg_extension, pg_available_extensions WHERE extname = 'leaf_id' AND name = 'leaf_id'}),
		't', "PostgreSQL $m: after the upgrade the extension is there, at its version");

	# the clock 60 s behind the mark that came over: refused, no number
	my $r = try_sql($new, 'postgres', 'SELECT leaf_snowflake_next()');
	is($r->{sqlstate}, '58000', "PostgreSQL $m: with the clock behind the old mark the snowflake mode refuses (58000)")
	  or diag "ret $r->{ret}, out $r->{out}, err $r->{err}";
	is($r->{out}, '', "PostgreSQL $m: ... and returns no ID");
	$new->adjust_conf('postgresql.conf', 'leaf_id.test_clock_offset_ms', '0');
	$new->reload;

	$r = try_sql(
		$new, 'postgres', q{
INSERT INTO ids SELECT 2, 'segment', leaf_segment_next('order') FROM generate_series(1, 250);
INSERT INTO ids SELECT 2, 'opaque', leaf_segment_next('secret') FROM generate_series(1, 300);
});
	is($r->{ret}, 0, "PostgreSQL $m: segment IDs, plain and opaque, after the upgrade") or diag $r->{err};
	my $sf = insert_snowflake_ids($new, 2, 2000, 20);
	ok($sf->{ok}, "PostgreSQL $m: snowflake IDs after the upgrade, the clock back") or diag $sf->{err};

	is(phase_above($new, 'segment', 'snowflake'), 't', "PostgreSQL $m: plain segment and snowflake IDs after the upgrade are above every ID before");
	cmp_ok($new->safe_psql('postgres', q{SELECT min(leaf_opaque_decode('public_order', id)) FROM ids WHERE kind = 'opaque' AND phase = 2}),
		'>', $max_opaque, "PostgreSQL $m: the opaque tag's counters after the upgrade are above every one before");
	is($new->safe_psql('postgres', 'SELECT count(*) - count(DISTINCT id) FROM ids'), '0', "PostgreSQL $m: no ID twice");
	is($new->safe_psql('postgres', 'SELECT count(*) FROM ids'), 2 * (250 + 300 + 2000), "PostgreSQL $m: every ID was drawn");

	my $decoded_after = $new->safe_psql('postgres',
		q{SELECT string_agg(id || '=' || leaf_opaque_decode('public_order', id), ',' ORDER BY id) FROM ids WHERE kind = 'opaque' AND phase = 1});
	is($decoded_after, $before{decoded}, "PostgreSQL $m: every old opaque ID decodes to the same counter");
	is($new->safe_psql('postgres', $state_sql->{keys}), $before{keys}, "PostgreSQL $m: the domain's key and width are kept");
	is($new->safe_psql('postgres', $state_sql->{encodings}), $before{encodings}, "PostgreSQL $m: the tags' recorded encodings are kept");
	is($new->safe_psql('postgres', $state_sql->{worker}), $before{worker}, "PostgreSQL $m: the registry row (worker id, node name) is kept");
	is( $new->safe_psql('postgres', q{SELECT worker_id || ':' || node_name FROM leaf_snowflake_status}),
		$before{worker}, "PostgreSQL $m: the node serves the worker id it had");
	cmp_ok(
		$new->safe_psql('postgres', q{SELECT last_timestamp FROM leaf_id_catalog.leaf_worker WHERE node_name = current_setting('leaf_id.node_name')}),
		'>=', $mark_before, "PostgreSQL $m: the registry's mark did not move back");
	my %end_before = map { split /:/ } split /,/, $ends_before;
	my %end_after = map { split /:/ } split /,/,
	  $new->safe_psql('postgres', q{SELECT string_agg(biz_tag || ':' || reserved_end, ',' ORDER BY biz_tag) FROM leaf_id_catalog.leaf_alloc_encoding});
	ok((keys %end_before) == 2 && !grep({ !defined $end_after{$_} || $end_after{$_} < $end_before{$_} } keys %end_before),
		"PostgreSQL $m: every tag's reserved end is kept (or above)")
	  or diag "before $ends_before, after " . join(',', map { "$_:$end_after{$_}" } sort keys %end_after);
	$new->stop;
}
