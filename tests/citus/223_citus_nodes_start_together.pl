# Citus nodes that start drawing together. A coordinator and
# two workers with the reference tables, as citus.md sets them up; right
# after, two sessions on each node insert rows whose defaults draw both
# modes, all from the first second. Every node claims its snowflake worker
# id through Citus at the same moment, and its segment refills go through
# the same reference tables: one claim or refill can wait longer than the
# worker's lock_timeout (5 s) for a lock another node's job holds. That is
# contention, not an attack: the job is retried within the callers'
# leaf_id.refill_timeout (10 s, the default), and no caller may fail. (With
# the error handed to the callers, both sessions of one worker failed their
# first insert, two runs out of two.) Then: no ID twice over all nodes, in
# either mode. log_lock_waits shows in the logs who held what for how long
# (docs/citus.md).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CitusTap;

use constant STATEMENTS => 40;
use constant ROWS => 50;

my ($coord, @workers) = citus_cluster(conf => "log_lock_waits = on\ndeadlock_timeout = '1s'\nleaf_id.refill_timeout = 20000\n");
my @nodes = ($coord, @workers);
$coord->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('order', 1000)});
for my $n (@nodes)
{
	# a local table on each node (not distributed: each node's own inserts)
	$n->safe_psql('postgres', q{
SET citus.enable_ddl_propagation = off;
CREATE TABLE drawn (node text NOT NULL, session int NOT NULL,
  seg bigint NOT NULL DEFAULT leaf_segment_next('order'),
  sf bigint NOT NULL DEFAULT leaf_snowflake_next())});
	is($n->safe_psql('postgres', 'SELECT count(*) FROM leaf_snowflake_status WHERE worker_id IS NOT NULL AND worker_id >= 0'),
		'0', $n->name . ': premise: no worker id claimed before the sessions start');
}
my $insert = join '', map { "INSERT INTO drawn (node, session) SELECT :'node', :session FROM generate_series(1, " . ROWS . ");\n" }
  1 .. STATEMENTS;
my @sessions;
for my $n (@nodes)
{
	for my $s (1, 2)
	{
		push @sessions, [ $n, $n->name . "_s$s", "\\set node " . $n->name . "\n\\set session $s\n$insert" ];
	}
}
my $res = run_sessions(180, @sessions);
for my $s (@sessions)
{
	my $r = $res->{ $s->[1] };
	is($r->{rc}, 0, "$s->[1]: every insert succeeded, from the first one") or diag $r->{err};
}
my (@seg, @sf);
for my $n (@nodes)
{
	is($n->safe_psql('postgres', 'SELECT count(*) FROM drawn'), 2 * STATEMENTS * ROWS,
		$n->name . ': both sessions inserted all their rows');
	push @seg, split /\n/, $n->safe_psql('postgres', 'SELECT seg FROM drawn');
	push @sf, split /\n/, $n->safe_psql('postgres', 'SELECT sf FROM drawn');
}
my %seen;
is(scalar(grep { $seen{"g$_"}++ } @seg), 0, 'no segment ID twice over the three nodes (' . scalar(@seg) . ' drawn)');
is(scalar(grep { $seen{"f$_"}++ } @sf), 0, 'no snowflake ID twice over the three nodes (' . scalar(@sf) . ' drawn)');
my %wids = map { $_->safe_psql('postgres', 'SELECT worker_id FROM leaf_snowflake_status') => 1 } @nodes;
is(scalar(keys %wids), 3, 'the three nodes claimed three worker ids');

# what waited, and for what (log_lock_waits: the waiter, the holder and
# the queue), for docs/citus.md
for my $n (@nodes)
{
	my $log = slurp_file($n->logfile);
	my @waits = $log =~ /^(.*still waiting for .*)$/mg;
	my @retried = $log =~ /^(.*retried after lock contention.*|.*refill of tag "order" failed: .*)$/mg;
	note $n->name . ': ' . scalar(@waits) . ' lock waits past 1 s logged; retried jobs: ' . scalar(@retried);
	note "  $_" for grep { defined } (@waits, @retried)[0 .. 5];
}

$_->stop for reverse @nodes;
done_testing();
