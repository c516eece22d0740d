#!/usr/bin/env bash
# Builds a package of leaf_id for one PostgreSQL major, with its files at the
# paths of the PGDG repositories' servers, whatever server it was built
# against (the one scripts/pg.sh picks for PG_MAJOR, or PG_CONFIG=...):
#
#   PG_MAJOR=17 bash scripts/package.sh        # .deb (the default)
#   PG_MAJOR=17 bash scripts/package.sh rpm    # .rpm
#
# deb: target/debian/postgresql-NN-leaf-id_<version>_<arch>.deb (Debian's
#      naming for extension packages), files in /usr/lib/postgresql/NN/lib and
#      /usr/share/postgresql/NN/extension (Debian's and PGDG apt's layout);
#      depends on postgresql-NN with the oldest minor the library loads on.
# rpm: target/rpm/RPMS/<arch>/leaf_id_NN-<version>-1.<arch>.rpm (PGDG yum's
#      naming, as pgvector_17 or pg_cron_17), files in /usr/pgsql-NN/lib and
#      /usr/pgsql-NN/share/extension; requires postgresqlNN-server with that
#      minor. Built with Debian's rpmbuild (package rpm, scripts/deps.sh).
# The payload: leaf_id.so, the control file, this version's install script
# and the base script and update chain of earlier versions
# (sql/leaf_id--*.sql), as scripts/install.sh installs them. The version is
# the crate's (Cargo.toml). Prints the package's path last.
# LEAF_ID_PKG_MAINTAINER (or LEAF_ID_DEB_MAINTAINER) sets the maintainer.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH="$HOME/.cargo/bin:$PATH"
. scripts/pg.sh
FORMAT=${1:-deb}
MAINTAINER=${LEAF_ID_PKG_MAINTAINER:-${LEAF_ID_DEB_MAINTAINER:-leaf_id maintainers <leaf-id@localhost>}}
case $FORMAT in
  deb) NAME=postgresql-$PG_MAJOR-leaf-id
    LIBDIR=/usr/lib/postgresql/$PG_MAJOR/lib EXTDIR=/usr/share/postgresql/$PG_MAJOR/extension ;;
  rpm) NAME=leaf_id_$PG_MAJOR
    LIBDIR=/usr/pgsql-$PG_MAJOR/lib EXTDIR=/usr/pgsql-$PG_MAJOR/share/extension
    command -v rpmbuild >/dev/null || bash scripts/deps.sh apt rpm ;;
  *) echo "usage: PG_MAJOR=NN scripts/package.sh [deb|rpm]" >&2; exit 2 ;;
esac
SUMMARY="Meituan Leaf distributed IDs for PostgreSQL $PG_MAJOR (leaf_id extension)"
DESCRIPTION="leaf_id brings Meituan Leaf's distributed ID generator into PostgreSQL:
64-bit IDs from SQL (roughly increasing, or opaque), shared by all sessions,
never handed out twice per tag or per worker id, across crashes and restarts.

Segment mode, leaf_segment_next(tag), hands out IDs from ranges reserved in
the table leaf_alloc by a background worker and held in shared memory.
Snowflake mode, leaf_snowflake_next(), builds time-based IDs with a worker
id claimed from the table leaf_worker.

The library must be preloaded: add leaf_id to shared_preload_libraries,
restart the server, then CREATE EXTENSION leaf_id SCHEMA leaf_id in each
database, in a schema only superusers own (see the README's quick start)."

# the [package] version: the first `version = "..."` line of Cargo.toml
VERSION=$(sed -n 's/^version[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' Cargo.toml | head -n 1)
[ -n "$VERSION" ] || { echo "package: no version in Cargo.toml" >&2; exit 1; }
# the oldest minor the library serves (src/runtime/pg_version.rs)
MIN_MINOR=$(perl -0ne 'print "$1.", $2 + 0 if /feature = "pg'"$PG_MAJOR"'"\)\]\npub const MIN_SERVER_VERSION_NUM: i64 = (\d+)(\d{4});/' src/runtime/pg_version.rs)
case $MIN_MINOR in $PG_MAJOR.[0-9]*) ;; *) echo "package: no minimum minor of PostgreSQL $PG_MAJOR in src/runtime/pg_version.rs" >&2; exit 1 ;; esac

# A no-op when the release build is fresh (scripts/install.sh just built it);
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
# pgrx's output, at the build server's own paths
PKG=$LEAF_ID_CARGO_TARGET/release/leaf_id-$PGRX_FEATURE

# stage DIR: the payload under DIR at the package's paths: exactly the files
# of this version, not whatever else an older build left in pgrx's output
stage() {
  local dir=$1
  install -d "$dir$LIBDIR" "$dir$EXTDIR"
  install -m 0644 "$PKG$PG_PKGLIBDIR/leaf_id.so" "$dir$LIBDIR/"
  install -m 0644 "$PKG$PG_EXTDIR/leaf_id.control" "$PKG$PG_EXTDIR/leaf_id--$VERSION.sql" "$dir$EXTDIR/"
  install -m 0644 sql/leaf_id--*.sql "$dir$EXTDIR/"
  grep -q "^default_version = '$VERSION'" "$dir$EXTDIR/leaf_id.control" || {
    echo "package: leaf_id.control's default_version is not $VERSION" >&2
    exit 1
  }
}

