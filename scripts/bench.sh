#!/usr/bin/env bash
# The benchmark command (benchmarks are not tests: they measure, never fail).
#
#   bash scripts/bench.sh                  # full run, about 14 minutes on 2 cores
#   BENCH_QUICK=1 bash scripts/bench.sh    # quick check of the suite, about 2.5 minutes
#
# Sets up and builds leaf_id (release), starts a throwaway cluster in
# target/bench-cluster (port BENCH_PORT, default 28870) with fixed settings,
# runs scripts/bench_run.py (raw results in target/bench-work/results.json),
# stops the cluster, and writes docs/BENCHMARKS.md and docs/bench-scaling.svg
# with scripts/bench_report.py.
#
# Sizes (defaults full / quick): BENCH_N (5000000 / 500000) IDs per bulk
# query, BENCH_SECONDS (5 / 1) per pgbench run, BENCH_REPS (3 / 3),
# BENCH_INSERT_ROWS (1000000 / 100000), BENCH_CLIENTS ("1 2 4 8 16" /
# "1 8 16"), BENCH_BATCH (10000) IDs per scaling transaction,
# BENCH_RT_CLIENTS (8), BENCH_REFILL_CLIENTS (8), BENCH_REFILL_BATCH (1000),
# BENCH_REFILL_STEPS ("10 100 1000"), BENCH_SEG_STEP (1000), BENCH_SECTIONS
# ("bulk scaling roundtrip insert refill").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
# the command line printed in the report: the BENCH_* variables the caller set
BENCH_COMMAND=$(env | grep -E '^BENCH_(QUICK|N|SECONDS|REPS|INSERT_ROWS|CLIENTS|BATCH|RT_CLIENTS|REFILL_CLIENTS|REFILL_BATCH|REFILL_STEPS|SEG_STEP|SECTIONS|PORT)=' \
  | sort | sed -E "s/^([A-Z_]+)=(.*)$/\1='\2'/; s/='([A-Za-z0-9_.]+)'$/=\1/" | tr '\n' ' ' || true)
export BENCH_COMMAND="${BENCH_COMMAND}bash scripts/bench.sh"
export BENCH_PORT=${BENCH_PORT:-28870}

# the chart needs matplotlib: Debian's package, since Debian's Python refuses
# pip installs into the system (PEP 668); so the scripts run with Debian's
# python3, whatever else PATH offers
bash scripts/setup.sh python3-matplotlib
PYTHON=/usr/bin/python3
export PATH="$HOME/.cargo/bin:$PATH"
echo "== install (release)"
bash scripts/install.sh

. scripts/cluster.sh
DATA=$ROOT/target/bench-cluster
WORK=$ROOT/target/bench-work
export BENCH_WORK=$WORK
mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
cluster_stop "$DATA" immediate   # left over from an interrupted run
cluster_init "$DATA" "$BENCH_PORT"
cat >> "$DATA/postgresql.conf" <<'CONF'
# benchmark settings (read back into docs/BENCHMARKS.md)
max_connections = 50
shared_buffers = 512MB
work_mem = 512MB
max_wal_size = 8GB
checkpoint_timeout = 30min
autovacuum = off
jit = off
max_parallel_workers_per_gather = 0
CONF
rm -rf "$WORK"
mkdir -p "$WORK"
echo "== starting the benchmark cluster on port $BENCH_PORT"
cluster_start "$DATA"
trap 'cluster_stop "$DATA" fast' EXIT
"$PYTHON" scripts/bench_run.py "$WORK/results.json"
cluster_stop "$DATA" fast
trap - EXIT

export BENCH_TOTAL_SECONDS=$(( $(date +%s) - START ))
mkdir -p docs
"$PYTHON" scripts/bench_report.py "$WORK/results.json" docs/BENCHMARKS.md docs/bench-scaling.svg
echo "== benchmarks done in ${BENCH_TOTAL_SECONDS} s: docs/BENCHMARKS.md, docs/bench-scaling.svg"
errors=$("$PYTHON" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["errors"]))' "$WORK/results.json")
if [ "$errors" != "0" ]; then
  echo "bench: $errors measurement(s) failed; see \"Errors during the run\" in docs/BENCHMARKS.md" >&2
  exit 1
fi
