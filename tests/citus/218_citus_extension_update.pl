# leaf_id on Citus: ALTER EXTENSION leaf_id UPDATE from 0.1.0 and from 0.2.0
# on the coordinator, with leaf_alloc and leaf_worker as reference tables.
# Each update adds columns to leaf_worker (the owner token, the pinned
# copies); every node's copy, the shard tables included, must get them, and
# both modes must work on every node after it. Before the scripts altered
# each node's shard themselves, Citus sent the ALTER TABLE to the other nodes
# with the whole script as its text, and the update failed ("cannot insert
# multiple commands into a prepared statement").
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CitusTap;
use SegmentTap qw(wait_until try_sql);

for my $from ('0.1.0', '0.2.0')
{
	my $coord = citus_node("coord_" . ($from =~ s/\.//gr));
	my @workers = map { citus_node("worker${_}_" . ($from =~ s/\.//gr)) } 1 .. 2;
	$coord->safe_psql('postgres',
		"SELECT citus_set_coordinator_host('127.0.0.1', " . $coord->port . ')');
	add_citus_node($coord, $_) for @workers;
	$coord->safe_psql('postgres', "CREATE EXTENSION leaf_id VERSION '$from'");
	$coord->safe_psql('postgres',
		q{SELECT create_reference_table('leaf_alloc'), create_reference_table('leaf_worker')});
	$coord->safe_psql('postgres', q{INSERT INTO leaf_alloc (biz_tag, step) VALUES ('u', 10)});
	my $version = $coord->safe_psql('postgres',
		"SELECT default_version FROM pg_available_extensions WHERE name = 'leaf_id'");

	for my $n ($coord, @workers)
	{
		is(try_sql($n, 'postgres', "SELECT leaf_segment_next('u') > 0")->{out},
			't', $n->name . ": segment mode on the $from catalog");
	}

	# the nodes' workers refill after the draws above, through Citus, while
	# the update alters the same reference tables: Citus may end either in
	# a distributed deadlock (40P01), and cancels one. The update is one
	# transaction, rolled back whole, and run again as an operator would
	# (docs/operations.md says so); at most three tries
	my $update;
	for my $try (1 .. 3)
	{
		$update = try_sql($coord, 'postgres', 'ALTER EXTENSION leaf_id UPDATE');
		last if $update->{ret} == 0;
		last unless $update->{err} =~ /distributed deadlock/;
		note "try $try of ALTER EXTENSION leaf_id UPDATE ended in a distributed deadlock; again";
		sleep 1;
	}
	is($update->{ret}, 0, "ALTER EXTENSION leaf_id UPDATE from $from works on the coordinator")
	  or diag $update->{err};
	my $shard_columns = q{
	SET citus.override_table_visibility = off;
	SELECT string_agg(c.relname || '.' || a.attname, ',' ORDER BY c.relname)
	FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
	WHERE c.relname ~ '^leaf_worker(_[0-9]+)?$' AND a.attname IN ('copies', 'holder_copy') AND NOT a.attisdropped};
	for my $n ($coord, @workers)
	{
		is($n->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'leaf_id'}),
			$version, $n->name . ": the catalog is $version (from $from)");
		my $cols = $n->safe_psql('postgres', $shard_columns);
		my $tables = () = $cols =~ /\.copies/g;
		my $tokens = () = $n->safe_psql('postgres', $shard_columns =~ s/'copies', 'holder_copy'/'owner_token'/r) =~ /\.owner_token/g;
		is($tokens, 2, $n->name . ': leaf_worker and its shard both have owner_token');
		is($tables, 2, $n->name . ': leaf_worker and its shard both have the new columns') or diag $cols;
		my $alloc_cols = $n->safe_psql('postgres', q{
	SET citus.override_table_visibility = off;
	SELECT count(*) FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
	WHERE c.relname ~ '^leaf_alloc(_[0-9]+)?$' AND a.attname IN ('opaque_domain', 'opaque_check', 'opaque_grant') AND NOT a.attisdropped});
		is($alloc_cols, 6, $n->name . ': leaf_alloc and its shard both have the columns of 0.4.0 and 0.5.0');
		my $limit_cols = $n->safe_psql('postgres', q{
	SET citus.override_table_visibility = off;
	SELECT count(*) FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
	WHERE c.relname ~ '^leaf_alloc(_[0-9]+)?$' AND a.attname IN ('max_value', 'draw_role') AND NOT a.attisdropped});
		is($limit_cols, 4, $n->name . ': leaf_alloc and its shard both have the columns of 0.6.0');
		is($n->safe_psql('postgres', q{
	SET citus.override_table_visibility = off;
	SELECT string_agg(DISTINCT opaque_check::text, ',') FROM leaf_id_catalog.leaf_alloc}), '0',
			$n->name . ': the tags from before are recorded as plain');
	}
	# the documented step after the update: the domains become a reference table
	$coord->safe_psql('postgres',
		q{SELECT create_reference_table('leaf_id_catalog.leaf_opaque_domain'), create_reference_table('leaf_id_catalog.leaf_alloc_encoding')});
	$coord->safe_psql('postgres', q{SELECT leaf_opaque_create('d');
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('o', 10, 'd', leaf_opaque_grant('d', 'o', 1))});
	for my $n ($coord, @workers)
	{
		my $r;
		ok( wait_until(
				30,
				sub {
					$r = try_sql($n, 'postgres',
						"SELECT leaf_snowflake_next() > 0, leaf_segment_next('u') > 0, leaf_opaque_decode('d', leaf_segment_next('o')) > 0");
					$r->{out} eq 't|t|t';
				}),
			$n->name . ': both modes and an opaque tag work after the update')
		  or diag $r->{err};
	}
	# 0.6.0's columns on every node: a tag's draw_role, a role created
	# through the coordinator (Citus propagates it), is resolved by each
	# node's worker by name; its max_value holds on every node
	$coord->safe_psql('postgres', q{
CREATE ROLE drawers; CREATE ROLE member; CREATE ROLE outsider; GRANT drawers TO member;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, draw_role, max_value) VALUES ('r', 10, 'drawers', 1000)});
	my @drawn;
	for my $n ($coord, @workers)
	{
		my $r = try_sql($n, 'postgres', "SET ROLE outsider; SELECT leaf_segment_next('r')");
		is($r->{sqlstate}, '42501', $n->name . ": a role without the draw_role's privileges is refused") or diag $r->{err};
		$r = try_sql($n, 'postgres', "SET ROLE member; SELECT leaf_segment_next('r') FROM generate_series(1, 25)");
		my @ids = split /\n/, $r->{out};
		push @drawn, @ids;
		is(scalar(@ids), 25, $n->name . ': a member draws') or diag $r->{err};
	}
	# (each node's refills also fill its reserve, up to max_value at most)
	my $r = try_sql($coord, 'postgres', "SET ROLE member; SELECT count(*) FROM leaf_segment_next('r', 2000)");
	is($r->{sqlstate}, '2200H', "the tag stops at its max_value (from $from)") or diag $r->{out};
	my %seen;
	is(scalar(grep { $seen{$_}++ } @drawn), 0, 'no ID of the restricted tag twice across the nodes');
	ok(!grep({ $_ > 1000 } @drawn), 'none above its max_value');
	is( $coord->safe_psql('postgres',
			'SELECT count(*) FROM leaf_id_catalog.leaf_worker WHERE pg_catalog.cardinality(copies) = 3 AND holder_copy IS NOT NULL'),
		3, "each node pinned the three copies in its row (from $from)");

	$_->stop for (@workers, $coord);
}
done_testing();