deb_control() {
  local stage=$1 shlibs=$2
  echo "Package: $NAME"
  echo "Version: $VERSION"
  echo "Architecture: $(dpkg --print-architecture)"
  echo "Maintainer: $MAINTAINER"
  echo "Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
  echo "Depends: postgresql-$PG_MAJOR (>= $MIN_MINOR), $shlibs"
  echo "Section: database"
  echo "Priority: optional"
  echo "Description: $SUMMARY"
  # the long description: each line indented, an empty line as " ."
  sed -e 's/^$/./' -e 's/^/ /' <<<"$DESCRIPTION"
}

build_deb() {
  local stage=$ROOT/target/debian/$NAME shl shlibs deb
  rm -rf "$stage"
  install -d "$stage/DEBIAN" "$stage/usr/share/doc/$NAME"
  stage "$stage"
  printf '%s\n' "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/" \
    "Upstream-Name: leaf_id" "" "Files: *" "License: Apache-2.0" \
    " On Debian systems, the full text of the Apache License, Version 2.0 is in" \
    " /usr/share/common-licenses/Apache-2.0." >"$stage/usr/share/doc/$NAME/copyright"
  # Library dependencies (libc6, libgcc-s1) as Debian computes them; dpkg-shlibdeps
  # wants a debian/control, so give it a minimal one in a scratch directory.
  shl=$(mktemp -d)
  mkdir "$shl/debian"
  printf 'Source: leaf-id\n\nPackage: %s\nArchitecture: any\n' "$NAME" >"$shl/debian/control"
  shlibs=$(cd "$shl" && dpkg-shlibdeps -O "$stage$LIBDIR/leaf_id.so" 2>/dev/null |
    sed -n 's/^shlibs:Depends=//p')
  rm -rf "$shl"
  [ -n "$shlibs" ] || { echo "package: dpkg-shlibdeps found no library dependencies" >&2; exit 1; }
  deb_control "$stage" "$shlibs" >"$stage/DEBIAN/control"
  (cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
  find "$stage" -type d -exec chmod 0755 {} +
  chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums"
  deb=$ROOT/target/debian/${NAME}_${VERSION}_$(dpkg --print-architecture).deb
  dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
  echo "$deb"
}

build_rpm() {
  local top=$ROOT/target/rpm arch rpm
  arch=$(uname -m)
  rm -rf "$top"
  install -d "$top/SPECS" "$top/payload"
  stage "$top/payload"
  install -D -m 0644 LICENSE "$top/payload/usr/share/licenses/$NAME/LICENSE"
  # The requirements are written out (AutoReqProv off: Debian's rpmbuild
  # would compute them against this machine's files): the server package,
  # and the newest version of the C library's symbols the library uses
  # (GLIBC_2.34: RHEL 9 and later), as rpm's own computation names it.
  local glibc
  glibc=$(objdump -T "$top/payload$LIBDIR/leaf_id.so" | grep -o 'GLIBC_[0-9][0-9.]*' | sort -uV | tail -n 1)
  [ -n "$glibc" ] || { echo "package: no GLIBC version in leaf_id.so's symbols" >&2; exit 1; }
  {
    echo "Name: $NAME"
    echo "Version: $VERSION"
    echo "Release: 1"
    echo "Summary: $SUMMARY"
    echo "License: Apache-2.0"
    echo "Packager: $MAINTAINER"
    echo "Requires: postgresql$PG_MAJOR-server >= $MIN_MINOR"
    echo "Requires: libc.so.6($glibc)(64bit)"
    echo "AutoReqProv: no"
    echo "%description"
    echo "$DESCRIPTION"
    echo "%install"
    echo "cp -a $top/payload/. %{buildroot}/"
    echo "%files"
    echo "%dir /usr/share/licenses/$NAME"
    echo "%license /usr/share/licenses/$NAME/LICENSE"
    echo "$LIBDIR/leaf_id.so"
    echo "$EXTDIR/leaf_id.control"
    echo "$EXTDIR/leaf_id--*.sql"
  } >"$top/SPECS/$NAME.spec"
  # xz payload: every RHEL-like rpm reads it
  rpmbuild -bb --define "_topdir $top" --define "_dbpath $top/rpmdb" --define "_build_id_links none" --define "__strip /bin/true" \
    --define "_binary_payload w6.xzdio" \
    --target "$arch" "$top/SPECS/$NAME.spec" >"$top/rpmbuild.log" 2>&1 ||
    { tail -n 30 "$top/rpmbuild.log" >&2; echo "package: rpmbuild failed ($top/rpmbuild.log)" >&2; exit 1; }
  rpm=$top/RPMS/$arch/$NAME-$VERSION-1.$arch.rpm
  [ -f "$rpm" ] || { echo "package: rpmbuild made no $rpm ($top/rpmbuild.log)" >&2; exit 1; }
  echo "$rpm"
}

"build_$FORMAT"
