# leaf_id opaque IDs: a session encodes an opaque tag's counter
# values in runs and hands the rest out on its next calls
# (src/segment/opaque_runs.rs). A run must never outlive its tag: after
# another session drops and creates the extension again (new leaf_alloc, a
# new domain of the same name with a new key, the same tag name), a session
# that still holds a run of the old tag must hand out only IDs of the new
# tag. It also checks that runs of two sessions and two tags drawn in turn
# never give an ID twice, and that a session's unused values are gaps in
# the counter, never reissued: a new session gets no counter value of an
# ended session's runs (the end of its last run known from the run sizes,
# 1, 2, 4, then 8), and starts above that run's end. Last, with every statement and the worker's
# messages logged, it checks that no domain's key reaches the server log or
# pg_settings.

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap;
use Test::More;

my $node = leaf_node(
	'opaque_runs', q{
log_statement = 'all'
log_min_messages = debug1
log_error_verbosity = verbose
});
my $setup = q{
SELECT leaf_opaque_create('runs_domain', bits => 40);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, opaque_domain, opaque_grant) VALUES ('opq', 1, 1000, 'runs_domain', leaf_opaque_grant('runs_domain', 'opq', 1));
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, opaque_domain, opaque_grant) VALUES ('opq2', 1, 1000, 'runs_domain', leaf_opaque_grant('runs_domain', 'opq2', 1));
};
$node->safe_psql('postgres', $setup);

my $decode = sub {
	my @ids = @_;
	return split /\n/,
	  $node->safe_psql('postgres',
		"SELECT leaf_opaque_decode('runs_domain', id) FROM unnest('{"
		  . join(',', @ids)
		  . "}'::bigint[]) WITH ORDINALITY AS t(id, o) ORDER BY o");
};

# --- two sessions, two tags, drawn in turn: every ID once
my ($sa, $sb) = (session($node, 'postgres'), session($node, 'postgres'));
my (%seen, $twice, @a_opq, @b_opq);
for my $i (1 .. 40)
{
	for my $s ([ 'a', $sa ], [ 'b', $sb ])
	{
		for my $tag ('opq', 'opq2')
		{
			my ($out, $err) = session_query($s->[1], "SELECT leaf_segment_next('$tag')");
			die "session $s->[0], $tag: $err" if $err =~ /ERROR/;
			$twice++ if $seen{"$tag $out"}++;
			push @a_opq, $out if $s->[0] eq 'a' && $tag eq 'opq';
			push @b_opq, $out if $s->[0] eq 'b' && $tag eq 'opq';
		}
	}
}
ok(!$twice, '2 sessions x 2 tags x 40 calls in turn: no ID twice');
my @counters = $decode->(@a_opq);
is_deeply([ sort { $a <=> $b } @counters ], \@counters,
	"one session's counters of a tag increase");

# --- a session's unused values are never reissued: session b ends with a
# run of which it handed out only the first two values; none of the values
# its runs took (its unused ones included) go to a new session
my ($out) = session_query($sb, "SELECT leaf_segment_next('opq')");
$seen{"opq $out"}++;
push @b_opq, $out;
$sb->quit;
# b's takes of opq: a run of 1 value, then 2, 4, and 8 (LANES) each after
# (src/segment/opaque_runs.rs), each consecutive counter values, handed out
# in order. Its 41 calls are runs of 1, 2, 4, 8, 8, 8, 8 and the first 2 of
# a last run of 8: that run took 6 values b never handed out.
my @b_counters = $decode->(@b_opq);
my (@b_runs, $runs_as_expected);
{
	my @left = @b_counters;
	my $size = 1;
	$runs_as_expected = 1;
	while (@left)
	{
		my @handed = splice(@left, 0, $size);
		# counters one run handed out: consecutive from its first
		$runs_as_expected = 0
		  if grep { $handed[$_] != $handed[0] + $_ } 0 .. $#handed;
		push @b_runs, [ $handed[0], $handed[0] + $size - 1, scalar @handed ];
		$size *= 2 if $size < 8;
	}
}
ok($runs_as_expected && @b_runs == 8 && $b_runs[-1][2] == 2,
	'premise: b\'s calls came from runs of 1, 2, 4 and 8 values, the last one used 2 of 8')
  or diag explain { counters => \@b_counters };
my $b_end = $b_runs[-1][1];
note "b's last run took counters $b_runs[-1][0] to $b_end; b handed out up to "
  . max_of(@b_counters);
my @fresh = split /\n/,
  $node->safe_psql('postgres', "SELECT leaf_segment_next('opq') FROM generate_series(1, 50)");
