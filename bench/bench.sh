#!/usr/bin/env bash
# The benchmark command (benchmarks are not tests: they measure, never fail).
#
#   bash bench/bench.sh                  # full run, about 17 minutes on 2 cores
#   BENCH_QUICK=1 bash bench/bench.sh    # quick check of the suite, about 5 minutes
#   BENCH_SECTIONS=multinode bash bench/bench.sh   # only section 7, about 5 minutes
#   PG_MAJOR=18 bash bench/bench.sh      # on PostgreSQL 18 (target/pg18, scripts/pg-server.sh),
#                                          # with uuidv7() as a competitor; writes
#                                          # docs/BENCHMARKS-pg18.md (no section 7: Citus is on 15)
#
# Sets up and builds leaf_id (release), starts a throwaway cluster in
# target/bench-cluster (port BENCH_PORT, default 28870) with fixed settings,
# runs bench/bench_run.py (raw results in target/bench-work/results.json),
# stops the cluster, and writes docs/BENCHMARKS.md and docs/bench-scaling.svg
# with bench/bench_report.py.
#
# Sizes (defaults full / quick): BENCH_N (5000000 / 500000) IDs per bulk
# query, BENCH_SECONDS (5 / 1) per pgbench run, BENCH_REPS (3 / 3),
# BENCH_BULK_REPS (7 / 3) repetitions of section 1,
# BENCH_INSERT_ROWS (1000000 / 100000), BENCH_CLIENTS ("1 2 4 8 16" /
# "1 8 16"), BENCH_BATCH (10000) IDs per scaling transaction,
# BENCH_RT_CLIENTS (8), BENCH_REFILL_CLIENTS (8), BENCH_REFILL_BATCH (1000),
# BENCH_REFILL_STEPS ("10 100 1000"), BENCH_SEG_STEP (1000), BENCH_SECTIONS
# ("bulk scaling roundtrip insert refill batch peers tags profile multinode";
# profile: perf samples of one session drawing segment IDs from one tag and
# from 64 and 1,000 tags in turn, Debian's linux-perf).
#
# Section peers: leaf_id against what a user would pick instead, in the same
# run: nextval() CACHE 1000, leaf_snowflake_next() also with
# leaf_id.max_run_ahead_ms = 1000 (set by ALTER SYSTEM and reset after),
# pgEdge snowflake 2.6.0's snowflake.nextval(), pg_uuidv7 1.6.0's
# uuid_generate_v7() and gen_random_uuid(). BENCH_PEER_N (1000000 / 200000)
# IDs per one-session query, BENCH_PEER_REPS (5 / 3) one-session runs,
# BENCH_PEER_CLIENTS (8) pgbench clients drawing BENCH_PEER_BATCH (100) IDs
# per statement (BENCH_REPS runs of BENCH_SECONDS). The two extensions are
# built from their released sources and installed into the server by
# bench/bench-peers.sh (sources: LEAF_ID_PEER_SNOWFLAKE_SRC,
# LEAF_ID_PEER_UUIDV7_SRC, a directory or tarball; else
# target/peers/<name>-<version>.tar.gz; else a download from GitHub); one
# that cannot be had or built is skipped with a SKIP line here and in the
# report. snowflake.node = 1 is set in the cluster when pgEdge snowflake is
# there.
#
# Section tags: one session drawing IDs from 1, 2, 64 and 1,000 tags in turn
# (BENCH_TAG_COUNTS, "1 2 64 1000"), BENCH_TAG_N (5000000 / 200000) IDs per
# query (a run of 1,000,000 IDs, a third of a second, measured this machine's
# noise more than the tags), BENCH_PEER_REPS runs; the tags' step
# BENCH_TAG_STEP (100000), so that refills hardly run during a measurement. With it the cluster gets leaf_id.max_tags =
# 4096 for the whole run (the default 1024, shared by 16 databases, holds
# fewer than 1,000 tags in one database).
#
# Section 7 (multinode) runs on Citus: three more servers of its own in
# target/bench-citus (ports BENCH_MN_PORT, +1, +2; default BENCH_PORT + 1),
# BENCH_MN_SECONDS (3 / 1) per run, BENCH_MN_REPS (3 / 2), BENCH_MN_CLIENTS (2)
# clients per node. It installs Citus first when it is missing and
# LEAF_ID_CITUS_TARBALL names a tarball (scripts/citus.sh); without Citus it is
# skipped with a SKIP line here and in the report, never silently. A run of
# only that section (BENCH_SECTIONS=multinode) replaces only its part of
# docs/BENCHMARKS.md and keeps the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
# the command line printed in the report: the BENCH_* variables the caller set
BENCH_COMMAND=$(env | grep -E '^BENCH_(QUICK|N|SECONDS|REPS|BULK_REPS|INSERT_ROWS|CLIENTS|BATCH|RT_CLIENTS|REFILL_CLIENTS|REFILL_BATCH|REFILL_STEPS|SEG_STEP|SECTIONS|PORT|MN_SECONDS|MN_REPS|MN_CLIENTS|MN_PORT|BATCH_N|BATCH_CALL|PEER_N|PEER_REPS|PEER_CLIENTS|PEER_BATCH|TAG_N|TAG_COUNTS|TAG_STEP)=' \
  | sort | sed -E "s/^([A-Z_]+)=(.*)$/\1='\2'/; s/='([A-Za-z0-9_.]+)'$/=\1/" | tr '\n' ' ' || true)
