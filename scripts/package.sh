#!/usr/bin/env bash
# Builds a Debian package of leaf_id for one PostgreSQL major (the system
# PostgreSQL 15, or PG_CONFIG=... / PG_MAJOR=18, scripts/pg.sh):
#   target/debian/postgresql-<major>-leaf-id_<version>_<arch>.deb
# (Debian's naming for extension packages: postgresql-<major>-<name>), from the
# output of `cargo pgrx package` (leaf_id-pg<major>), the payload paths from
# that major's pg_config, plus the frozen
# install and upgrade scripts of earlier versions (sql/leaf_id--*.sql), as
# scripts/install.sh installs them. `apt-get install ./that.deb` then needs
# only postgresql-<major> on the target machine, no Rust toolchain.
# The version is the crate's (Cargo.toml). Prints the .deb's path last.
# LEAF_ID_DEB_MAINTAINER overrides the Maintainer field.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH="$HOME/.cargo/bin:$PATH"
. scripts/pg.sh
NAME=postgresql-$PG_MAJOR-leaf-id
MAINTAINER=${LEAF_ID_DEB_MAINTAINER:-leaf_id maintainers <leaf-id@localhost>}

# the [package] version: the first `version = "..."` line of Cargo.toml
VERSION=$(sed -n 's/^version[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' Cargo.toml | head -n 1)
[ -n "$VERSION" ] || { echo "package: no version in Cargo.toml" >&2; exit 1; }
ARCH=$(dpkg --print-architecture)
# the oldest minor the library serves (src/runtime/pg_version.rs)
MIN_MINOR=$(perl -0ne 'print "$1.", $2 + 0 if /feature = "pg'"$PG_MAJOR"'"\)\]\npub const MIN_SERVER_VERSION_NUM: i64 = (\d+)(\d{4});/' src/runtime/pg_version.rs)
case $MIN_MINOR in $PG_MAJOR.[0-9]*) ;; *) echo "package: no minimum minor of PostgreSQL $PG_MAJOR in src/runtime/pg_version.rs" >&2; exit 1 ;; esac

# A no-op when target/release is fresh (scripts/install.sh just built it);
# say whether it compiled, so a test run shows a needless rebuild.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! CARGO_TARGET_DIR=$LEAF_ID_CARGO_TARGET cargo pgrx package --pg-config "$PG_CONFIG" \
  --no-default-features --features "$PGRX_FEATURE" >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
if grep -q 'Compiling leaf_id ' "$log"; then
  echo "package: cargo pgrx package compiled leaf_id"
else
  echo "package: cargo pgrx package compiled nothing (the release build was fresh)"
fi

PKG=$LEAF_ID_CARGO_TARGET/release/leaf_id-$PGRX_FEATURE
LIBDIR=$PG_PKGLIBDIR
EXTDIR=$PG_EXTDIR
STAGE=$ROOT/target/debian/$NAME
rm -rf "$STAGE"
install -d "$STAGE/DEBIAN" "$STAGE$LIBDIR" "$STAGE$EXTDIR" "$STAGE/usr/share/doc/$NAME"
# Exactly the files of this version, not whatever else an older build left
# in the pgrx output directory.
install -m 0644 "$PKG$LIBDIR/leaf_id.so" "$STAGE$LIBDIR/"
install -m 0644 "$PKG$EXTDIR/leaf_id.control" "$PKG$EXTDIR/leaf_id--$VERSION.sql" "$STAGE$EXTDIR/"
install -m 0644 sql/leaf_id--*.sql "$STAGE$EXTDIR/"
grep -q "^default_version = '$VERSION'" "$STAGE$EXTDIR/leaf_id.control" || {
  echo "package: leaf_id.control's default_version is not $VERSION" >&2
  exit 1
}
cat >"$STAGE/usr/share/doc/$NAME/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: leaf_id

Files: *
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF

# Library dependencies (libc6, libgcc-s1) as Debian computes them; dpkg-shlibdeps
# wants a debian/control, so give it a minimal one in a scratch directory.
shl=$(mktemp -d)
trap 'rm -f "$log"; rm -rf "$shl"' EXIT
mkdir "$shl/debian"
printf 'Source: leaf-id\n\nPackage: %s\nArchitecture: any\n' "$NAME" >"$shl/debian/control"
shlibs=$(cd "$shl" && dpkg-shlibdeps -O "$STAGE$LIBDIR/leaf_id.so" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || { echo "package: dpkg-shlibdeps found no library dependencies" >&2; exit 1; }

cat >"$STAGE/DEBIAN/control" <<EOF
Package: $NAME
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
Depends: postgresql-$PG_MAJOR (>= $MIN_MINOR), $shlibs
Section: database
Priority: optional
Description: Meituan Leaf distributed IDs for PostgreSQL $PG_MAJOR (leaf_id extension)
 leaf_id brings Meituan Leaf's distributed ID generator into PostgreSQL:
 globally unique, roughly increasing 64-bit IDs from SQL, shared by all
 sessions and safe across crashes and restarts.
 .
 Segment mode, leaf_segment_next(tag), hands out IDs from ranges reserved in
 the table leaf_alloc by a background worker and held in shared memory.
 Snowflake mode, leaf_snowflake_next(), builds time-based IDs with a worker
 id claimed from the table leaf_worker.
 .
 The library must be preloaded: add leaf_id to shared_preload_libraries,
 restart the server, then CREATE EXTENSION leaf_id in each database.
EOF
(cd "$STAGE" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
  xargs -0 md5sum) >"$STAGE/DEBIAN/md5sums"
find "$STAGE" -type d -exec chmod 0755 {} +
chmod 0644 "$STAGE/DEBIAN/control" "$STAGE/DEBIAN/md5sums"

DEB=$ROOT/target/debian/${NAME}_${VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group -Zxz --build "$STAGE" "$DEB" >/dev/null
echo "$DEB"
