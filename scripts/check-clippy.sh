#!/usr/bin/env bash
# Clippy over the crate, warnings denied: `cargo clippy --all-targets -- -D
# warnings` for the default feature (pg15, the system PostgreSQL 15, which
# scripts/setup.sh always registers with pgrx), so the unit tests are linted
# too. The crate denies clippy::undocumented_unsafe_blocks (src/lib.rs):
# every unsafe block and impl needs its `// SAFETY:` comment. Run by the test
# command's first step; runs alone as `bash scripts/check-clippy.sh` (after
# scripts/setup.sh). Fails (exit 1) when clippy is missing: a check that
# cannot run is not passed. Its check build shares pg15's target directory
# (target/), beside the test build, which it does not disturb.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/need-rust.sh
if ! clippy_version=$(cargo clippy --version 2>&1); then
  echo "check-clippy: FAILED: \`cargo clippy --version\` failed: clippy is not installed for $(cargo --version)." >&2
  echo "check-clippy: $clippy_version" >&2
  echo "check-clippy: install it (rustup component add clippy) and run this again." >&2
  exit 1
fi
# PGRX_HOME (target/pgrx unless set) and cargo's target directory, as the
# pg15 build of the test command has them
export PG_MAJOR=15
unset PG_CONFIG
. scripts/pg.sh
start=$SECONDS
echo "check-clippy: $clippy_version, $PGRX_FEATURE (default feature), --all-targets, -D warnings"
CARGO_TARGET_DIR=$LEAF_ID_CARGO_TARGET cargo clippy --all-targets -- -D warnings
echo "check-clippy: passed in $((SECONDS - start)) s"
