# leaf_id on Citus: physical copies of a node.
#
# A promoted standby of worker1 (while worker1 is alive) and a pg_basebackup
# clone of worker2 started as a server of its own (while worker2 is alive).
# Each copy listens on 127.0.0.2 with the port of its original, so it shares
# the original's default node identity (system identifier and port) and
# believes, from its copied Citus metadata, that it is that node.
#  - A copy never issues snowflake IDs with the worker id its original holds:
#    it sees a live holder (another owner token renewing the row) or its
#    guarded update is refused by the other copies of the reference table.
#  - The originals keep issuing snowflake and segment IDs.
#  - No segment or snowflake ID is issued twice across all five servers.
#  - The coordinator killed meanwhile: the originals go on (renewals on a
#    majority of the copies), the copies stay refused.
#  - With the copies gone, a restarted original gets its own id back.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use lib "$FindBin::RealBin/../tap";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use CitusTap;
use SegmentTap qw(try_sql);
use SnowflakeTap qw(default_node_name);

my ($coord, @workers) = citus_cluster(
	conf => "leaf_id.refill_timeout = 8000\n",
	init => { allows_streaming => 1 });
my ($w1, $w2) = @workers;
$coord->safe_psql('postgres', q{INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('copy', 10)});
my %wid = map { $_->name => leaf_worker_id_of($_) } ($coord, $w1, $w2);

# A copy of $orig: streaming standby or plain clone, on 127.0.0.2 with the
# original's port and its own socket directory.
sub copy_of
{
	my ($orig, $name, %opt) = @_;
	$orig->backup("${name}_backup");
	my $copy = PostgreSQL::Test::Cluster->new($name, port => $orig->port, own_host => 1);
	$copy->init_from_backup($orig, "${name}_backup", has_streaming => $opt{standby} ? 1 : 0);
	$copy->append_conf('postgresql.conf', "listen_addresses = '127.0.0.2'\n");
	# Citus made a key for SSL; the copy of the backup loosened its mode
	my $key = $copy->data_dir . '/server.key';
	chmod(0600, $key) if -e $key;
	$copy->start;
	return $copy;
}

# Draw $n IDs of a mode on $node (a plain SELECT: what a copy returns was
# issued, whatever its diverged tables would do with it); returns the
# try_sql result, the IDs in {out}.
sub draw
{
	my ($node, $label, $mode, $n) = @_;
	my $f = $mode eq 'segment' ? q{leaf_segment_next('copy')} : 'leaf_snowflake_next()';
	return try_sql($node, 'postgres', "SELECT $f FROM generate_series(1, $n)");
}

my $standby = copy_of($w1, 'w1copy', standby => 1);
$w1->wait_for_catchup($standby, 'replay', $w1->lsn('flush'));
my $clone = copy_of($w2, 'w2copy');
is(default_node_name($standby), default_node_name($w1), 'the standby shares worker1\'s default node name');
is(default_node_name($clone), default_node_name($w2), 'the clone shares worker2\'s default node name');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby was not promoted';

