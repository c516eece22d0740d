#!/usr/bin/env bash
# The test command: every suite, starting whatever it needs.
#  0. the module layout: no import circle, the pure core without pgrx
#     (scripts/check-imports.py)
#  1+2. pure Rust unit tests and #[pg_test] tests: one build, cargo pgrx test
#     runs both (the unit tests also run alone with `cargo test --lib`)
#  3. pg_regress suite in pg_test/ (SQL + expected output)
#  4. real-client tests (tests/client, Rust `postgres` crate)
#  5. the Debian package (scripts/package.sh): apt-get install, IDs, removal;
#     puts the plain install back
#  6. client examples in examples/ (Python psycopg + SQLAlchemy, Rust postgres)
#  7. TAP tests in tests/tap (crashes, restarts, clock, several databases)
#  8. Citus suite in tests/citus (coordinator + two workers); builds and installs
#     Citus from LEAF_ID_CITUS_TARBALL when it is missing, else a SKIP line
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
PGLIB=/usr/lib/postgresql/15/lib

echo "== module layout"
python3 scripts/check-imports.py

echo "== unit tests and pg_test (one build)"
# unlink first: servers still running keep the library they mapped
rm -f "$PGLIB/leaf_id.so"
install -d -o postgres -g postgres "$ROOT/target/pgrx-test-data"
mkdir -p "$ROOT/target"; . scripts/cluster.sh; ensure_postgres_can_reach "$ROOT/target"
cargo pgrx test pg15 --runas postgres --pgdata "$ROOT/target/pgrx-test-data"

echo "== install (release)"
bash scripts/install.sh

echo "== pg_regress"
bash scripts/test-regress.sh

if [ -f tests/client/Cargo.toml ]; then
  echo "== client tests"
  bash scripts/test-client.sh
fi

echo "== Debian package"
bash scripts/test-package.sh

echo "== client examples"
bash scripts/test-examples.sh

if compgen -G "tests/tap/*.pl" >/dev/null; then
  echo "== TAP tests"
  bash scripts/test-tap.sh
fi
echo "== Citus tests"
citus_rc=0
bash scripts/test-citus.sh || citus_rc=$?
case $citus_rc in
  0) echo "== all suites passed" ;;
  3) echo "== all suites passed, but the Citus suite was SKIPPED (no Citus installed, LEAF_ID_CITUS_TARBALL not set)" ;;
  *) exit "$citus_rc" ;;
esac
