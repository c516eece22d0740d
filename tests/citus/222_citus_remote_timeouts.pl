# leaf_id on Citus (#27 item 5): a database owner's settings on another node do
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
my $r = try_sql($coord, 'postgres', "SELECT leaf_segment_next('t') FROM generate_series(1, 400)");
my @coord_ids = split /\n/, $r->{out};
is(scalar(@coord_ids), 400, "A: the coordinator's refills through Citus go on: 400 IDs") or diag $r->{err};
# the same from a worker node: its refills write the other worker's copy
$r = on_worker($workers[0], "SELECT leaf_segment_next('t') FROM generate_series(1, 200)");
my @worker_ids = split /\n/, $r->{out};
is(scalar(@worker_ids), 200, "A: a worker node's refills through Citus go on as well") or diag $r->{err};
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
$r = try_sql($coord, 'postgres',
	"SELECT count(DISTINCT id) FROM (SELECT leaf_segment_next('u') AS id FROM generate_series(1, 200)) x");
is($r->{out}, '200', "B: with the role's own settings on each node, the refills go on") or diag $r->{err};

$_->stop for (@workers, $coord);
done_testing();
