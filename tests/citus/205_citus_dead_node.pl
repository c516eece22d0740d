# leaf_id on Citus: one node down.
#
# Under load on the coordinator and worker1 (on each, one session drawing
# segment IDs of a step-10 tag and one drawing snowflake IDs, each call
# logged with its time, its ID or its SQLSTATE and message), worker2's
# postmaster is killed (kill -9). Then:
#  - snowflake goes on with no refusal (each survivor renews its lease on a
#    majority of the copies of leaf_worker: its own and the other's);
#  - segment goes on as long as its cached segments last (a refill needs
#    every copy of leaf_alloc): which error its callers get then, and how
#    long a refused call waits (leaf_id.refill_timeout = 3 s);
#  - the operator action, citus_disable_node of worker2, after which the
#    survivors resume by themselves (nothing of leaf_id is called);
#  - worker2 started again and citus_activate_node: worker2 gets its own
#    worker id back, draws IDs, and its copies of the shared tables equal
#    the coordinator's;
#  - over all of it, no ID issued twice.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use CitusTap;
use SegmentTap qw(try_sql);

# no segment reserve (leaf_id.citus_reserve = 0): what a node has without it,
# its two cached segments (210 tests the reserve)
my ($coord, $w1, $w2) = citus_cluster(
	conf => "leaf_id.refill_timeout = 3000\nleaf_id.max_step = 100\nleaf_id.citus_reserve = 0\n");
$coord->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('dn', 10)});
my %wid = map { $_->name => leaf_worker_id_of($_) } ($coord, $w1, $w2);
my $w2port = $w2->port;

$_->safe_psql('postgres', DRAWLOG_SQL) for ($coord, $w1, $w2);

my @survivors = ([ $coord, 'coord' ], [ $w1, 'w1' ]);
for my $s (@survivors)
{
	start_drawing($s->[0], "$s->[1]_seg", 'segment');
	start_drawing($s->[0], "$s->[1]_snow", 'snowflake');
}
sleep_full(3);

# --- worker2 dies ------------------------------------------------------------
my $t_kill = time;
$w2->kill9;
sleep_full(12);
my $t_after = time;
my %gone;    # how long each session issued after the kill
for my $s (@survivors)
{
	for my $mode ('seg', 'snow')
	{
		my $session = "$s->[1]_$mode";
		my $r = summary($s->[0], $session, $t_kill, $t_after);
		$gone{$session} = $r;
		note sprintf(
			'%s after kill -9 of worker2: %d IDs, the last %.2f s after the kill; first refusal %.2f s after; %d refusals, longest wait %.0f ms; %s',
			$session, $r->{ok}, $r->{last_ok} - $t_kill, $r->{first_err} - $t_kill, $r->{errors},
			$r->{max_err_ms}, $r->{states});
		if ($mode eq 'snow')
		{
			is($r->{errors}, 0, "$session: snowflake is never refused while worker2 is dead") or diag $r->{states};
			# (a loaded machine may stall the session for a moment at the end)
			cmp_ok($r->{last_ok} - $t_kill, '>', 10, "$session: it keeps issuing (12 s, four leases)");
			ok($s->[0]->log_contains(qr/is renewed on 2 of 3 copies of leaf_worker \(a majority\); not on: 127\.0\.0\.1:$w2port/),
				"$session: the server log says the renewals miss worker2's copy");
			next;
		}
		my $what = 'refill tag "dn"';
		my $table = 'leaf_alloc';
		cmp_ok($r->{errors}, '>', 0, "$session: calls are refused once worker2 is dead and the cached segments are used");
		my @other = grep { !/^08006 leaf_id could not \Q$what\E: a node with a copy of $table is unreachable; start it, or run citus_disable_node for it: (connection to the remote node postgres\@127\.0\.0\.1:$w2port failed|failure on connection marked as essential: 127\.0\.0\.1:$w2port(?!\d))/ }
		  split / \| /, $r->{states};
		# (a connection Citus held open to worker2 fails as "marked as
		# essential", which leaf_id tells as 08006 too)
		is(scalar @other, 0, "$session: every refusal is 08006, saying what failed and what to do")
		  or diag explain \@other;
		cmp_ok($r->{max_err_ms}, '<', 4000, "$session: a refused call waits no longer than leaf_id.refill_timeout (3 s, and the machine's delay)");
		# counted, not timed: how fast the session uses them depends on the
		# machine's load
		cmp_ok($r->{ok}, '<=', 2 * 100, "$session: segment stops when its cached segments (at most 2 x 100 IDs) run out");
	}
}