# The copies and the originals draw at the same time, for about 12 s (longer
# than a lease plus the watch of a claim).
my %issued = map { $_ => 0 } qw(w1copy w2copy worker1 worker2 coord);
my %refused = map { $_ => [] } keys %issued;
my %copy_snowflake_of = (w1copy => [], w2copy => []);
my %ids = (segment => [], snowflake => []);
my $deadline = time + 12;
while (time < $deadline)
{
	for my $pair ([ $w1, 'worker1' ], [ $w2, 'worker2' ], [ $coord, 'coord' ],
		[ $standby, 'w1copy' ], [ $clone, 'w2copy' ])
	{
		my ($n, $label) = @$pair;
		for my $mode ('snowflake', 'segment')
		{
			# a copy's IDs are kept in its own, diverged tables: read them back
			my $r = draw($n, $label, $mode, 20);
			if ($r->{ret} == 0)
			{
				$issued{$label}++;
				push @{ $ids{$mode} }, split /\n/, $r->{out};
				push @{ $copy_snowflake_of{$label} }, split /\n/, $r->{out}
				  if $label =~ /copy/ && $mode eq 'snowflake';
			}
			else { push @{ $refused{$label} }, "$mode: " . ($r->{sqlstate} // 'none') . ' ' . $r->{err} }
		}
	}
}
note "batches issued: " . join(', ', map { "$_=$issued{$_}" } sort keys %issued);
note "first refusal of $_: " . ($refused{$_}[0] // '-') for sort keys %refused;

for my $label ('worker1', 'worker2', 'coord')
{
	is(scalar @{ $refused{$label} }, 0, "$label issued all the while (nothing refused)")
	  or diag explain $refused{$label};
}
my %copy_wid;
for my $id (map { @$_ } values %copy_snowflake_of)
{
	$copy_wid{ ($id >> 12) & 1023 }++;
}
ok(!exists $copy_wid{ $wid{worker1} } && !exists $copy_wid{ $wid{worker2} },
	'no copy issued a snowflake ID with its original\'s worker id')
  or diag explain \%copy_wid;
my %snow_calls = map { $_ => 0 } qw(w1copy w2copy);
for my $copy ('w1copy', 'w2copy')
{
	my @snow = grep { /^snowflake/ } @{ $refused{$copy} };
	my %states;
	$states{ (split / /, $_)[1] }++ for @snow;
	note "$copy: snowflake refusals by SQLSTATE: " . join(', ', map { "$_=$states{$_}" } sort keys %states);
	cmp_ok(scalar @snow, '>', 0, "premise: $copy made snowflake calls");
	is(scalar(@{ $copy_snowflake_of{$copy} }), 0, "$copy: none of its snowflake calls issued an ID");
	is_deeply([ sort grep { $_ ne '55006' } keys %states ], [],
		"$copy: every snowflake call was refused with 55006 (its original holds the worker id)")
	  or diag explain \@snow;
}

# Every batch that succeeded returned its IDs: none twice, over all five
# servers.
my $dups = 0;
for my $mode ('segment', 'snowflake')
{
	my %n;
	$n{$_}++ for @{ $ids{$mode} };
	$dups += grep { $n{$_} > 1 } keys %n;
}
cmp_ok(scalar @{ $ids{segment} }, '>', 0, 'premise: segment IDs were issued');
is($dups, 0, 'no segment or snowflake ID was issued twice by the five servers');

# The coordinator dies while the copies run. The originals renew their
# leases on a majority of the copies of leaf_worker (their own and the other
# worker's) and go on; a copy still cannot take a row (a takeover needs every
# copy, and the originals keep their leases live) and stays refused.
$coord->kill9;
my %down = map { $_ => { ok => 0, refused => [] } } qw(worker1 worker2 w1copy w2copy);
$deadline = time + 8;
while (time < $deadline)
{
	for my $pair ([ $w1, 'worker1' ], [ $w2, 'worker2' ], [ $standby, 'w1copy' ], [ $clone, 'w2copy' ])
	{
		my ($n, $label) = @$pair;
		my $r = draw($n, $label, 'snowflake', 20);
		if ($r->{ret} == 0)
		{
			$down{$label}{ok}++;
			push @{ $ids{snowflake} }, split /\n/, $r->{out};
		}
		else { push @{ $down{$label}{refused} }, ($r->{sqlstate} // 'none') . ' ' . ($r->{err} =~ s/\n.*//sr) }
	}
}
note "coordinator dead: $_ issued $down{$_}{ok} batches, refusals: " . scalar(@{ $down{$_}{refused} })
  . ', first: ' . ($down{$_}{refused}[0] // '-') for sort keys %down;
for my $label ('worker1', 'worker2')
{
	is(scalar @{ $down{$label}{refused} }, 0, "coordinator dead: ${label}'s snowflake goes on, nothing refused");
}
for my $label ('w1copy', 'w2copy')
{
	is($down{$label}{ok}, 0, "coordinator dead: $label issues no snowflake ID");
}
my %n;
$n{$_}++ for @{ $ids{snowflake} };
is(scalar(grep { $n{$_} > 1 } keys %n), 0, 'no snowflake ID issued twice, the coordinator\'s death included');
ok(start_after_kill9($coord), 'the coordinator starts again');

# With the copies gone, a restart of an original gets its own id back.
$standby->stop('immediate');
$clone->stop('immediate');
$w1->restart;
my $r;
for (1 .. 100)
{
	$r = try_sql($w1, 'postgres', 'SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id');
	last if $r->{ret} == 0;
	usleep(200_000);
}
is($r->{out}, $wid{worker1}, 'worker1 restarted gets its own worker id back')
  or diag $r->{err}, "\n", $coord->safe_psql('postgres',
	q{SELECT nodeport, result FROM run_command_on_placements('leaf_id_catalog.leaf_worker', $$SELECT string_agg(concat_ws('=', worker_id, owner_token, last_timestamp), ',' ORDER BY worker_id) FROM %s$$) ORDER BY nodeport}),
	"\n", join("\n", map { $_->name . ': ' . $_->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts') } ($coord, $w1, $w2));
is(draw($w2, 'worker2', 'snowflake', 10)->{ret}, 0, 'worker2 still issues');

$_->stop for ($coord, @workers);
done_testing();
