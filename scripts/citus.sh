#!/usr/bin/env bash
# Make sure Citus is installed into the PostgreSQL that scripts/pg.sh picks
# (PG_MAJOR=15, the system's, by default; 16 to 18 from the wheels in
# target/pgNN), for the Citus test suite (tests/citus). No package registry
# here has Citus, so it is built from a source tarball (a `git archive` of
# github.com/citusdata/citus):
#   15        Citus 13.2.2, from LEAF_ID_CITUS_TARBALL (the last Citus line
#             for 15; it supports 15 to 17)
#   16 to 18  Citus 14.0.1, from LEAF_ID_CITUS14_TARBALL (14 supports 16 to 18)
# Nothing of Citus is part of leaf_id or of this repository.
#
#   scripts/citus.sh                 # install Citus into 15 if it is missing
#   PG_MAJOR=17 scripts/citus.sh     # ... into 17
#   scripts/citus.sh build           # only build (no install; needs no lock)
#
# Exit status:
#   0  Citus is installed (already, or now)
#   3  Citus is not installed and the major's tarball variable is not set:
#      the Citus suite must be skipped, and the caller prints a SKIP line
#      (never silently)
#   other  a real failure (bad checksum, build error, ...)
#
# The build is cached under target/citus-build (one directory per tarball
# checksum and major, with a stamp file once `make` succeeded), so a second
# run after the installed files were removed does not rebuild, it only runs
# `make install`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/pg.sh
# the Citus line of each major, its tarball variable and sha256
# (../shared/vendor/README.md); another tarball needs LEAF_ID_CITUS_SHA256
# (13) or LEAF_ID_CITUS14_SHA256 (14)
case $PG_MAJOR in
  15) CITUS=13.2.2 TARBALL_VAR=LEAF_ID_CITUS_TARBALL
    SHA256=${LEAF_ID_CITUS_SHA256:-dd2453caec20a830e5e63f1def5c5a98cb6f57ae510407cdcd800916fcdab430} ;;
  16 | 17 | 18) CITUS=14.0.1 TARBALL_VAR=LEAF_ID_CITUS14_TARBALL
    SHA256=${LEAF_ID_CITUS14_SHA256:-26ddb8ec9de07c5fa8426e435d10936e5cd6bed01a5ad94aab92e818081e5ec9} ;;
  *) echo "citus: no Citus for PostgreSQL $PG_MAJOR here (13.2.2 for 15, 14.0.1 for 16 to 18)" >&2; exit 2 ;;
esac
PGLIB=$("$PG_CONFIG" --pkglibdir)
PGSHARE=$("$PG_CONFIG" --sharedir)
MODE=${1:-install}

installed() { [ -e "$PGLIB/citus.so" ] && [ -e "$PGSHARE/extension/citus.control" ]; }

if [ "$MODE" = install ] && installed; then
  echo "citus: installed ($(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$PGSHARE/extension/citus.control"))"
  exit 0
fi

TARBALL=${!TARBALL_VAR:-}
if [ -z "$TARBALL" ]; then
  {
    echo "################################################################################"
    echo "# citus: Citus is NOT installed and $TARBALL_VAR is not set, so the"
    echo "# Citus suite (tests/citus) cannot run on PostgreSQL $PG_MAJOR. Set $TARBALL_VAR"
    echo "# to citus-$CITUS.tar.gz (.ci/run does), or install Citus for PostgreSQL $PG_MAJOR yourself."
    echo "################################################################################"
  } >&2
  exit 3
fi
if [ ! -f "$TARBALL" ]; then
  # asked for explicitly: a failure, not a skip
  echo "citus: $TARBALL_VAR=$TARBALL is not a file" >&2
  exit 1
fi

actual=$(sha256sum "$TARBALL" | cut -d' ' -f1)
if [ "$actual" != "$SHA256" ]; then
  echo "citus: $TARBALL has sha256 $actual, expected $SHA256 (set LEAF_ID_CITUS_SHA256 or LEAF_ID_CITUS14_SHA256 for another tarball)" >&2
  exit 1
fi

# the build packages: scripts/deps.sh, the one place that installs
bash scripts/deps.sh citus
[ "$PG_MAJOR" = 15 ] && [ "$PG_CONFIG" = /usr/lib/postgresql/15/bin/pg_config ] && bash scripts/deps.sh apt postgresql-server-dev-15

BUILD=$ROOT/target/citus-build/$SHA256-pg$PG_MAJOR
if [ -e "$BUILD/.built" ]; then
  echo "citus: using the cached build in $BUILD"
else
  echo "citus: building from $TARBALL for $("$PG_CONFIG" --version) in $BUILD (a few minutes on 2 cores)"
  rm -rf "$BUILD"
  mkdir -p "$BUILD"
  tar -xzf "$TARBALL" -C "$BUILD" --strip-components=1
  cd "$BUILD"
  # PostgreSQL 15.20's headers declare have_createdb_privilege() and Citus
  # 13.2.2 defines its own static copy for PG < 16: rename Citus's copy.
  if grep -q '^have_createdb_privilege(void)$' src/include/pg_version_compat.h; then
    sed -i '/^static inline bool$/{N;s/^static inline bool\nhave_createdb_privilege(void)$/#define have_createdb_privilege citus_have_createdb_privilege_compat\n&/}' \
      src/include/pg_version_compat.h
  fi
  PG_CONFIG=$PG_CONFIG ./configure --without-libcurl >"$BUILD/configure.log" 2>&1 ||
    { tail -n 30 "$BUILD/configure.log" >&2; echo "citus: configure failed ($BUILD/configure.log)" >&2; exit 1; }
  make -j"$(nproc)" with_llvm=no >"$BUILD/make.log" 2>&1 ||
    { grep -m 20 -i 'error' "$BUILD/make.log" >&2 || true; echo "citus: make failed ($BUILD/make.log)" >&2; exit 1; }
  touch "$BUILD/.built"
  cd "$ROOT"
fi

[ "$MODE" = build ] && exit 0

echo "citus: make install"
make -C "$BUILD" with_llvm=no install >"$BUILD/install.log" 2>&1 ||
  { tail -n 30 "$BUILD/install.log" >&2; echo "citus: make install failed ($BUILD/install.log)" >&2; exit 1; }
installed || { echo "citus: make install did not install citus.so and citus.control" >&2; exit 1; }
echo "citus: installed ($(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$PGSHARE/extension/citus.control"))"
