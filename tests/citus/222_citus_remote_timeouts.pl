# leaf_id on Citus: a database owner's settings on another node do
# not stop the workers' statements that Citus runs there. The workers force
# their timeouts in their own sessions; Citus opens sessions on the other
# nodes for a refill (the write to every copy of leaf_alloc), which take the
# database's settings there. Each job sets its timeouts with Citus' SET
# propagation on, so those sessions get them too:
# A. 1 ms of statement_timeout, lock_timeout and
#    idle_in_transaction_session_timeout set for the database on both worker
#    nodes (ALTER DATABASE ... SET, as its owner may): the coordinator's and a
#    worker's refills through Citus go on, no ID twice (without the
#    propagation the first refill failed; with it, a remote session's first
#    statements still run under the database's settings, so a refill may
#    fail and be retried).
# B. What a SET LOCAL cannot undo, default_transaction_read_only (and on 17
#    and later a 1 ms transaction_timeout, whose timer starts with the remote
#    transaction): refills fail (the premise), until the role the workers
#    connect as has its own setting on each node (ALTER ROLE ... SET, which
#    wins over the database's), as docs/citus.md tells operators.
# C. One node's copies of a tag set back: its refill is refused by the guard
#    that every copy runs, and no ID is issued twice over the nodes.
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

my ($coord, @workers) = citus_cluster(conf => qq{
leaf_id.refill_timeout = '5s'
leaf_id.citus_reserve = 0
});

my $major = $coord->safe_psql('postgres', "SELECT current_setting('server_version_num')::int / 10000");
my @timeouts = ('statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout');
my @unfixable = ('default_transaction_read_only');
push @unfixable, 'transaction_timeout' if $major >= 17;

# (this test's own sessions on the workers override them: a client's
# options win over the database's and the role's settings)
my $client_options = join(' ',
	(map { "-c $_=0" } @timeouts, grep { /timeout/ } @unfixable),
	'-c default_transaction_read_only=off');
sub on_worker
{
	my ($w, $sql) = @_;
	local $ENV{PGOPTIONS} = $client_options;
	return try_sql($w, 'postgres', $sql);
}

# $run->() until it succeeds, at most COLD_SESSION_TRIES times, only again
# after the failure a cold remote session can give: its first statements,
# before the job's SETs reach it, run under the database's 1 ms settings, and
# the refill that needed it fails (Citus' "failure on connection marked as
# essential", or the timeout's own message); the caller that waited for that
# refill gets its error, and the worker retries the refill. Returns the last
# try's result and the number of tries.
# Every failed try's SQLSTATE is kept in @cold_failures: Citus' failure has
# none of its own (XX000), and leaf_id must report it as 08006.
use constant COLD_SESSION_TRIES => 3;
my @cold_failures;
sub until_warm
{
	my ($run) = @_;
	my ($r, $tries);
	for $tries (1 .. COLD_SESSION_TRIES)
	{
		$r = $run->();
		return ($r, $tries) if $r->{ret} == 0
		  || $r->{err} !~ /failure on connection marked as essential|canceling statement due to|idle-in-transaction timeout/;
		push @cold_failures, ($r->{sqlstate} // 'none') . ' ' . ($r->{err} =~ s/\n.*//sr);
	}
	return ($r, COLD_SESSION_TRIES);
}

# --- A -------------------------------------------------------------------------
# (the tags first: this test's own writes through Citus get no propagation)
$coord->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('t', 10), ('u', 10)});
for my $w (@workers)
{
	# (on that node only: not propagated to the others by Citus)
	on_worker($w, join(";\n", 'SET citus.enable_ddl_propagation = off',
		map { "ALTER DATABASE postgres SET $_ = '1ms'" } @timeouts));
	is( on_worker($w,
			"SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase "
			  . "WHERE d.datname = 'postgres' AND s.setrole = 0 AND s.setconfig::text ~ '1ms'")->{out},
		'1', $w->name . ': premise: the database has the 1 ms settings');
}
is($coord->safe_psql('postgres', "SELECT current_setting('statement_timeout')"), '0',
	'premise: the coordinator has none of them');

# 40 refills through Citus (step 10, no reserve): each writes the workers'
# copies of leaf_alloc through sessions of their database
my ($r, $tries) = until_warm(sub { try_sql($coord, 'postgres', "SELECT leaf_segment_next('t') FROM generate_series(1, 400)") });
my @coord_ids = split /\n/, $r->{out};
is(scalar(@coord_ids), 400, "A: the coordinator's refills through Citus go on: 400 IDs ($tries tries)") or diag $r->{err};
# the same from a worker node: its refills write the other worker's copy
($r, $tries) = until_warm(sub { on_worker($workers[0], "SELECT leaf_segment_next('t') FROM generate_series(1, 200)") });
my @worker_ids = split /\n/, $r->{out};
is(scalar(@worker_ids), 200, "A: a worker node's refills through Citus go on as well ($tries tries)") or diag $r->{err};
# uniqueness over both nodes (a range reserved for both would repeat here)
my %seen;
my @twice = grep { $seen{$_}++ } @coord_ids, @worker_ids;
is(scalar(@twice), 0, 'A: no ID twice over the coordinator and the worker (' . scalar(keys %seen) . ' distinct)')
  or diag "twice: @twice[0 .. 9]";
