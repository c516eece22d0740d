#!/usr/bin/env bash
# Build leaf_id (release) and install it into a PostgreSQL server: the
# system PostgreSQL 15, or the one of PG_CONFIG=... or PG_MAJOR=18
# (scripts/pg.sh), with the install and upgrade scripts of earlier versions
# (sql/leaf_id--*.sql). Each major has its own cargo target directory.
# Files are replaced by rename, so servers that have the old library mapped
# keep running on it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
. scripts/pg.sh
CARGO_TARGET_DIR=$LEAF_ID_CARGO_TARGET cargo pgrx package --pg-config "$PG_CONFIG" \
  --no-default-features --features "$PGRX_FEATURE" >/dev/null
PKG=$LEAF_ID_CARGO_TARGET/release/leaf_id-$PGRX_FEATURE
cp sql/leaf_id--*.sql "$PKG$PG_EXTDIR/"
(cd "$PKG" && find . -type f) | while read -r f; do
  dest=/${f#./}
  install -d "$(dirname "$dest")"
  cp "$PKG/$f" "$dest.leaf_id_tmp"
  mv -f "$dest.leaf_id_tmp" "$dest"
done
