# Adopting an existing sequence under live traffic (README, "Adopting an
# existing sequence"): pgbench (4 clients, prepared statements) inserts into a
# serial table, an identity table and a bigserial table through their
# defaults, while leaf_segment_adopt_sequence() switches the first two to
# segment tags and leaf_snowflake_adopt_sequence() the third to snowflake IDs.
# No insert fails (a key drawn twice would be a primary key violation), every
# insert is there, and the inserts after the switch drew from leaf_id.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use SnowflakeTap qw(pgbench_command);
use Test::More;
use Time::HiRes qw(usleep time);

my $node = leaf_node('adopt');
$node->safe_psql('postgres', q{
CREATE TABLE t_serial (id serial PRIMARY KEY, c int);
CREATE TABLE t_identity (id bigint GENERATED ALWAYS AS IDENTITY (CACHE 20) PRIMARY KEY, c int);
CREATE TABLE t_flake (id bigserial PRIMARY KEY, c int);
-- rows from before, and a key put above the sequence by hand (as setval or
-- an explicit insert leaves it), far above what the traffic below draws from
-- the sequence before the adoption (at 5000 the sequence itself reached it
-- when the adoption came late, and pgbench failed on the plain serial)
INSERT INTO t_serial (c) SELECT 0 FROM generate_series(1, 1000);
INSERT INTO t_serial (id, c) VALUES (1000000, 0);
INSERT INTO t_identity (c) SELECT 0 FROM generate_series(1, 1000);
INSERT INTO t_flake (c) SELECT 0 FROM generate_series(1, 1000);
});

my $script = $node->basedir . '/insert.sql';
PostgreSQL::Test::Utils::append_to_file($script, <<'SQL');
INSERT INTO t_serial (c) VALUES (1);
INSERT INTO t_identity (c) VALUES (1);
INSERT INTO t_flake (c) VALUES (1);
SQL
my ($clients, $per_client) = (4, 6000);   # long enough for the adoptions to land inside it on a busy machine
my ($out, $err) = ('', '');
my $h = IPC::Run::start(
	pgbench_command($node, $script, '-c', $clients, '-j', '2', '-t', $per_client, '-M', 'prepared'),
	'>', \$out, '2>', \$err, IPC::Run::timeout(180));

sub traffic
{
	return $node->safe_psql('postgres', 'SELECT count(*) FROM t_flake WHERE c = 1');
}
ok(wait_until(60, sub { traffic() >= 1000 }), 'premise: traffic is running');

# one transaction each, as an operator would run them, during the traffic
my $first_serial = $node->safe_psql('postgres',
	q{SELECT leaf_segment_adopt_sequence('t_serial_id_seq', 't_serial', 10)});
my $first_identity = $node->safe_psql('postgres',
	q{SELECT leaf_segment_adopt_sequence(pg_get_serial_sequence('t_identity', 'id')::regclass, 't_identity', 10)}
);
my $smallest_flake = $node->safe_psql('postgres',
	q{SELECT leaf_snowflake_adopt_sequence('t_flake_id_seq')});
my $during = traffic();
cmp_ok($during, '<', $clients * $per_client, 'premise: the adoptions happened while the traffic ran');
note "adopted after $during rows of traffic: t_serial from $first_serial, t_identity from $first_identity";

ok($h->finish, 'pgbench finished: no insert failed (no key collided)')
  or diag "pgbench stderr: $err";
unlike($err, qr/duplicate key|aborted/, 'no duplicate key error, no aborted client');

my $total = 1000 + $clients * $per_client;
is($node->safe_psql('postgres', 'SELECT count(*) FROM t_serial'), $total + 1, 't_serial: every insert is there');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t_identity'), $total, 't_identity: every insert is there');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t_flake'), $total, 't_flake: every insert is there');

cmp_ok($first_serial, '>', 1000000, 't_serial: the tag starts above the largest key, also the one above the sequence');
is( $node->safe_psql('postgres', "SELECT count(*) FROM t_serial WHERE id < $first_serial AND id > 1000000"),
	'0', 't_serial: no key between the largest old one and the tag\'s first');
cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM t_serial WHERE id >= $first_serial"),
	'>', 0, 't_serial: inserts after the switch drew from the tag');
cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM t_identity WHERE id >= $first_identity"),
	'>', 0, 't_identity: inserts after the switch drew from the tag');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM t_serial WHERE id >= (SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 't_serial')}),
	'0', 't_serial: every new key lies in a range the tag reserved');
cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM t_flake WHERE id >= $smallest_flake"),
	'>', 0, 't_flake: inserts after the switch got snowflake IDs');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM t_flake, leaf_snowflake_decode(id) d WHERE id >= $smallest_flake AND d.worker_id <> (SELECT worker_id FROM leaf_snowflake_status)"),
	'0', 't_flake: the new keys decode as this server\'s snowflake IDs');
is( $node->safe_psql('postgres',
		q{SELECT attidentity FROM pg_attribute WHERE attrelid = 't_identity'::regclass AND attname = 'id'}),
	'', 't_identity: the identity was dropped for the default');

# a sequence still at its minimum (never called, or called once) was refused
# with 22023 (MAXVALUE 1 would not be above MINVALUE 1); adopted now, its
# frozen sequence gives nothing the tag issues
for my $given (0, 1)
{
	my $t = "t_min$given";
	$node->safe_psql('postgres', "CREATE TABLE $t (id bigserial PRIMARY KEY, c int)");
	$node->safe_psql('postgres', "INSERT INTO $t (c) VALUES (0)") if $given;
	my $r = try_sql($node, 'postgres', "SELECT leaf_segment_adopt_sequence('${t}_id_seq', '$t', 10)");
	is($r->{ret}, 0, "$t: a sequence that gave $given value(s) is adopted") or diag $r->{err};
	my $first = $r->{out};
	cmp_ok($first, '>', $given, "$t: the tag starts above it ($first)");
	$node->safe_psql('postgres', "INSERT INTO $t (c) SELECT 1 FROM generate_series(1, 30)");
	$r = try_sql($node, 'postgres', "SELECT nextval('${t}_id_seq')");
	ok($r->{ret} != 0 || ($r->{out} < $first),
		"$t: the frozen sequence gives no value the tag issues (" . ($r->{out} || $r->{sqlstate}) . ')');
	is($node->safe_psql('postgres', "SELECT count(*) FROM $t"), 30 + $given, "$t: every insert is there");
}

# Adoption and who may draw: nextval on the sequence needed
# USAGE or UPDATE on it, the adopted tag has no draw_role, so every role that
# may run leaf_segment_next can draw it: the adoption says so with a WARNING
# naming who had the privilege, and a hint; not when PUBLIC had it.
$node->safe_psql('postgres', q{
CREATE ROLE seq_app;
CREATE TABLE t_granted (id bigserial PRIMARY KEY, c int);
GRANT USAGE ON SEQUENCE t_granted_id_seq TO seq_app;
CREATE TABLE t_public (id bigserial PRIMARY KEY, c int);
GRANT USAGE ON SEQUENCE t_public_id_seq TO PUBLIC;
});
my $r = try_sql($node, 'postgres', q{SELECT leaf_segment_adopt_sequence('t_granted_id_seq', 't_granted', 10) > 0});
is($r->{out}, 't', 'a sequence with USAGE for one role is adopted') or diag $r->{err};
like($r->{err}, qr/WARNING:  01000: every role that may run leaf_segment_next may now draw leaf_id tag "t_granted"; nextval on sequence (public\.)?t_granted_id_seq needed USAGE or UPDATE \(held by: [^)]*seq_app[^)]*\)/,
	'it warns that the tag is open to every role, naming who held USAGE');
like($r->{err}, qr/HINT:  .*draw_role/, 'with a hint to set a draw_role');
$r = try_sql($node, 'postgres', q{SELECT leaf_segment_adopt_sequence('t_public_id_seq', 't_public', 10) > 0});
is($r->{out}, 't', 'a sequence with USAGE for PUBLIC is adopted') or diag $r->{err};
unlike($r->{err}, qr/WARNING/, 'without a warning: PUBLIC could draw it before');

$node->stop;
done_testing();
