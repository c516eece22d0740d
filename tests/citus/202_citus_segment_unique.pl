# leaf_id on Citus: segment IDs unique across the cluster.
#
# Distributed tables keyed by leaf_segment_next(tag), tags with step 10 and
# step 1000. Part 1 finds out which node evaluates the column default for
# each insert form, from the range each node reserved for a probe tag.
# Part 2: 9 sessions at once (3 through the coordinator, 3 on each worker),
# each doing single-row INSERTs, multi-row INSERTs, INSERT ... SELECT (from
# generate_series and from a distributed table) and COPY into both tables:
# at least 300k rows, no ID twice, IDs from every node.
#
# A second column takes leaf_snowflake_next() as its default: its worker id
# says on which node the row's defaults were evaluated.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use CitusTap;

# step 10 would mean one reference-table transaction every 10 IDs per node;
# max_step 160 lets the step-10 tag grow to 160 (the step-1000 tag stays at
# 1000: its table step is the floor)
my ($coord, @workers) = citus_cluster(conf => qq{
leaf_id.max_step = 160
leaf_id.refill_timeout = '60s'
});
my @nodes = ($coord, @workers);
my %node_of_wid;
$node_of_wid{ leaf_worker_id_of($_) } = $_->name for @nodes;
is(scalar keys %node_of_wid, 3, 'each node has its own snowflake worker id (to tell where a default ran)');

$coord->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('probe', 1000000), ('order', 1000), ('order10', 10);
CREATE TABLE probe (id bigint NOT NULL DEFAULT leaf_segment_next('probe'),
                    sf bigint NOT NULL DEFAULT leaf_snowflake_next(), via text, form text);
CREATE TABLE orders (id bigint NOT NULL DEFAULT leaf_segment_next('order'),
                     sf bigint NOT NULL DEFAULT leaf_snowflake_next(), via text, form text, sess text);
CREATE TABLE orders10 (LIKE orders INCLUDING DEFAULTS);
ALTER TABLE orders10 ALTER id SET DEFAULT leaf_segment_next('order10');
CREATE TABLE src (g int NOT NULL);
SELECT create_distributed_table('probe', 'id');
SELECT create_distributed_table('orders', 'id');
SELECT create_distributed_table('orders10', 'id');
SELECT create_distributed_table('src', 'g');
INSERT INTO src SELECT generate_series(1, 5000);
});

# --- part 1: which node evaluates the default ---------------------------------
my %forms = (
	single => q{INSERT INTO %T (via, form) VALUES ('%V', 'single')},
	multi => q{INSERT INTO %T (via, form) VALUES ('%V', 'multi'), ('%V', 'multi'), ('%V', 'multi')},
	insert_select_local =>
	  q{INSERT INTO %T (via, form) SELECT '%V', 'insert_select_local' FROM generate_series(1, 20)},
	insert_select_distributed =>
	  q{INSERT INTO %T (via, form) SELECT '%V', 'insert_select_distributed' FROM src WHERE g <= 20},
	copy => qq{COPY %T (via, form) FROM STDIN;\n} . join('', map { "%V\tcopy\n" } 1 .. 20) . "\\.\n",
);
my $fill = sub {
	my ($tmpl, $table, $via) = @_;
	(my $sql = $tmpl) =~ s/%T/$table/g;
	$sql =~ s/%V/$via/g;
	return $sql;
};
for my $n (@nodes)
{
	for my $form (sort keys %forms)
	{
		$n->safe_psql('postgres', $fill->($forms{$form}, 'probe', $n->name));
	}
}
# each node reserved one range of 1000000 for 'probe' (nothing uses 10% of it)
my %range;
for my $n (@nodes)
{
	my ($lo, $hi) = split /\|/, $n->safe_psql('postgres',
		q{SELECT buffer0_start, buffer0_end FROM leaf_segment_status WHERE tag = 'probe'});
	$range{ $n->name } = [ $lo, $hi ];
}
note 'probe ranges: ' . join(', ', map { "$_ [$range{$_}[0], $range{$_}[1])" } sort keys %range);
my $rows = $coord->safe_psql('postgres',
	q{SELECT form, via, id, (leaf_snowflake_decode(sf)).worker_id FROM probe ORDER BY form, via, id});
