# leaf_id snowflake mode: 8 concurrent sessions drawing many IDs at once.
#
# Each session inserts (session, seq_no, leaf_snowflake_next()) for seq_no
# 1..N in one statement; all start together (released by an advisory lock).
# Zero duplicates over all sessions, and each session's IDs strictly increase
# with seq_no. Then the same with pgbench -c 8 (many short statements).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use lib $ENV{LEAF_ID_TAP_ROOT} . '/tests/tap';
use SnowflakeTap;

use constant SESSIONS => 8;
use constant PER_SESSION => 150_000;

my $node = snowflake_node('snowflake_concurrency', <<'CONF', <<'SQL');
log_statement = none
max_connections = 40
CONF
CREATE UNLOGGED TABLE ids (session int NOT NULL, seq_no int NOT NULL, id bigint NOT NULL);
CREATE UNLOGGED TABLE bench (client int NOT NULL, stmt int NOT NULL, g int NOT NULL, id bigint NOT NULL);
SQL
# the worker id is claimed before the race starts
my $worker_id = $node->safe_psql('postgres', 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');

# --- 8 sessions x PER_SESSION in one statement each --------------------------
my $gate = $node->background_psql('postgres');
$gate->query_safe('SELECT pg_advisory_lock(4242)');

my @sessions;
for my $s (1 .. SESSIONS)
{
	my ($out, $err) = ('', '');
	my $sql = "SELECT pg_advisory_lock_shared(4242); SELECT pg_advisory_unlock_shared(4242);\n"
	  . "INSERT INTO ids SELECT $s, g, leaf_snowflake_next() FROM generate_series(1, "
	  . PER_SESSION . ") g;\n";
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $sql ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(300));
	push @sessions, [ $h, \$out, \$err ];
}
# wait until all 8 wait on the gate, then open it
$node->poll_query_until('postgres',
	q{SELECT count(*) = } . SESSIONS . q{ FROM pg_locks WHERE locktype = 'advisory' AND NOT granted})
  or die 'sessions did not reach the gate';
$gate->query_safe('SELECT pg_advisory_unlock(4242)');

my $all_ok = 1;
for my $i (0 .. $#sessions)
{
	my ($h, $out, $err) = @{ $sessions[$i] };
	my $ok = eval { $h->finish; 1 } && $h->result(0) == 0;
	unless ($ok) { $all_ok = 0; $h->kill_kill; diag 'session ' . ($i + 1) . " failed: $$err"; }
}
$gate->quit;
ok($all_ok, SESSIONS . ' sessions each inserted ' . PER_SESSION . ' IDs without error');

is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT id) FROM ids'),
	SESSIONS * PER_SESSION . '|' . SESSIONS * PER_SESSION,
	'all IDs present, zero duplicates');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (
  SELECT id, lag(id) OVER (PARTITION BY session ORDER BY seq_no) AS prev FROM ids) s
WHERE id <= prev}),
	'0',
	'within each session, IDs strictly increase in call order');
is( $node->safe_psql(
		'postgres', qq{SELECT count(*) FROM ids WHERE ((id >> 12) & 1023) <> $worker_id OR id <= 0}),
	'0',
	"every ID is positive and carries worker id $worker_id");
# the sessions really ran at the same time: the ID ranges of sessions
# overlap. (Not all of them pairwise: on a loaded machine with two cores a
# session can be scheduled after another has finished its statement.)
my $overlapping = $node->safe_psql(
	'postgres', q{
WITH r AS (SELECT session, min(id) lo, max(id) hi FROM ids GROUP BY session)
SELECT count(*) FROM r WHERE EXISTS (
  SELECT FROM r o WHERE o.session <> r.session AND o.lo < r.hi AND r.lo < o.hi)});
note "sessions whose ID range overlaps another's: $overlapping of " . SESSIONS;
cmp_ok($overlapping, '>=', 2, 'the sessions ran concurrently (ID ranges of sessions overlap)');
note 'status: ' . snowflake_status($node, 'rollback_events, sequence_waits');
is(snowflake_status($node, 'rollback_events'),
	'0', 'no false clock-rollback events under concurrency');

# --- pgbench -c 8: many short transactions -----------------------------------
# :n counts the statements of each client (pgbench variables live as long as
# the client), so (stmt, g) is each client's call order.
PostgreSQL::Test::Utils::append_to_file($node->basedir . '/bench.sql', <<'BENCH');
\set n :n + 1
INSERT INTO bench VALUES (:client_id, :n, 1, leaf_snowflake_next());
\set n :n + 1
INSERT INTO bench SELECT :client_id, :n, g, leaf_snowflake_next() FROM generate_series(1, 50) g;
BENCH
my ($bout, $berr) = ('', '');
my $ok = IPC::Run::run(
	pgbench_command($node, $node->basedir . '/bench.sql',
		'-c', SESSIONS, '-j', '2', '-T', '5', '-M', 'prepared', '-D', 'n=0'),
	'>', \$bout, '2>', \$berr, IPC::Run::timeout(120));
ok($ok, 'pgbench -c 8 ran without errors') or diag $berr;
my $bench = $node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT id), count(DISTINCT client) FROM bench');
my ($n, $distinct, $clients) = split /\|/, $bench;
note "pgbench: $n IDs from $clients clients";
cmp_ok($n, '>', 10_000, 'pgbench inserted a fair number of IDs');
is($distinct, $n, 'pgbench: zero duplicates');
is($clients, SESSIONS, 'pgbench: all 8 clients inserted');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (
  SELECT id, lag(id) OVER (PARTITION BY client ORDER BY stmt, g) AS prev FROM bench) s
WHERE id <= prev}),
	'0',
	'pgbench: within each client, IDs strictly increase');
is($node->safe_psql('postgres', 'SELECT count(*) FROM (SELECT client, stmt, g FROM bench GROUP BY 1, 2, 3 HAVING count(*) > 1) s'),
	'0', 'pgbench: (client, stmt, g) identifies each call');
is($node->safe_psql('postgres', 'SELECT count(*) FROM bench b JOIN ids i USING (id)'),
	'0', 'pgbench IDs do not repeat any ID of the first round');

$node->stop;
done_testing();
