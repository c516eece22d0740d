#!/usr/bin/env bash
# Runs the client examples in examples/ (Python: psycopg 3 and SQLAlchemy,
# and Django 5.2; Rust: the postgres crate and sqlx; Ruby: ActiveRecord;
# Node.js: pg and Sequelize) and the SQL blocks of the docs against a throwaway cluster with leaf_id
# installed and preloaded (target/examples-cluster, port EXAMPLES_PORT,
# default 28881), each in its own fresh database. Exits non-zero when any
# example fails. Needs the Debian packages python3-psycopg, python3-psycopg2
# and python3-sqlalchemy (scripts/setup.sh installs them); runs Debian's
# /usr/bin/python3, which is the interpreter those packages serve. Django
# 5.2 and the psycopg it needs (bookworm has neither) are installed from PyPI
# with that interpreter's pip into target/pydeps (scripts/deps.sh django),
# once; pg and Sequelize by examples/node/package-lock.json into
# target/nodedeps (scripts/deps.sh node).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH="$HOME/.cargo/bin:$PATH"
. scripts/cluster.sh
DATA=$ROOT/target/examples-cluster
PORT=${EXAMPLES_PORT:-28881}
PYTHON=/usr/bin/python3
RUST_MANIFEST=$ROOT/examples/rust/Cargo.toml
# its own target directory: the example is a standalone crate
export CARGO_TARGET_DIR=$ROOT/target/examples

SQLX_MANIFEST=$ROOT/examples/rust-sqlx/Cargo.toml

# build first, before the cluster is up
cargo build --quiet --manifest-path "$RUST_MANIFEST"
cargo build --quiet --manifest-path "$SQLX_MANIFEST"
# Django (target/pydeps), Node.js and the example's modules
# (target/nodedeps): scripts/deps.sh, the one place that installs
# (scripts/test.sh ran it before anything else)
bash scripts/deps.sh django node
PYDEPS=$ROOT/target/pydeps
NODEDEPS=$ROOT/target/nodedeps
node_skip=
[ -f "$ROOT/target/deps/node.skip" ] && node_skip=$(cat "$ROOT/target/deps/node.skip")

mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
cluster_stop "$DATA" immediate # a leftover of an interrupted run
cluster_init "$DATA" "$PORT"
trap 'cluster_stop "$DATA" fast' EXIT
cluster_start "$DATA"
echo "test-examples: throwaway cluster $DATA on port $PORT"

passed=0 failed=0
run_example() {
  local name=$1 db=$2
  shift 2
  as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$db"
  echo "-- $name"
  if LEAF_ID_URL="postgresql://postgres@127.0.0.1:$PORT/$db" timeout 120 "$@"; then
    passed=$((passed + 1))
  else
    echo "test-examples: $name FAILED"
    failed=$((failed + 1))
  fi
}
run_example "python (examples/python/orders.py)" python_example "$PYTHON" examples/python/orders.py
run_example "django (examples/python/django_orders.py)" django_example \
  env PYTHONPATH="$PYDEPS" "$PYTHON" examples/python/django_orders.py
run_example "rust (examples/rust)" rust_example cargo run --quiet --manifest-path "$RUST_MANIFEST"
run_example "rust sqlx (examples/rust-sqlx)" sqlx_example cargo run --quiet --manifest-path "$SQLX_MANIFEST"
run_example "ruby (examples/ruby/orders.rb, ActiveRecord)" ruby_example /usr/bin/ruby examples/ruby/orders.rb
if [ -z "$node_skip" ]; then
  run_example "node (examples/node/orders.js, pg and Sequelize)" node_example \
    env NODE_PATH="$NODEDEPS/node_modules" node examples/node/orders.js
else
  echo "################################################################################"
  echo "SKIP: the Node.js example: $node_skip"
  echo "################################################################################"
  # repeated on the test command's last line (scripts/test.sh empties this file at its start)
  echo "Node.js example on $PG_MAJOR: SKIPPED ($node_skip)" >>"$ROOT/target/test-skips"
fi
run_example "docs (the SQL blocks of README.md and docs/, scripts/test-docs.py)" docs_example \
  "$PYTHON" scripts/test-docs.py
run_example "reference (docs/reference.md and the errors table, scripts/test-reference.py)" reference_example \
  env ERRCODES_TXT="$("$PG_CONFIG" --sharedir)/errcodes.txt" "$PYTHON" scripts/test-reference.py

if [ "$failed" -ne 0 ]; then
  echo "test-examples: leaf_id lines and server errors from $DATA/server.log:"
  grep -E 'leaf_id|ERROR|PANIC|FATAL' "$DATA/server.log" | tail -n 20 || true
fi
echo "examples: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
