#!/usr/bin/env bash
# Runs the client-side integration tests of leaf_id (tests/client, a
# standalone crate using the `postgres` client library) against a server
# with leaf_id already installed (this script builds nothing of leaf_id).
#
# - CLIENT_EXISTING_PORT set: uses that running server (127.0.0.1, user
#   postgres, trust auth; database CLIENT_EXISTING_DB, default postgres) as it
#   is.
# - CLIENT_EXISTING_PORT unset: starts a throwaway cluster (scripts/cluster.sh)
#   under target/client-cluster on port CLIENT_PORT (default 28850), runs the
#   tests, stops it.
#   That cluster caps the dynamic step with leaf_id.max_step =
#   ${LEAF_ID_TEST_MAX_STEP:-10} (empty: leaf_id's default), so the step-10
#   tags of the tests are refilled all the time rather than growing.
#
# Arguments go to `cargo test` (e.g. `--test extended_protocol`, or a test name).
# LEAF_ID_TEST_TIME_LIMIT (seconds, default 600) bounds the test run.
# The tests read the server from LEAF_ID_TEST_PORT and LEAF_ID_TEST_DB, which
# this script sets; values left in the environment are ignored.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH="$HOME/.cargo/bin:$PATH"
MANIFEST=$ROOT/tests/client/Cargo.toml
TIME_LIMIT=${LEAF_ID_TEST_TIME_LIMIT:-600}
unset LEAF_ID_TEST_PORT LEAF_ID_TEST_DB

run_tests() {
  # build first, outside the time limit
  cargo test --manifest-path "$MANIFEST" --no-run --quiet
  timeout --kill-after=15 "$TIME_LIMIT" cargo test --manifest-path "$MANIFEST" --no-fail-fast "$@"
}

if [ -n "${CLIENT_EXISTING_PORT:-}" ]; then
  export LEAF_ID_TEST_PORT=$CLIENT_EXISTING_PORT LEAF_ID_TEST_DB=${CLIENT_EXISTING_DB:-postgres}
  echo "test-client: using the server on 127.0.0.1:$LEAF_ID_TEST_PORT, database $LEAF_ID_TEST_DB"
  run_tests "$@"
  exit
fi

. scripts/cluster.sh
DATA=$ROOT/target/client-cluster
PORT=${CLIENT_PORT:-28850}
MAX_STEP=${LEAF_ID_TEST_MAX_STEP-10}
mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
cluster_stop "$DATA" immediate # a leftover of an interrupted run
cluster_init "$DATA" "$PORT"
if [ -n "$MAX_STEP" ]; then
  echo "leaf_id.max_step = $MAX_STEP" >> "$DATA/postgresql.conf"
fi
trap 'cluster_stop "$DATA" fast' EXIT
cluster_start "$DATA"
echo "test-client: throwaway cluster $DATA on port $PORT (leaf_id.max_step = ${MAX_STEP:-default})"
export LEAF_ID_TEST_PORT=$PORT

rc=0
run_tests "$@" || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "test-client: tests failed (exit $rc); leaf_id lines and server errors from $DATA/server.log:"
  grep -E 'leaf_id|PANIC|FATAL|TRAP|terminated by signal' "$DATA/server.log" | grep -v 'statement:' | tail -n 40 || true
fi
exit "$rc"
