# Helpers for the hostile-name security tests (tests/tap/063 on one server,
# tests/citus/212 on Citus): a database owner, mallory, who is not a
# superuser, renames the schema leaf_id lives in (public, which belongs to
# pg_database_owner) to names built to break out of SQL text, and plants a
# function that counts every run as a superuser in a sequence (a sequence,
# because its count survives the rollback of the statement that ran it).
package HostileNames;

use strict;
use warnings;

use Exporter 'import';
use Test::More;

our @EXPORT = qw(HOSTILE_SCHEMA_NAMES HOSTILE_TAGS quote_ident plant_mallory
  superuser_runs hostile_round);

# Each at most 63 bytes (longer names are cut by the server).
use constant HOSTILE_SCHEMA_NAMES => (
	q{a'b},
	q{x$leaf_id$y},
	q{a\\b},
	q{select},
	q{x' AS a, mallory.pwn('literal') AS b --},
	q{x'::pg_catalog.text), (mallory.pwn('paren'))::pg_catalog.text --},
	q{x$leaf_id$; SELECT mallory.pwn('dollar'); --},
	q{y" $$; SELECT mallory.pwn('dq'); --},
	substr(q{q'"\\$leaf_id$} x 5, 0, 63),
);

use constant HOSTILE_TAGS => (q{t'ag}, q{t$leaf_id$ag}, q{t\\ag}, q{t"ag'); SELECT 1; --});

# An identifier quoted as the server would (always quoted).
sub quote_ident
{
	my ($name) = @_;
	$name =~ s/"/""/g;
	return qq{"$name"};
}

# A string literal (standard_conforming_strings on).
sub quote_literal
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return qq{'$s'};
}

# mallory, a plain login role, owns database postgres; her schema holds
# pwn(), which, run by a superuser, bumps mallory.superuser_runs and tries to
# make her a superuser. $prefix: SQL run first in each statement (Citus: keep
# local).
sub plant_mallory
{
	my ($node, $prefix) = @_;
	$prefix //= '';
	$node->safe_psql('postgres', $prefix . q{
CREATE ROLE mallory LOGIN;
ALTER DATABASE postgres OWNER TO mallory;
});
	$node->safe_psql('postgres', $prefix . q{
SET ROLE mallory;
CREATE SCHEMA mallory;
CREATE SEQUENCE mallory.superuser_runs;
GRANT USAGE ON SCHEMA mallory TO PUBLIC;
GRANT USAGE, UPDATE, SELECT ON SEQUENCE mallory.superuser_runs TO PUBLIC;
CREATE FUNCTION mallory.pwn(what text DEFAULT '') RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
    PERFORM pg_catalog.nextval('mallory.superuser_runs');
    BEGIN
      EXECUTE 'ALTER ROLE mallory SUPERUSER';
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
  END IF;
  RETURN 'pwned';
END $$;
GRANT EXECUTE ON FUNCTION mallory.pwn(text) TO PUBLIC;
RESET ROLE;
});
	return;
}

# How often pwn() ran as a superuser on $node, and whether mallory is one.
sub superuser_runs
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		q{SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM mallory.superuser_runs)
		  || ',' || (SELECT CASE WHEN rolsuper THEN 't' ELSE 'f' END FROM pg_roles WHERE rolname = 'mallory')});
}

# One round on $node (the node mallory renames the schema on; on Citus the
# rename reaches every node): rename from $from to $to as mallory, add a tag
# (step 10) and draw across its refills and from the hostile tags, restart
# the leaf_id workers of @all (each claims its worker id again under the new
# name), draw snowflake IDs, and let renewals run. Returns the new name.
sub hostile_round
{
	my (%o) = @_;
	my ($node, $from, $to, $round) = @o{qw(node from to round)};
	my @all = @{ $o{all} // [$node] };
	my $label = $o{label} // $to;
	my $qs = quote_ident($to);
	my ($ret, $out, $err) = $node->psql('postgres',
		'SET ROLE mallory; ALTER SCHEMA ' . quote_ident($from) . " RENAME TO $qs");
	is($ret, 0, "$label: mallory renamed the schema") or diag $err;
	for my $n (@all)
	{
		$n->safe_psql('postgres',
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type LIKE 'leaf_id % worker'");
	}
	$node->safe_psql('postgres',
		"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('round$round', 10)");
	my $tags = join ', ', map { quote_literal($_) } HOSTILE_TAGS;
	for my $n (@all)
	{
		my $sql = qq{
SET search_path = pg_catalog;
SELECT count(DISTINCT $qs.leaf_segment_next('round$round')) FROM generate_series(1, 200);
SELECT count(DISTINCT (u.tag, $qs.leaf_segment_next(u.tag))) FROM unnest(ARRAY[$tags]) AS u(tag), generate_series(1, 30);
SELECT count(DISTINCT $qs.leaf_snowflake_next()) FROM generate_series(1, 200);
};
		my ($r, $o2, $e) = $n->psql('postgres', $sql, timeout => 60);
		is($r, 0, "$label: segment and snowflake traffic on " . $n->name)
		  or diag $e;
		is($o2, "200\n" . (30 * scalar(HOSTILE_TAGS)) . "\n200",
			"$label: every ID distinct on " . $n->name);
	}
	# renewals (every heartbeat) go on under the new name
	my $beat = qq{SELECT max(heartbeat_at) FROM leaf_id_catalog.leaf_worker};
	my $before = $node->safe_psql('postgres', $beat);
	sleep 3;
	my $after = $node->safe_psql('postgres', $beat);
	ok($after gt $before, "$label: snowflake renewals go on ($before -> $after)");
	for my $n (@all)
	{
		is(superuser_runs($n), '0,f',
			"$label: nothing of mallory's ran as a superuser on " . $n->name);
	}
	return $to;
}

1;
