#!/usr/bin/env bash
# Build the benchmark's peers (the `peers` section of bench/bench.sh) from
# their released sources with PGXS and install them into the server that
# scripts/pg.sh picks (PG_CONFIG, or PG_MAJOR; Debian's 15 by default):
#   snowflake 2.6.0   pgEdge's snowflake.nextval()
#   pg_uuidv7 1.6.0   uuid_generate_v7()
# Nothing of them is part of leaf_id or of this repository. bench/bench.sh
# calls this only when the `peers` section runs: it installs into the server.
#
#   bash bench/bench-peers.sh STATUS_FILE
#
# The source of each, in this order: a directory or tarball named by
# LEAF_ID_PEER_SNOWFLAKE_SRC / LEAF_ID_PEER_UUIDV7_SRC; else
# target/peers/<name>-<version>.tar.gz; else the GitHub release tarball,
# downloaded with curl (short timeouts) into target/peers/. The build is in
# target/peers/build/<name>-<version>-pg<major> (its log: make.log there).
#
# STATUS_FILE gets one line per peer: `ok NAME VERSION`, or
# `skip NAME VERSION REASON` when the peer cannot be had or built (the caller
# prints a SKIP line and the report says so: never silently). Progress goes
# to stderr. Exit status 0 unless the script itself is misused.
#
# pgEdge snowflake needs no shared_preload_libraries (its _PG_init only
# defines the GUC snowflake.node), but snowflake.nextval() fails until
# snowflake.node (1..1023) is set: bench/bench.sh sets it in its cluster.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/pg.sh || exit 2
STATUS=${1:?usage: bench-peers.sh STATUS_FILE}
: >"$STATUS"
PEERS_DIR=$ROOT/target/peers
mkdir -p "$PEERS_DIR/build"

say() { echo "bench-peers: $*" >&2; }

# peer NAME VERSION SRC_VAR URL
peer() {
  local name=$1 version=$2 var=$3 url=$4 src tarball build
  src=${!var:-}
  tarball=$PEERS_DIR/$name-$version.tar.gz
  build=$PEERS_DIR/build/$name-$version-pg$PG_MAJOR
  skip() { echo "skip $name $version $*" >>"$STATUS"; say "SKIP $name $version: $*"; }
  rm -rf "$build"
  mkdir -p "$build"
  if [ -n "$src" ]; then
    if [ -d "$src" ]; then
      cp -a "$src/." "$build/" || { skip "cannot copy $var=$src"; return; }
    elif [ -f "$src" ]; then
      tar -xzf "$src" -C "$build" --strip-components=1 || { skip "$var=$src is not a readable .tar.gz"; return; }
    else
      skip "$var=$src: no such directory or tarball"; return
    fi
    say "$name $version from $var=$src"
  else
    if [ ! -f "$tarball" ]; then
      say "$name $version: no $tarball; downloading $url"
      if ! curl -fsSL --connect-timeout 5 --max-time 60 -o "$tarball.part" "$url"; then
        rm -f "$tarball.part"
        skip "no source: $var is not set, no $tarball, and the download of $url failed"
        return
      fi
      mv "$tarball.part" "$tarball"
    fi
    tar -xzf "$tarball" -C "$build" --strip-components=1 || { skip "$tarball is not a readable .tar.gz"; return; }
    say "$name $version from $tarball"
  fi
  if [ ! -f "$build/$name.control" ]; then
    skip "the source has no $name.control: not $name"; return
  fi
  if ! grep -Eq "^default_version = '$version|^default_version = '${version%.0}'" "$build/$name.control"; then
    say "note: $name.control says $(grep '^default_version' "$build/$name.control"), expected $version"
  fi
  if ! make -C "$build" USE_PGXS=1 PG_CONFIG="$PG_CONFIG" >"$build/make.log" 2>&1; then
    skip "make failed with PG_CONFIG=$PG_CONFIG (log: $build/make.log: $(tail -1 "$build/make.log"))"; return
  fi
  if ! make -C "$build" USE_PGXS=1 PG_CONFIG="$PG_CONFIG" install >>"$build/make.log" 2>&1; then
    skip "make install failed into $("$PG_CONFIG" --pkglibdir) (log: $build/make.log)"; return
  fi
  echo "ok $name $version" >>"$STATUS"
  say "$name $version installed into PostgreSQL $PG_MAJOR ($("$PG_CONFIG" --pkglibdir))"
}

peer snowflake 2.6.0 LEAF_ID_PEER_SNOWFLAKE_SRC https://github.com/pgEdge/snowflake/archive/refs/tags/v2.6.0.tar.gz
peer pg_uuidv7 1.6.0 LEAF_ID_PEER_UUIDV7_SRC https://github.com/fboulnois/pg_uuidv7/archive/refs/tags/v1.6.0.tar.gz
exit 0
