#!/usr/bin/env bash
# Side-by-side benchmark against an earlier build (benchmarks are not tests:
# it measures, never fails on a figure): the working tree and a base commit
# (BENCH_BASE; by default the previous release, the newest commit whose
# Cargo.toml version differs from the working tree's) are built and run on
# two servers of the same major, with the same settings, in the same run;
# every measurement alternates between them (base, current, current, base,
# ...), and the report gives the ratio current / base of each, so that a
# change that costs 10% shows as 10% whatever the machine's noise does to
# the absolute figures. Writes docs/BENCHMARKS-compare.md.
#
#   bash bench/bench-compare.sh                    # about 6 minutes on 2 cores (after the builds)
#   BENCH_BASE=3fdc11c bash bench/bench-compare.sh # against that commit
#   PG_MAJOR=18 bash bench/bench-compare.sh        # on 18 (16, 17 or 18; 17 by default)
#
# Sizes: BENCH_N (3000000) IDs per single-session query, BENCH_REPS (5)
# repetitions of each, BENCH_SECONDS (5) per pgbench run, BENCH_CLIENTS (8),
# BENCH_INSERT_ROWS (1000000). Ports BENCH_PORT (28880) and BENCH_PORT + 1.
#
# Two servers of one major: the server of scripts/pg-server.sh (target/pgNN)
# runs the working tree's build, and a copy of it in target/bench-base/pgNN
# the base's (an extension is one library per installation: two builds need
# two). PostgreSQL 15 is Debian's, which cannot be copied that way: 16 to 18.
# The base is extracted (git archive) into target/bench-base/src-COMMIT and
# built with its own scripts/install.sh and cargo target directory there, once
# per commit and major.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
export PG_MAJOR=${PG_MAJOR:-17}
case $PG_MAJOR in
  16 | 17 | 18) ;;
  *) echo "bench-compare: PG_MAJOR=$PG_MAJOR: 16, 17 or 18 (a server from scripts/pg-server.sh that can be copied)" >&2; exit 2 ;;
esac
export PATH="$HOME/.cargo/bin:$PATH"

if [ -n "${BENCH_BASE:-}" ]; then
  base=$(git rev-parse --verify "$BENCH_BASE^{commit}")
else
  version=$(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1)
  # newest first: the first commit with another version is the last one of
  # the previous release
  base=
  for c in $(git rev-list --first-parent HEAD); do
    v=$(git show "$c:Cargo.toml" | sed -nE 's/^version = "(.*)"/\1/p' | head -1)
    if [ "$v" != "$version" ]; then base=$c; break; fi
  done
  [ -n "$base" ] || { echo "bench-compare: no earlier version in the history of Cargo.toml; set BENCH_BASE" >&2; exit 2; }
fi
base_short=$(git rev-parse --short "$base")
base_version=$(git show "$base:Cargo.toml" | sed -nE 's/^version = "(.*)"/\1/p' | head -1)
current_desc="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock sql || echo ' with uncommitted changes')"
echo "== base: $base_short (leaf_id $base_version); current: the working tree ($current_desc)"

bash scripts/pg-server.sh "$PG_MAJOR" >/dev/null
bash scripts/setup.sh >/dev/null
echo "== install the working tree's build (release) into target/pg$PG_MAJOR"
bash scripts/install.sh

# the base: its source, a copy of the server, its build installed there
BASE_DIR=$ROOT/target/bench-base
SRC=$BASE_DIR/src-$base_short
PGCOPY=$BASE_DIR/pg$PG_MAJOR
mkdir -p "$BASE_DIR"
if [ ! -f "$SRC/Cargo.toml" ]; then
  rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp"
  git archive "$base" | tar -x -C "$SRC.tmp"
  mv "$SRC.tmp" "$SRC"
fi
echo "== copy target/pg$PG_MAJOR to $PGCOPY, install the base's build ($base_short) there"
rm -rf "$PGCOPY"
cp -a "$ROOT/target/pg$PG_MAJOR" "$PGCOPY"
# its own cargo target directory, under its source (built once per commit and
# major); PGRX_HOME is this checkout's (--pg-config names the server)
(cd "$SRC" && PG_CONFIG="$PGCOPY/bin/pg_config" PGRX_HOME="$ROOT/target/pgrx" bash scripts/install.sh)

. scripts/cluster.sh
mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
export BENCH_PORT=${BENCH_PORT:-28880}
DATA_BASE=$BASE_DIR/cluster DATA_CUR=$ROOT/target/bench-compare-cluster
# the same settings on both (and as bench/bench.sh)
settings() { cat bench/bench-settings.conf >> "$1/postgresql.conf"; }
cluster_stop "$DATA_BASE" immediate
cluster_stop "$DATA_CUR" immediate
(PG_CONFIG=$PGCOPY/bin/pg_config; . scripts/pg.sh; cluster_init "$DATA_BASE" "$BENCH_PORT"; settings "$DATA_BASE"; cluster_start "$DATA_BASE")
cluster_init "$DATA_CUR" "$((BENCH_PORT + 1))"; settings "$DATA_CUR"; cluster_start "$DATA_CUR"
stop_all() {
  (PG_CONFIG=$PGCOPY/bin/pg_config; . scripts/pg.sh; cluster_stop "$DATA_BASE" fast)
  cluster_stop "$DATA_CUR" fast
  return 0
}
trap stop_all EXIT

export BENCH_PGBIN=$PGBIN BENCH_PG_MAJOR=$PG_MAJOR
export BENCH_BASE_LABEL="$base_short (leaf_id $base_version)" BENCH_CURRENT_LABEL="$current_desc (leaf_id $(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1))"
BENCH_COMMAND=$(env | grep -E '^BENCH_(BASE|N|REPS|SECONDS|CLIENTS|INSERT_ROWS|PORT)=' | sort | tr '\n' ' ' || true)
export BENCH_COMMAND="${BENCH_COMMAND}PG_MAJOR=$PG_MAJOR bash bench/bench-compare.sh"
export BENCH_LD_LIBRARY_PATH=${PG_LD_LIBRARY_PATH:-}
python3 bench/bench_compare.py "$BENCH_PORT" "$((BENCH_PORT + 1))" docs/BENCHMARKS-compare.md "$START"
stop_all
trap - EXIT
echo "== done in $(( $(date +%s) - START )) s: docs/BENCHMARKS-compare.md"
