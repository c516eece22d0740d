#!/usr/bin/env bash
# The Patroni test (tests/patroni/failover.py): three PostgreSQL nodes of the
# server scripts/pg.sh picks (PG_MAJOR; every major in the test command) under Patroni
# 4.1.5 with its Raft DCS, on loopback, with leaf_id preloaded (it must be
# installed: scripts/install.sh). Patroni and its dependencies come from
# PyPI, pinned by version and sha256 (tests/patroni/requirements.txt), into
# target/patroni-py (scripts/deps.sh patroni, once); Debian's
# python3-psycopg2 is the driver.
# When PyPI cannot be reached: a SKIP line, exit 3.
#
# Then, on one major only, the guard-off mode (LEAF_ID_PATRONI_RULE=off):
# leaf_id.synchronized_standby_slots left empty and scenario C alone, which
# must hand out at least one ID twice, or the run fails: the proof that the
# check "no ID twice" can fail (about 85 s). That major is the last of
# LEAF_ID_PG_MAJORS (the test command's list, default "15 16 17 18": so 18,
# the last the test command's Patroni job runs), or LEAF_ID_PATRONI_OFF_MAJOR.
#
#   PG_MAJOR=17 bash scripts/test-patroni.sh
#   LEAF_ID_PATRONI_RULE=off ...     the guard-off mode alone
#   LEAF_ID_PATRONI_OFF_MAJOR=none   never the guard-off mode
# Logs: target/patroni-pgNN/ and target/patroni-pgNN-off/ (each node's
# Patroni log, server logs in its data directory).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/cluster.sh
PYTHON=/usr/bin/python3
PYDIR=$ROOT/target/patroni-py
WORK=$ROOT/target/patroni-pg$PG_MAJOR

if [ ! -e "$PG_PKGLIBDIR/leaf_id.so" ]; then
  echo "test-patroni: leaf_id is not installed in PostgreSQL $PG_MAJOR (run scripts/install.sh)" >&2
  exit 2
fi
"$PYTHON" -c 'import psycopg2' 2>/dev/null || { echo "test-patroni: no python3-psycopg2 (scripts/setup.sh installs it)" >&2; exit 2; }

# Patroni, once per version of the requirements: scripts/deps.sh, the one
# place that installs (scripts/test.sh ran it before its parallel jobs)
. scripts/deps-or-skip.sh patroni "the Patroni test"

ensure_postgres_can_reach "$ROOT/target"
chmod -R o+rX "$PYDIR" "$ROOT/tests/patroni"

# run_test WORK [RULE]: failover.py in WORK (emptied), with
# LEAF_ID_PATRONI_RULE=RULE when given (else its default, '*')
run_test() {
  local work=$1
  rm -rf "$work"
  install -d -o postgres -g postgres -m 0700 "$work"
  (cd "$work" && runuser -u postgres -- env \
    ${PG_LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$PG_LD_LIBRARY_PATH"} \
    PYTHONPATH="$PYDIR" PGBIN="$PGBIN" WORK="$work" \
    ${2+LEAF_ID_PATRONI_RULE="$2"} \
    timeout 600 "$PYTHON" "$ROOT/tests/patroni/failover.py")
}

if [ "${LEAF_ID_PATRONI_RULE-}" = off ]; then
  run_test "$WORK-off" off
  exit 0
fi
run_test "$WORK" ${LEAF_ID_PATRONI_RULE+"$LEAF_ID_PATRONI_RULE"}
majors=(${LEAF_ID_PG_MAJORS:-15 16 17 18})
OFF_MAJOR=${LEAF_ID_PATRONI_OFF_MAJOR:-${majors[${#majors[@]}-1]}}
if [ "$PG_MAJOR" = "$OFF_MAJOR" ]; then
  echo "== Patroni test, guard-off mode (PostgreSQL $PG_MAJOR): scenario C must hand out IDs twice"
  run_test "$WORK-off" off
fi
