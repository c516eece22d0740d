#!/usr/bin/env bash
# Installs what leaf_id needs on a Debian bookworm machine, as root, idempotently:
# Debian's packages of scripts/deps.sh's group base (PostgreSQL 15 and its
# server headers, clang for pgrx, and the rest it lists), cargo-pgrx 0.18.1,
# and registers the system PostgreSQL 15 and the servers
# in target/pg16, target/pg17, target/pg18 with pgrx (PGRX_HOME).
# Arguments: more Debian packages to install (e.g. python3-matplotlib for
# bench/bench.sh).
#
# Prerequisite it does not install: Rust with cargo, version 1.85 or newer
# (leaf_id uses edition 2024), e.g. from https://rustup.rs. Debian bookworm's
# own rustc/cargo packages are too old.
set -euo pipefail

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
. "$(dirname "$0")/need-rust.sh"

# Debian's packages and cargo-pgrx: scripts/deps.sh, the one place that installs
bash "$(dirname "$0")/deps.sh" base
[ $# -eq 0 ] || bash "$(dirname "$0")/deps.sh" apt "$@"
# pgrx's registry of servers, config.toml in PGRX_HOME (scripts/pg.sh: this
# checkout's target/pgrx unless set; its paths are this checkout's): the
# system PostgreSQL 15 and each of 16, 17 and 18 that is in target/pgNN
# (scripts/pg-server.sh), whatever LEAF_ID_PG_MAJORS says. Written as
# `cargo pgrx init --pgNN PG_CONFIG...` would (the whole list, [configs]
# lines pgNN = "PG_CONFIG"), without running it: init runs each pg_config and
# has nothing else to do for servers that are already there.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PGRX_HOME=${PGRX_HOME:-$ROOT/target/pgrx}
configs=("pg15 = \"$PG_CONFIG\"")
for major in 16 17 18; do
  pgc=$ROOT/target/pg$major/bin/pg_config
  if [ -x "$pgc" ]; then configs+=("pg$major = \"$pgc\""); fi
done
want=$(printf '[configs]\n'; printf '%s\n' "${configs[@]}")
if [ "$(cat "$PGRX_HOME/config.toml" 2>/dev/null)" != "$want" ]; then
  echo "setup: registering with pgrx in $PGRX_HOME/config.toml: ${configs[*]}"
  mkdir -p "$PGRX_HOME"
  printf '%s\n' "$want" >"$PGRX_HOME/config.toml.tmp"
  mv -f "$PGRX_HOME/config.toml.tmp" "$PGRX_HOME/config.toml"
fi
