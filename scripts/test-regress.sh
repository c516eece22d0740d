#!/usr/bin/env bash
# pg_regress suite (pg_test/sql, pg_test/expected; a major whose output
# differs has alternative files, pg_test/expected/NAME_N.out) against a
# throwaway cluster of the server scripts/pg.sh picks.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/cluster.sh
PORT=${REGRESS_PORT:-28816}
DATA=$ROOT/target/regress-cluster$PG_SUFFIX
OUT=$ROOT/target/regress-out$PG_SUFFIX
mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
cluster_stop "$DATA" immediate
cluster_init "$DATA" "$PORT"
cluster_start "$DATA"
trap 'cluster_stop "$DATA" fast' EXIT
rm -rf "$OUT"; install -d -o postgres -g postgres "$OUT"
as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres leaf_regress
tests=$(cd pg_test/sql && ls *.sql | sed 's/\.sql$//' | sort)
status=0
as_pg "$PGXS_DIR/src/test/regress/pg_regress" \
  --use-existing --bindir="$PGBIN" --host=127.0.0.1 --port="$PORT" --user=postgres \
  --inputdir="$ROOT/pg_test" --outputdir="$OUT" --dbname=leaf_regress $tests || status=$?
if [ $status -ne 0 ] && [ -f "$OUT/regression.diffs" ]; then
  cat "$OUT/regression.diffs"
fi
exit $status