# (a remote session's first statements, before the SETs, still run under
# the database's settings: on a cold session a refill can fail and is retried)
my $log = slurp_file($coord->logfile) . slurp_file($workers[0]->logfile);
my $failed = () = $log =~ /refill of tag "t" failed/g;
note("A: $failed refills failed and were retried");

# --- B -------------------------------------------------------------------------
for my $w (@workers)
{
	on_worker($w, join(";\n", 'SET citus.enable_ddl_propagation = off',
		map { "ALTER DATABASE postgres SET $_ = " . (/timeout/ ? "'1ms'" : 'on') } @unfixable));
}
$r = try_sql($coord, 'postgres', "SELECT leaf_segment_next('u')");
isnt($r->{sqlstate}, undef, "B: premise: with @unfixable for the database, a refill through Citus fails")
  or diag $r->{out};
# the documented pin: the role the workers (and Citus' sessions) connect as
my $su = $coord->safe_psql('postgres', 'SELECT current_user');
for my $w (@workers)
{
	on_worker($w, join(";\n", 'SET citus.enable_ddl_propagation = off',
		map { "ALTER ROLE $su SET $_ = " . (/timeout/ ? '0' : 'off') } @unfixable));
}
($r, $tries) = until_warm(sub { try_sql($coord, 'postgres',
	"SELECT count(DISTINCT id) FROM (SELECT leaf_segment_next('u') AS id FROM generate_series(1, 200)) x") });
is($r->{out}, '200', "B: with the role's own settings on each node, the refills go on ($tries tries)") or diag $r->{err};

# --- C -------------------------------------------------------------------------
# One node's copies of tag t set back (an edit of its shards, as a restore of
# one node could leave them): that node has issued nothing of t, so no mark of
# its own stops a range from 1 there. Its refill is refused (XX001, the guard
# of every copy), and no ID is issued twice over the three nodes.
my $shard_sql = "SELECT shard_name(t, shardid) FROM pg_dist_shard, "
  . "to_regclass('leaf_id_catalog.%s') AS t WHERE logicalrelid OPERATOR(pg_catalog.=) t";
my $alloc_shard = on_worker($workers[1], sprintf($shard_sql, 'leaf_alloc'))->{out};
my $encoding_shard = on_worker($workers[1], sprintf($shard_sql, 'leaf_alloc_encoding'))->{out};
$r = on_worker($workers[1], join(";\n",
	'SET citus.enable_manual_changes_to_shards = on',
	"UPDATE $alloc_shard SET max_id = 0 WHERE biz_tag = 't'",
	"UPDATE $encoding_shard SET reserved_end = 0 WHERE biz_tag = 't'",
	"SELECT a.max_id, e.reserved_end FROM $alloc_shard a JOIN $encoding_shard e USING (biz_tag) WHERE biz_tag = 't'"));
is($r->{out}, '0|0', "C: premise: the second worker's copies of t say max_id 0 and reserved_end 0") or diag $r->{err};
cmp_ok($coord->safe_psql('postgres', "SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 't'"),
	'>=', 600, "C: premise: the coordinator's copy says what was reserved");
# (worker0's database still has A's 1 ms timeouts: the refill's session
# there may be cold, as in A)
($r, $tries) = until_warm(sub { on_worker($workers[1], "SELECT leaf_segment_next('t') FROM generate_series(1, 20)") });
my @stale_ids = grep { /^\d+$/ } split /\n/, $r->{out};
is($r->{sqlstate}, 'XX001', "C: a refill on the node whose copies were set back is refused (XX001, $tries tries)")
  or diag "$r->{out} $r->{err}";
%seen = ();
@twice = grep { $seen{$_}++ } @coord_ids, @worker_ids, @stale_ids;
is(scalar(@twice), 0, 'C: no ID twice over the three nodes (' . scalar(@stale_ids) . ' from the set-back node)')
  or diag "twice: @twice[0 .. 9]";

$_->stop for (@workers, $coord);
note 'failed tries of a cold session: ' . (join(' | ', @cold_failures) || 'none');
is(scalar(grep { /^XX000 / } @cold_failures), 0,
	'a cold remote session\'s failure reaches the callers with a SQLSTATE of its own, never XX000')
  or diag explain \@cold_failures;
done_testing();
