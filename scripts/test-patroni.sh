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
#   PG_MAJOR=17 bash scripts/test-patroni.sh
#   LEAF_ID_PATRONI_RULE=off ...   leaf_id.synchronized_standby_slots left
#                                  empty: the test must then fail (IDs twice)
# Logs: target/patroni-pgNN/ (each node's Patroni log, server logs in its
# data directory).
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
rm -rf "$WORK"
install -d -o postgres -g postgres -m 0700 "$WORK"
cd "$WORK"
runuser -u postgres -- env \
  ${PG_LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$PG_LD_LIBRARY_PATH"} \
  PYTHONPATH="$PYDIR" PGBIN="$PGBIN" WORK="$WORK" \
  ${LEAF_ID_PATRONI_RULE+LEAF_ID_PATRONI_RULE="$LEAF_ID_PATRONI_RULE"} \
  timeout 600 "$PYTHON" "$ROOT/tests/patroni/failover.py"