export BENCH_COMMAND="${BENCH_COMMAND}${PG_MAJOR:+PG_MAJOR=$PG_MAJOR }bash bench/bench.sh"
export BENCH_PORT=${BENCH_PORT:-28870}

# the chart needs matplotlib: Debian's package, since Debian's Python refuses
# pip installs into the system (PEP 668); so the scripts run with Debian's
# python3, whatever else PATH offers
if [ -z "${PG_CONFIG:-}" ]; then
  bash scripts/pg-server.sh "${PG_MAJOR:-15}" >/dev/null
fi
bash scripts/setup.sh python3-matplotlib linux-perf
PYTHON=/usr/bin/python3
export PATH="$HOME/.cargo/bin:$PATH"
. scripts/pg.sh
export BENCH_PGBIN=$PGBIN BENCH_PG_MAJOR=$PG_MAJOR
# 15 writes docs/BENCHMARKS.md, another major its own report
REPORT=docs/BENCHMARKS$PG_SUFFIX.md CHART=docs/bench-scaling$PG_SUFFIX.svg
echo "== install (release), PostgreSQL $PG_MAJOR"
bash scripts/install.sh

# section 7 needs Citus: install it if missing and a tarball is named
CITUS_SKIP=
if [ "$PG_MAJOR" != 15 ] && [[ " ${BENCH_SECTIONS:-multinode} " == *" multinode "* ]]; then
  CITUS_SKIP="Citus runs on PostgreSQL 15 here; this run is on $PG_MAJOR"
  echo "== SKIP: section 7 (many nodes, Citus) will NOT RUN: $CITUS_SKIP"
elif [[ " ${BENCH_SECTIONS:-multinode} " == *" multinode "* ]]; then
  rc=0
  bash scripts/citus.sh || rc=$?
  if [ $rc -eq 3 ]; then
    CITUS_SKIP="Citus is not installed and LEAF_ID_CITUS_TARBALL is not set"
  elif [ $rc -ne 0 ]; then
    CITUS_SKIP="scripts/citus.sh failed (exit $rc)"
  fi
  [ -z "$CITUS_SKIP" ] || echo "== SKIP: section 7 (many nodes, Citus) will NOT RUN: $CITUS_SKIP"
fi
export BENCH_CITUS_SKIP=$CITUS_SKIP
SECTIONS=" ${BENCH_SECTIONS:-bulk scaling roundtrip insert refill batch peers tags profile multinode} "

. scripts/cluster.sh
DATA=$ROOT/target/bench-cluster$PG_SUFFIX
WORK=$ROOT/target/bench-work$PG_SUFFIX
export BENCH_WORK=$WORK
mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
cluster_stop "$DATA" immediate   # left over from an interrupted run
cluster_init "$DATA" "$BENCH_PORT"
cat bench/bench-settings.conf >> "$DATA/postgresql.conf"
rm -rf "$WORK"
mkdir -p "$WORK"
# the peers section's extensions, built and installed only when it runs
export BENCH_PEERS_FILE=
if [[ $SECTIONS == *" peers "* ]]; then
  echo "== peers (bench/bench-peers.sh), PostgreSQL $PG_MAJOR"
  BENCH_PEERS_FILE=$WORK/peers.txt
  bash bench/bench-peers.sh "$BENCH_PEERS_FILE"
  while read -r status name version reason; do
    if [ "$status" = skip ]; then echo "== SKIP: peer $name $version will NOT RUN: $reason"; fi
  done <"$BENCH_PEERS_FILE"
  # pgEdge snowflake's nextval() fails until its node is set (no preload needed)
  if grep -q '^ok snowflake ' "$BENCH_PEERS_FILE"; then
    echo "snowflake.node = 1" >> "$DATA/postgresql.conf"
  fi
fi
# the tags section's 1,000 tags: more tag slots than the default for the whole run
if [[ $SECTIONS == *" tags "* ]]; then
  echo "leaf_id.max_tags = 4096" >> "$DATA/postgresql.conf"
fi
echo "== starting the benchmark cluster on port $BENCH_PORT"
cluster_start "$DATA"
# section 7's nodes stop themselves; this is for an interrupted run
stop_all() {
  cluster_stop "$DATA" fast
  for d in "$ROOT"/target/bench-citus/*/; do [ -d "$d" ] && cluster_stop "${d%/}" immediate; done
  return 0
}
trap stop_all EXIT
"$PYTHON" bench/bench_run.py "$WORK/results.json"
stop_all
trap - EXIT

export BENCH_TOTAL_SECONDS=$(( $(date +%s) - START ))
mkdir -p docs
"$PYTHON" bench/bench_report.py "$WORK/results.json" "$REPORT" "$CHART"
echo "== benchmarks done in ${BENCH_TOTAL_SECONDS} s: $REPORT, $CHART"
[ -z "$CITUS_SKIP" ] || echo "== SKIP: section 7 (many nodes, Citus) NOT RUN: $CITUS_SKIP"
if [ -n "$BENCH_PEERS_FILE" ]; then
  while read -r status name version reason; do
    if [ "$status" = skip ]; then echo "== SKIP: peer $name $version NOT RUN: $reason"; fi
  done <"$BENCH_PEERS_FILE"
fi
errors=$("$PYTHON" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["errors"]))' "$WORK/results.json")
if [ "$errors" != "0" ]; then
  echo "bench: $errors measurement(s) failed; see \"Errors during the run\" in $REPORT" >&2
  exit 1
fi
