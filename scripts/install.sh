#!/usr/bin/env bash
# Build leaf_id (release) and install it into the system PostgreSQL 15,
# with the install and upgrade scripts of earlier versions (sql/leaf_id--*.sql).
# Files are replaced by rename, so servers that have the old library mapped
# keep running on it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
cargo pgrx package --pg-config "$PG_CONFIG" >/dev/null
PKG=target/release/leaf_id-pg15
EXTDIR=$("$PG_CONFIG" --sharedir)/extension
cp sql/leaf_id--*.sql "$PKG$EXTDIR/"
(cd "$PKG" && find . -type f) | while read -r f; do
  dest=/${f#./}
  install -d "$(dirname "$dest")"
  cp "$PKG/$f" "$dest.leaf_id_tmp"
  mv -f "$dest.leaf_id_tmp" "$dest"
done
