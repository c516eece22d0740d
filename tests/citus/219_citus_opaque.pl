# leaf_id on Citus: opaque IDs. leaf_opaque_domain is a reference
# table (the set-up statement), so a domain created on the coordinator has
# one key on every node: the three nodes draw an opaque tag's IDs at once,
# none twice, and every node decodes every node's IDs to the same counters,
# all distinct.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CitusTap;
use SegmentTap qw(try_sql);

my ($coord, @workers) = citus_cluster();
my @nodes = ($coord, @workers);

# The key travels to the other nodes as a literal of leaf_opaque_create's
# INSERT: with citus.log_remote_commands and log_local_commands on (user
# settings: a database owner may set them for her database), none of it
# reaches the notices or the log. (Premise: the settings show a reference
# table's INSERT with its literal.)
$coord->safe_psql('postgres', 'CREATE TABLE leak_premise (v text); SELECT create_reference_table($$leak_premise$$)');
# The workers log every statement they receive: the text their
# pg_stat_activity shows while it runs (to pg_read_all_stats, and so to
# pg_monitor). 0.5.0's INSERT ... VALUES sent the key as a literal there;
# 0.5.1's INSERT ... SELECT goes as a COPY, the key in its binary data.
$_->safe_psql('postgres', "ALTER SYSTEM SET log_statement = 'all'; SELECT pg_reload_conf()") for @workers;
my $log_offset = -s $coord->logfile;
my ($ret, $out, $err) = $coord->psql('postgres', q{
SET citus.log_remote_commands = on; SET citus.log_local_commands = on;
SET log_min_messages = notice;
INSERT INTO leak_premise VALUES ('premise_literal_4711');
SELECT leaf_opaque_create('logged_domain', bits => 53);
});
is($ret, 0, 'leaf_opaque_create with Citus\' command logging on') or diag $err;
like($err, qr/premise_literal_4711/, 'premise: the logging shows a reference table INSERT\'s literal');
my $key = $coord->safe_psql('postgres', q{SELECT encode(key, 'hex') FROM leaf_id_catalog.leaf_opaque_domain WHERE name = 'logged_domain'});
is(length($key), 32, 'premise: the new key (hex)');
my $server_log = slurp_file($coord->logfile, $log_offset);
ok($err !~ /\Q$key\E/i && $err !~ /\Q@{[substr($key, 0, 16)]}\E/i && $err !~ /\Q@{[substr($key, 16)]}\E/i,
	'no part of the key in the notices') or diag $err;
ok($server_log !~ /\Q@{[substr($key, 0, 16)]}\E/i && $server_log !~ /\Q@{[substr($key, 16)]}\E/i,
	'no part of the key in the coordinator\'s log');
for my $w (@workers)
{
	my $wlog = slurp_file($w->logfile);
	# the premise on this node: it logged the statements it received, the
	# reference table INSERT's literal with them
	like($wlog, qr/premise_literal_4711/, 'premise: ' . $w->name . ' logged the INSERT with its literal');
	ok($wlog !~ /\Q@{[substr($key, 0, 16)]}\E/i && $wlog !~ /\Q@{[substr($key, 16)]}\E/i,
		'no part of the key in the log of ' . $w->name . ' (every statement it received)');
}

$_->safe_psql('postgres', "ALTER SYSTEM RESET log_statement; SELECT pg_reload_conf()") for @workers;

is($coord->safe_psql('postgres', q{SELECT leaf_opaque_create('shared_domain', bits => 53)}),
	'shared_domain', 'a domain created on the coordinator');
my $again = try_sql($coord, 'postgres', q{SELECT leaf_opaque_create('shared_domain', bits => 53)});
is($again->{sqlstate}, '42710', 'creating it again: 42710 (the COPY to the nodes reports the unique violation)')
  or diag $again->{err};
is( $coord->safe_psql(
		'postgres', q{
SELECT count(DISTINCT result) || ':' || count(*) FROM run_command_on_placements('leaf_id_catalog.leaf_opaque_domain',
  $$SELECT md5(key) FROM %s WHERE name = 'shared_domain'$$)}),
	'1:3', 'every node holds the same key (one copy per node)');
$coord->safe_psql('postgres',
	q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('opq', 50, 'shared_domain', leaf_opaque_grant('shared_domain', 'opq', 1))});

my %ids;
my @sessions = map {
	my $n = $_;
	[ $n, $n->name, "SELECT leaf_segment_next('opq') FROM generate_series(1, 3000);" ]
} @nodes;
my $res = run_sessions(120, @sessions);
for my $n (@nodes)
{
	my $r = $res->{ $n->name };
	is($r->{rc}, 0, $n->name . ': drew without an error') or diag $r->{err};
	my @got = grep { /^\d+$/ } split /\n/, $r->{out};
	is(scalar @got, 3000, $n->name . ': 3000 opaque IDs');
	$ids{ $n->name } = \@got;
}
my @all = map { @{ $ids{ $_->name } } } @nodes;
my %seen;
is(scalar(grep { $seen{$_}++ } @all), 0, 'no opaque ID twice across the three nodes');

my $list = join(',', @all);
my %decoded;
for my $n (@nodes)
{
	$decoded{ $n->name } = $n->safe_psql('postgres',
		"SELECT string_agg(leaf_opaque_decode('shared_domain', id)::text, ',' ORDER BY ord) FROM unnest('{$list}'::bigint[]) WITH ORDINALITY AS t(id, ord)");
}
is($decoded{ $_->name }, $decoded{ $coord->name }, $_->name . ' decodes every ID as the coordinator does')
  for @workers;
my @counters = split /,/, $decoded{ $coord->name };
my %c;
is(scalar(grep { $c{$_}++ } @counters), 0, 'the counters behind the IDs are distinct');
my $max = $coord->safe_psql('postgres', q{SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'opq'});
is(scalar(grep { $_ >= $max } @counters), 0, 'every counter is below leaf_alloc.max_id');
is( $coord->safe_psql(
		'postgres', q{
SELECT count(DISTINCT result) FROM run_command_on_placements('leaf_id_catalog.leaf_alloc',
  $$SELECT opaque_check FROM %s WHERE biz_tag = 'opq'$$)}),
	'1', 'every copy of the tag records the same encoding');

$_->stop for reverse @nodes;
done_testing();
