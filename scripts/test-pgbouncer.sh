#!/usr/bin/env bash
# leaf_id behind PgBouncer in transaction pooling (docs/operations.md, "Behind
# PgBouncer"): Debian's pgbouncer (unpacked into target/pgbouncer by
# scripts/deps.sh pgbouncer; not installed, no service) in front of a
# throwaway cluster of the server scripts/pg.sh picks (port PGBOUNCER_PORT,
# default 28886, and the next port for PgBouncer; loopback only), with
# pool_mode = transaction and 4 server connections for 32 clients.
#  1. 32 pgbench clients insert 500 rows each (16,000) through PgBouncer into
#     a table keyed by a plain segment tag, a snowflake ID and an opaque tag
#     (whose sessions keep runs of encoded values: behind the pooler a run
#     kept by one server connection serves whichever client uses it next):
#     every transaction succeeds, every key of every column is distinct, and
#     the server never had more than 4 connections from PgBouncer.
#  2. SET LOCAL leaf_id.refill_timeout in a transaction through PgBouncer
#     applies to that transaction and to no later client of the same server
#     connection (the way docs/operations.md gives to set it behind a pooler).
# Exit 3 (SKIP) when pgbouncer could not be had (scripts/deps.sh says why).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/cluster.sh
PORT=${PGBOUNCER_PORT:-28886}
BPORT=$((PORT + 1))
DATA=$ROOT/target/pgbouncer-cluster$PG_SUFFIX
RUN=$ROOT/target/pgbouncer-run$PG_SUFFIX
PGBOUNCER=$ROOT/target/pgbouncer/usr/sbin/pgbouncer
CLIENTS=32 POOL=4 ROWS_PER_CLIENT=500
fail() { echo "test-pgbouncer: FAIL: $*" >&2; exit 1; }

. scripts/deps-or-skip.sh pgbouncer "the PgBouncer test"

mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
cluster_stop "$DATA" immediate
cluster_init "$DATA" "$PORT"
rm -rf "$RUN"
install -d -o postgres -g postgres "$RUN"
cleanup() {
  [ -f "$RUN/pgbouncer.pid" ] && kill "$(cat "$RUN/pgbouncer.pid")" 2>/dev/null || true
  cluster_stop "$DATA" immediate
}
trap cleanup EXIT
cluster_start "$DATA"
direct() { as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d leafdb "$@"; }
pooled() { as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$BPORT" -U postgres -d leafdb "$@"; }

as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres leafdb
direct >/dev/null <<'SQL'
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('pooled', 100);
SELECT leaf_opaque_create('pooled_domain', bits => 53);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant)
VALUES ('pooled_opaque', 100, 'pooled_domain', leaf_opaque_grant('pooled_domain', 'pooled_opaque', 1));
CREATE TABLE pooled_orders (
  id bigint PRIMARY KEY DEFAULT leaf_segment_next('pooled'),
  sf bigint NOT NULL DEFAULT leaf_snowflake_next(),
  public_id bigint NOT NULL DEFAULT leaf_segment_next('pooled_opaque'),
  client int NOT NULL);
SQL

cat >"$RUN/pgbouncer.ini" <<INI
[databases]
leafdb = host=127.0.0.1 port=$PORT dbname=leafdb user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BPORT
unix_socket_dir =
auth_type = trust
auth_file = $RUN/users.txt
pool_mode = transaction
default_pool_size = $POOL
max_db_connections = $POOL
max_client_conn = 100
logfile = $RUN/pgbouncer.log
pidfile = $RUN/pgbouncer.pid
INI
echo '"postgres" ""' >"$RUN/users.txt"
chown postgres:postgres "$RUN"/*
runuser -u postgres -- "$PGBOUNCER" -d "$RUN/pgbouncer.ini"
for _ in $(seq 1 100); do pooled -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
echo "test-pgbouncer: $("$PGBOUNCER" --version | head -1), pool_mode = transaction, $POOL server connections, $CLIENTS clients"

# 1. the inserts
echo "INSERT INTO pooled_orders (client) VALUES (:client_id);" >"$RUN/insert.sql"
chown postgres:postgres "$RUN/insert.sql"
out=$(as_pg timeout 300 "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$BPORT" -U postgres -c "$CLIENTS" -j 4 \
  -t "$ROWS_PER_CLIENT" -f "$RUN/insert.sql" leafdb 2>&1) || fail "pgbench failed:
$out"
want=$((CLIENTS * ROWS_PER_CLIENT))
grep -q "number of transactions actually processed: $want/$want" <<<"$out" ||
  fail "pgbench did not complete $want transactions:
$out"
if grep -q "number of failed transactions" <<<"$out"; then
  grep -q "number of failed transactions: 0 " <<<"$out" || fail "pgbench reports failed transactions:
$out"
fi
got=$(direct -c "SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || count(DISTINCT sf) || ' '
                       || count(DISTINCT public_id) || ' ' || count(DISTINCT client) FROM pooled_orders")
[ "$got" = "$want $want $want $want $CLIENTS" ] ||
  fail "rows, distinct segment, snowflake and opaque keys, clients = $got (want $want each, $CLIENTS clients)"
servers=$(grep -c "new connection to server" "$RUN/pgbouncer.log" || true)
[ "$servers" -ge 1 ] && [ "$servers" -le "$POOL" ] ||
  fail "PgBouncer opened $servers server connections (want 1 to $POOL)"
echo "test-pgbouncer: $want inserts by $CLIENTS clients over $servers server connections: every transaction succeeded, $want distinct keys in each of the three columns"

# 2. SET LOCAL stays in its transaction
got=$(pooled -c "BEGIN" -c "SET LOCAL leaf_id.refill_timeout = '1234ms'" \
  -c "SELECT current_setting('leaf_id.refill_timeout') || ' ' || (leaf_segment_next('pooled') > 0)" -c "COMMIT")
[ "$got" = "1234ms true" ] || fail "SET LOCAL inside a pooled transaction: $got"
for _ in $(seq 1 "$POOL"); do
  got=$(pooled -c "SHOW leaf_id.refill_timeout")
  [ "$got" = 10s ] || fail "a later client of the pool sees leaf_id.refill_timeout = $got (want the default, 10s)"
done
echo "test-pgbouncer: SET LOCAL leaf_id.refill_timeout held in its transaction only"
echo "test-pgbouncer: passed"
