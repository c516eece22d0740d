#!/usr/bin/env bash
# The Citus suite: TAP tests in tests/citus (a coordinator and two workers,
# local clusters on loopback, shared_preload_libraries = 'citus,leaf_id').
# Installs Citus first when it is missing (scripts/citus.sh, from the tarball
# named by LEAF_ID_CITUS_TARBALL); without Citus and without a tarball it
# prints a SKIP line saying why and exits 3 (scripts/test.sh repeats the SKIP
# in its last line). leaf_id must already be installed.
#
#   scripts/test-citus.sh                         # every Citus test, on 15
#   scripts/test-citus.sh tests/citus/201_*.pl    # some
#   PG_MAJOR=17 scripts/test-citus.sh             # on 17 (16, 17: the wheels)
#
# Server logs and regress_log_* are left in target/tap-citus/tmp_check/log
# (target/tap-citus-pg17/... on 17).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh

rc=0
bash scripts/citus.sh || rc=$?
if [ $rc -eq 3 ]; then
  echo "== SKIP: Citus suite (tests/citus) on PostgreSQL $PG_MAJOR NOT RUN: Citus is not installed and its tarball variable is not set (LEAF_ID_CITUS_TARBALL for 15, LEAF_ID_CITUS14_TARBALL for 16 to 18; see above)"
  exit 3
elif [ $rc -ne 0 ]; then
  echo "test-citus: scripts/citus.sh failed (exit $rc)" >&2
  exit "$rc"
fi

if [ $# -gt 0 ]; then
  tests=("$@")
else
  shopt -s nullglob
  tests=(tests/citus/*.pl)
fi
if [ ${#tests[@]} -eq 0 ]; then
  echo "test-citus: no tests found in tests/citus" >&2
  exit 2
fi
TAP_WORK=target/tap-citus$PG_SUFFIX exec bash scripts/test-tap.sh "${tests[@]}"