ok(!(grep { $seen{"opq $_"} } @fresh), 'a new session reissues none of an ended session\'s handed-out IDs');
my @fresh_counters = $decode->(@fresh);
my @in_b_runs = grep {
	my $c = $_;
	grep { $c >= $_->[0] && $c <= $_->[1] } @b_runs
} @fresh_counters;
ok(!@in_b_runs, 'nor any counter value b\'s runs took, its unused ones included')
  or diag "reissued counters of b's runs: @in_b_runs";
cmp_ok(min_of(@fresh_counters), '>', $b_end,
	'its counters start above the end of the ended session\'s last run');

# --- the extension created anew under session a's run
($out) = session_query($sa, "SELECT leaf_segment_next('opq')");
my ($held) = $decode->($out);
note "session a holds a run after counter $held";
$node->safe_psql('postgres', "DROP EXTENSION leaf_id CASCADE");
$node->safe_psql('postgres', "CREATE EXTENSION leaf_id");
# the same names again, the tag far above the old counters: an ID of the old
# run would decode under the new key to a counter outside the new tag's
# first segment
$node->safe_psql('postgres',
	$setup =~ s/VALUES \('opq', 1, 1000, 'runs_domain', leaf_opaque_grant\('runs_domain', 'opq', 1\)\)/VALUES ('opq', 500000, 1000, 'runs_domain', leaf_opaque_grant('runs_domain', 'opq', 500000))/r);
my @after;
for (1 .. 20)
{
	my ($id, $err) = session_query($sa, "SELECT leaf_segment_next('opq')");
	die "after CREATE EXTENSION: $err" if $err =~ /ERROR/;
	push @after, $id;
}
my @new_counters = $decode->(@after);
my @outside = grep { $_ < 500000 || $_ >= 501000 } @new_counters;
ok(!@outside, 'after DROP/CREATE EXTENSION elsewhere, the session hands out only the new tag\'s IDs')
  or diag "counters under the new key: @new_counters";
is($new_counters[0], 500000, 'and its first ID is the new tag\'s first counter');
$sa->quit;

# --- no key in the log or the settings: errors of every opaque function
# and an encoding change refused by the worker included
$node->safe_psql(
	'postgres', q{
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('rekeyed', 10, 'runs_domain', leaf_opaque_grant('runs_domain', 'rekeyed', 1));
SELECT leaf_segment_next('rekeyed');
});
my @keys = split /\n/,
  $node->safe_psql('postgres', "SELECT encode(key, 'hex') FROM leaf_id_catalog.leaf_opaque_domain");
$node->safe_psql('postgres',
	"UPDATE leaf_id_catalog.leaf_opaque_domain SET key = leaf_id_random_key() WHERE name = 'runs_domain'");
push @keys, split /\n/,
  $node->safe_psql('postgres', "SELECT encode(key, 'hex') FROM leaf_id_catalog.leaf_opaque_domain");
for my $sql (
	"SELECT count(leaf_segment_next('rekeyed')) FROM generate_series(1, 50)",
	"SELECT leaf_opaque_encode('runs_domain', -1)",
	"SELECT leaf_opaque_decode('runs_domain', 1099511627776)",
	"SELECT leaf_opaque_create('runs_domain')",
	"SELECT leaf_opaque_drop('runs_domain')",
	"SELECT leaf_id_opaque_permute(70, '\\x00', 1, false)")
{
	my $r = try_sql($node, 'postgres', $sql);
	ok($r->{sqlstate}, "refused: $sql ($r->{sqlstate})");
}
is(scalar(@keys), 2, 'two keys to look for');
# the premise: what the statements carry reaches the log, so the search
# below would find a key that a statement or message carried (a canary of
# a key's shape, sent in a statement and searched for the same way)
my $canary = '5eed' x 8;
$node->safe_psql('postgres', "SELECT '$canary'::text IS NOT NULL");
my $settings = $node->safe_psql('postgres', 'SELECT string_agg(setting, \' \') FROM pg_settings');
my $log = slurp_file($node->logfile);
ok(index($log, $canary) >= 0, 'premise: a statement carrying a key-shaped canary is in the log');
like($log, qr/statement: SELECT leaf_opaque_encode\('runs_domain', -1\)/, 'premise: the refused statements are logged');
for my $key (@keys)
{
	# the key, its 8-byte halves in hex, and those halves as the
	# little-endian integers the code holds them as
	my @halves = (substr($key, 0, 16), substr($key, 16, 16));
	my @words = map { unpack('Q<', pack('H*', $_)) } @halves;
	my @leaks = grep { index($log, $_) >= 0 || index($settings, $_) >= 0 } $key, @halves, @words;
	ok(!@leaks, 'no part of a key in the server log or pg_settings')
	  or diag "found: @leaks";
}
like($log, qr/55000/, 'the log does hold the refusal of the changed key');

$node->stop;
done_testing();