my (%seg_node, %sf_node);    # "form via" => { evaluating node => rows }
for my $line (split /\n/, $rows)
{
	my ($form, $via, $id, $wid) = split /\|/, $line;
	my ($by_range) = grep { $id >= $range{$_}[0] && $id < $range{$_}[1] } keys %range;
	$seg_node{"$form $via"}{ $by_range // 'none' }++;
	$sf_node{"$form $via"}{ $node_of_wid{$wid} // 'none' }++;
}
my $where = sub {
	my ($h) = @_;
	return join '+', sort keys %$h;
};
for my $form (sort keys %forms)
{
	for my $n (@nodes)
	{
		my $key = "$form " . $n->name;
		# INSERT ... SELECT from a distributed table: Citus repartitions, and
		# the SELECT with the default runs on the nodes holding src's shards
		# (the workers; the coordinator holds no shards)
		my $want = $form eq 'insert_select_distributed' ? 'worker1+worker2' : $n->name;
		is($where->($seg_node{$key}), $want,
			"$form sent to " . $n->name . ": leaf_segment_next ran on $want (by the ranges)");
		is($where->($sf_node{$key}), $want,
			"$form sent to " . $n->name . ": leaf_snowflake_next ran on $want (by the worker id)");
	}
}

# --- part 2: 9 sessions, all forms, two tags -----------------------------------
use constant SINGLE => 100;           # single-row INSERTs per session and table
use constant MULTI => 10;             # multi-row INSERTs of 100 rows
use constant SERIES => 4000;          # rows of each of 2 INSERT ... SELECT generate_series
use constant COPY_ROWS => 5000;       # rows of one COPY
use constant SRC_ROWS => 5000;        # rows of one INSERT ... SELECT FROM src
my $per_table = SINGLE + MULTI * 100 + 2 * SERIES + COPY_ROWS + SRC_ROWS;
my @sessions;
for my $n (@nodes)
{
	for my $i (1 .. 3)
	{
		my $sess = $n->name . "_$i";
		my $sql = '';
		for my $t ('orders', 'orders10')
		{
			my $v = "'" . $n->name . "'";
			$sql .= "INSERT INTO $t (via, form, sess) VALUES ($v, 'single', '$sess');\n" x SINGLE;
			$sql .= "INSERT INTO $t (via, form, sess) VALUES "
			  . join(', ', ("($v, 'multi', '$sess')") x 100) . ";\n"
			  for 1 .. MULTI;
			$sql .= "INSERT INTO $t (via, form, sess) SELECT $v, 'insert_select_local', '$sess' FROM generate_series(1, "
			  . SERIES . ");\n"
			  for 1 .. 2;
			$sql .= "INSERT INTO $t (via, form, sess) SELECT $v, 'insert_select_distributed', '$sess' FROM src WHERE g <= "
			  . SRC_ROWS . ";\n";
			$sql .= "COPY $t (via, form, sess) FROM STDIN;\n"
			  . (($n->name . "\tcopy\t$sess\n") x COPY_ROWS) . "\\.\n";
		}
		push @sessions, [ $n, $sess, $sql ];
	}
}
my $t0 = time;
my $res = run_sessions(600, @sessions);
my $seconds = time - $t0;
for my $s (@sessions)
{
	is($res->{ $s->[1] }{rc}, 0, "session $s->[1] inserted its rows without an error")
	  or diag $res->{ $s->[1] }{err};
}
note sprintf('9 sessions took %.1f s', $seconds);

my $want_rows = 9 * $per_table;
for my $t ('orders', 'orders10')
{
	my ($rows_in, $distinct) = split /\|/, $coord->safe_psql('postgres', "SELECT count(*), count(DISTINCT id) FROM $t");
	is($rows_in, $want_rows, "$t: all $want_rows rows are there");
	my $by_node = $coord->safe_psql('postgres', qq{
SELECT string_agg(w || ':' || n, ' ' ORDER BY w) FROM (
  SELECT (sf >> 12) & 1023 AS w, count(*) AS n FROM $t GROUP BY 1) s});
	note "$t: rows per evaluating node (snowflake worker id): $by_node";
	my @w = map { (split /:/)[0] } split / /, $by_node;
	is(join(',', sort @w), join(',', sort keys %node_of_wid), "$t: IDs were drawn on every node");
	# before the refill locked the row with a write (a SELECT ... FOR UPDATE
	# locks only the node's own copy of a reference table), concurrent
	# refills of one tag from several nodes handed out one range twice
	is($rows_in - $distinct, 0, "$t: no ID occurs twice");
	my $dups = $coord->safe_psql('postgres', qq{
SELECT count(*), coalesce(string_agg(DISTINCT nodes, ' '), '') FROM (
  SELECT string_agg(((sf >> 12) & 1023)::text, '/' ORDER BY sf) AS nodes
  FROM $t GROUP BY id HAVING count(*) > 1) d});
	note "$t: IDs that occur more than once, and the worker ids of the nodes that drew them: $dups"
	  if $dups !~ /^0\|/;
	my $tag = $t eq 'orders' ? 'order' : 'order10';
	my $max_id = $coord->safe_psql('postgres', "SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = '$tag'");
	is( $coord->safe_psql('postgres', "SELECT max(id) < $max_id FROM $t"),
		't', "$t: every ID is below the tag's max_id");
}
my $refills = join ', ', map {
	$_->name . ' ' . $_->safe_psql('postgres',
		q{SELECT string_agg(tag || '=' || refills || '/step ' || dynamic_step, ' ' ORDER BY tag) FROM leaf_segment_status})
} @nodes;
note "refills since start: $refills";

$_->stop for reverse @nodes;
done_testing();