# --- the operator disables worker2 -------------------------------------------
my $dis = try_sql($coord, 'postgres', "SELECT citus_disable_node('127.0.0.1', $w2port)");
is($dis->{ret}, 0, 'citus_disable_node of the dead worker2 works') or diag $dis->{err};
my $t_disable = time;
my %resumed;
for my $s (@survivors)
{
	for my $mode ('seg', 'snow')
	{
		my $session = "$s->[1]_$mode";
		my $first = 0;
		my $deadline = time + 30;
		while (time < $deadline)
		{
			$first = first_ok_after($s->[0], $session, $t_disable);
			last if $first > 0;
			usleep(200_000);
		}
		$resumed{$session} = $first;
		note sprintf('%s: first ID %.2f s after citus_disable_node', $session, $first - $t_disable) if $first;
		ok($first > 0 && $first - $t_disable < 10, "$session resumes by itself within 10 s of citus_disable_node of worker2");
	}
}
sleep_full(2);

# --- worker2 returns ---------------------------------------------------------
$w2->start;

# --- worker2's row held by a prepared transaction ------------------------
# A kill between a refill's PREPARE TRANSACTION and its COMMIT PREPARED
# leaves worker2 a prepared transaction that holds its copy's row of "dn";
# Citus resolves it from the initiator, which skips a node that is not
# active. Whether the kill above left one depends on the moment, so one is
# left on purpose: until it is resolved, worker2's refills wait on it and
# are refused (55P03), and none is issued.
my @left = split /\n/, $w2->safe_psql('postgres', 'SELECT gid FROM pg_prepared_xacts ORDER BY gid');
note 'worker2 returned with ' . scalar(@left) . ' prepared transactions: ' . join(', ', @left);
my $busy = prepare_in_doubt($w2, 'leaf_alloc', q{biz_tag = 'dn'});
note "the row of \"dn\" was held by a prepared transaction the kill left: $busy" if $busy;
my $held = try_sql($w2, 'postgres', q{SELECT leaf_segment_next('dn')});
is($held->{sqlstate} // '', '55P03', 'worker2, its row held by a prepared transaction: its refill is refused (55P03)')
  or diag "$held->{out} $held->{err}";
like($held->{err}, qr/timed out waiting for a refill of leaf_id tag "dn"/, '... as a refill that timed out');
ok( $w2->poll_query_until(
		'postgres', q{
SELECT count(*) FROM pg_locks w
JOIN pg_stat_activity a ON a.pid = w.pid AND a.backend_type = 'leaf_id segment worker'
JOIN pg_locks h ON h.locktype = 'transactionid' AND h.transactionid = w.transactionid AND h.granted
JOIN pg_prepared_xacts p ON p.transaction = h.transactionid
WHERE NOT w.granted}, '1'),
	'... while its worker waits for the prepared transaction (pg_locks)');
my @resolved = resolve_in_doubt($w2, $coord, $w1, $w2);
note 'resolved as Citus\' recovery would: ' . join(', ', @resolved);
is($w2->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'worker2 has no prepared transaction left');

# before it is activated again: what worker2 issues (its metadata still
# says it is active, with its own, stale copies of the shared tables)
my %early = (seg => [], snow => []);
my @early_refusals;
# 5 s of calls, and on until the guard's refusal (XX001) is seen, up to
# 30 s: under load worker2's first refills may time out first (55P03: its
# worker slow to start, or waiting for the row lock that the survivors'
# refills hold), which the check below accepts
my $early_end = time + 5;
my $guard_seen = 0;
while (time < $early_end || (!$guard_seen && time < $early_end + 25))
{
	for my $mode ('seg', 'snow')
	{
		my $f = $mode eq 'seg' ? q{leaf_segment_next('dn')} : 'leaf_snowflake_next()';
		my $r = try_sql($w2, 'postgres', "SELECT $f FROM generate_series(1, 5)");
		if ($r->{ret} == 0) { push @{ $early{$mode} }, split /\n/, $r->{out} }
		else
		{
			push @early_refusals, "$mode: " . ($r->{sqlstate} // 'none') . ' ' . ($r->{err} =~ s/\n.*//sr);
			$guard_seen = 1 if ($r->{sqlstate} // '') eq 'XX001';
		}
	}
	usleep(200_000);
}
note sprintf('worker2 started, not yet activated: %d segment and %d snowflake IDs, %d refusals, first: %s',
	scalar @{ $early{seg} }, scalar @{ $early{snow} }, scalar @early_refusals, $early_refusals[0] // '-');
# its stale copy of leaf_alloc: the guard refuses its refills; its own
# leaf_worker row is the same on every copy, so snowflake may issue
ok( !grep({
			!/^seg: XX001 .*leaf_alloc.max_id of tag "dn" is \d+ in one copy of the table and different in another/
			  && !/^seg: 55P03 .*(timed out waiting for a refill of leaf_id tag "dn"|canceling statement due to lock timeout)/
		} @early_refusals),
	'worker2 not yet activated: the only refusals are of refills, by the guard (stale copy, XX001) or timed out (55P03)')
  or diag explain \@early_refusals;
ok($guard_seen, 'worker2 not yet activated: the guard refuses its refills (XX001)')
  or diag explain \@early_refusals;
is(scalar @{ $early{seg} }, 0, 'worker2 not yet activated: it issues no segment ID (every refill needs its stale copy to agree)');
is(scalar(grep { (($_ >> 12) & 1023) != $wid{ $w2->name } } @{ $early{snow} }), 0,
	'worker2 not yet activated: every snowflake ID it issues carries its own worker id ' . $wid{ $w2->name });
cmp_ok(scalar @{ $early{snow} }, '>', 0, 'worker2 not yet activated: it issues snowflake IDs (the check above is not empty)');
cmp_ok(scalar(grep { /^seg: / } @early_refusals), '>', 0,
	'worker2 not yet activated: its refills are refused (the check above is not empty)');
my $act = try_sql($coord, 'postgres', "SELECT citus_activate_node('127.0.0.1', $w2port)");
is($act->{ret}, 0, 'citus_activate_node of the returned worker2 works') or diag $act->{err};
# citus_disable_node dropped worker2's placements of the reference tables
# from the metadata; this copies them to it again
my $rep = try_sql($coord, 'postgres', "SELECT replicate_reference_tables('block_writes')");
is($rep->{ret}, 0, 'replicate_reference_tables() works') or diag $rep->{err};
my $t_back = time;
start_drawing($w2, 'w2_seg', 'segment');
start_drawing($w2, 'w2_snow', 'snowflake');
for my $session ('w2_seg', 'w2_snow')
{
	my $first = 0;
	my $deadline = time + 30;
	while (time < $deadline)
	{
		$first = first_ok_after($w2, $session, 0);
		last if $first > 0;
		usleep(200_000);
	}
	note sprintf('%s: first ID %.2f s after citus_activate_node', $session, $first - $t_back) if $first;
	ok($first > 0, "$session: worker2 issues again after it returned");
}
sleep_full(4);
stop_drawing();

for my $n ($coord, $w1, $w2)
{
	note $n->name . ' log: '
	  . $n->safe_psql('postgres',
		q{SELECT string_agg(session || ' ' || n || ' ok / ' || e || ' refused', ', ') FROM (SELECT session, count(id) n, count(*) - count(id) e FROM drawlog GROUP BY session) s});
	note $n->name . ' refusals: '
	  . $n->safe_psql('postgres', q{SELECT string_agg(DISTINCT session || ': ' || state || ' ' || msg, E'\n') FROM drawlog WHERE id IS NULL});
}

ok($coord->log_contains(qr/is renewed on all \d copies of leaf_worker again/),
	'the coordinator\'s log says when its renewals reach every copy again');

# --- no ID twice -------------------------------------------------------------
my (%seen, %dup);
for my $mode ('seg', 'snow')
{
	$dup{$mode}++ for grep { $seen{$mode}{$_}++ } @{ $early{$mode} };
}
for my $n ($coord, $w1, $w2)
{
	for my $line (split /\n/, $n->safe_psql('postgres', q{SELECT session, id FROM drawlog WHERE id IS NOT NULL}))
	{
		my ($session, $id) = split /\|/, $line;
		my $mode = $session =~ /seg/ ? 'seg' : 'snow';
		$dup{$mode}++ if $seen{$mode}{$id}++;
	}
}
note "IDs issued: " . join(', ', map { "$_ " . scalar(keys %{ $seen{$_} }) } sort keys %seen);
is($dup{seg} // 0, 0, 'no segment ID issued twice over the three nodes');
is($dup{snow} // 0, 0, 'no snowflake ID issued twice over the three nodes');
my %snow_wid;
for my $n ([ $coord, 'coord' ], [ $w1, 'w1' ], [ $w2, 'w2' ])
{
	is( $n->[0]->safe_psql(
			'postgres',
			"SELECT string_agg(DISTINCT ((id >> 12) & 1023)::text, ',') FROM drawlog WHERE session = '$n->[1]_snow' AND id IS NOT NULL"),
		$wid{ $n->[0]->name },
		$n->[0]->name . "'s snowflake IDs all carry its own worker id");
}

# --- the copies agree again --------------------------------------------------
for my $t ('leaf_alloc', 'leaf_worker')
{
	my ($key, $cols) = $t eq 'leaf_alloc' ? ('biz_tag', 'biz_tag, max_id') : ('worker_id', 'worker_id, node_name, owner_token');
	my $r = try_sql($coord, 'postgres',
		qq{SELECT nodeport, result FROM run_command_on_placements('leaf_id_catalog.$t', \$\$SELECT string_agg(concat_ws('=', $cols), ',' ORDER BY $key) FROM %s\$\$) ORDER BY nodeport});
	note "$t placements: $r->{out} $r->{err}";
	my %res = map { (split /\|/, $_, 2)[1] => 1 } split /\n/, $r->{out};
	is(scalar(keys %res), 1, "every copy of $t says the same");
	like($r->{out}, qr/^$w2port\|/m, "worker2 holds a copy of $t again");
}

$_->stop for ($w2, $w1, $coord);
done_testing();
