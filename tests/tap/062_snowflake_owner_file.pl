# leaf_id snowflake mode: the owner file (Leaf's local worker-id file).
#
# A restart of one data directory in one boot keeps its owner token
# ($PGDATA/pgsql_tmp_leaf_id_owner), so it holds its leaf_worker row without
# the registry write a takeover needs (on Citus: while a node is down; see
# tests/citus/206 and 207). No copy may inherit the token, or a copy would
# pass the registry's owner check beside its original:
#  - a file-level copy of the stopped data directory (the owner file
#    included, as with cp -a or a volume snapshot), started beside the
#    original, gets a token of its own;
#  - a pg_basebackup copy has no owner file at all (names starting with
#    pgsql_tmp are skipped), and a new token;
#  - the original, restarted after each copy was made, keeps its token;
#  - the data directory restored in place (an older start's files copied
#    back into the same directory, same boot and port, as after rolling a
#    volume back) gets a new token: the start nonce in the file is not the
#    one the record outside the data directory holds. Its segment reserve
#    file (on Citus) is bound to the token and so is void too.
#  - leaf_id_reset_cache() removes the database's segment reserve file.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SegmentTap qw(try_sql);
use SnowflakeTap;
use Test::More;

my $conf = "log_min_messages = warning\nlc_messages = 'C'\nleaf_id.node_name = 'one-name'\n";
my $orig = PostgreSQL::Test::Cluster->new('ownerfile');
$orig->init(allows_streaming => 1);
$orig->append_conf('postgresql.conf', "shared_preload_libraries = 'leaf_id'\n$conf");
$orig->start;
$orig->safe_psql('postgres', 'CREATE EXTENSION leaf_id');
my $file = 'pgsql_tmp_leaf_id_owner';

sub token_of
{
	my ($node) = @_;
	my $r = try_sql($node, 'postgres', 'SELECT leaf_snowflake_next()');
	die "no snowflake ID on " . $node->name . ": $r->{err}" if $r->{ret} != 0;
	return $node->safe_psql('postgres', 'SELECT owner_token FROM leaf_id_catalog.leaf_worker WHERE worker_id = 0');
}

my $token = token_of($orig);
like($token, qr/^\d+$/, 'the original holds worker id 0 with a token');
ok(-f $orig->data_dir . "/$file", 'the data directory has the owner file');
like(slurp_file($orig->data_dir . "/$file"), qr/^token=$token$/m, 'the file names this lifetime\'s token');

# --- a file-level copy, made while the original is stopped after a crash ----
$orig->stop('immediate');
$orig->backup_fs_cold('cold');
my $cold = PostgreSQL::Test::Cluster->new('ownerfile_cold');
$cold->init_from_backup($orig, 'cold');
like(slurp_file($cold->data_dir . "/$file"), qr/^token=$token$/m,
	'premise: the file-level copy has the original\'s owner file');
# the copy starts on the original's own port while the original is stopped:
# boot, port and system identifier are the original's, only the data
# directory (its device and inode) tells them apart
my $cold_port = $cold->port;
$cold->append_conf('postgresql.conf', 'port = ' . $orig->port . "\n");
$cold->{_port} = $orig->port;
$cold->start;
my $cold_token = token_of($cold);
like($cold_token, qr/^\d+$/, 'the file-level copy, on the original\'s port, holds its copy of the row');
isnt($cold_token, $token, 'the file-level copy did not inherit the token (another data directory)');
ok(!$cold->log_contains(qr/keeps owner token/), 'and its log does not say it kept one');
like(slurp_file($cold->data_dir . "/$file"), qr/^token=$cold_token$/m, 'its owner file now names its own token');
$cold->stop;
$cold->append_conf('postgresql.conf', "port = $cold_port\n");
$cold->{_port} = $cold_port;
$orig->start;
is(token_of($orig), $token, 'the original, restarted, keeps its token');

# --- a pg_basebackup copy -----------------------------------------------------
$orig->backup('base');
my $base = PostgreSQL::Test::Cluster->new('ownerfile_base');
$base->init_from_backup($orig, 'base');
ok(!-e $base->data_dir . "/$file", 'a pg_basebackup copy has no owner file');
$base->start;
my $base_token = token_of($base);
ok($base_token ne $token && $base_token ne $cold_token, 'the pg_basebackup copy holds its row with a token of its own');
$base->stop;

$orig->restart;
is(token_of($orig), $token, 'the original, restarted once more, still keeps its token');

# --- a restore in place ---------------------------------------------------------
$orig->stop;
my $saved = PostgreSQL::Test::Utils::tempdir() . '/saved';
system('cp', '-a', $orig->data_dir, $saved) == 0 or die "cp -a: $?";
$orig->start;
is(token_of($orig), $token, 'after the files were saved, a restart keeps the token');
$orig->stop;
system('sh', '-c', 'rm -rf "$1"/* && cp -a "$2"/. "$1"/', 'sh', $orig->data_dir, $saved) == 0
  or die "restore in place: $?";
like(slurp_file($orig->data_dir . "/$file"), qr/^token=$token$/m,
	'premise: the restored owner file names the token, from the same directory, boot and port');
$orig->start;
my $restored_token = token_of($orig);
like($restored_token, qr/^\d+$/, 'the data directory restored in place holds its row');
isnt($restored_token, $token, 'restored in place, it did not keep the token of the later start');
$orig->restart;
is(token_of($orig), $restored_token, 'and a plain restart after that keeps the new token');

# --- leaf_id_reset_cache() drops the segment reserve file -------------------------
my $dboid = $orig->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'postgres'");
my $reserve = $orig->data_dir . "/pgsql_tmp_leaf_id_reserve_$dboid";
PostgreSQL::Test::Utils::append_to_file($reserve, "leaf_id segment reserve v1 token=$restored_token\nend\n");
$orig->safe_psql('postgres', 'SELECT leaf_id_reset_cache()');
ok(!-e $reserve, 'leaf_id_reset_cache() removed the database\'s segment reserve file');
$orig->stop;
done_testing();
