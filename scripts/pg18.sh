#!/usr/bin/env bash
# Provide a PostgreSQL 18 server, built from source into target/pg18, for the
# test suites that run against 18 (Debian bookworm has no PostgreSQL 18 server
# package). The source is, in this order:
#   (a) the tarball named by LEAF_ID_PG18_TARBALL, checked against the sha256
#       of postgresql-18_18.6.orig.tar.bz2 (../shared/vendor/README.md; another
#       tarball needs LEAF_ID_PG18_SHA256 set to its own checksum);
#   (b) else the .orig tarball of Debian's source package postgresql-18,
#       fetched with apt through a private configuration in target/pg18-apt: a
#       deb-src line for Debian's development suite (LEAF_ID_PG18_APT_SUITE,
#       sid by default) on the archive this machine's apt already uses. Neither
#       /etc/apt nor the system's package lists are touched.
# It is built as Debian builds it where that matters (--with-openssl), with
# the TAP modules (--enable-tap-tests) and contrib: 3 to 7 minutes on 2 cores.
# Runs as root: it installs the build packages it lacks.
#
#   scripts/pg18.sh                            # build unless cached
#   eval "$(bash scripts/pg18.sh | tail -n 1)" # ... and set PG18_PG_CONFIG
#   scripts/pg18.sh fetch                      # only get and check the source
#
# Progress and errors go to stderr. stdout is a single line, the last one:
# PG18_PG_CONFIG=<repo>/target/pg18/bin/pg_config (`fetch`: PG18_SOURCE=<tarball>).
#
# Exit status:
#   0  the server is in target/pg18 (already, or now)
#   3  no source (LEAF_ID_PG18_TARBALL not set, and apt could not fetch
#      postgresql-18's source): a SKIP line says so; the caller must skip its
#      PostgreSQL 18 suite and say so too (never silently)
#   other  a real failure (tarball missing or with a wrong checksum, build error, ...)
#
# Cache: target/pg18/.leaf_id-source records the sha256 of the source once the
# install is complete. A run with LEAF_ID_PG18_TARBALL does nothing when that
# tarball has the recorded checksum; a run without it uses any complete build
# (it does not ask apt again). The build directory, target/pg18-build, is
# removed after a successful install (to save space); after a failure it is
# kept, with its logs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PREFIX=$ROOT/target/pg18
BUILD=$ROOT/target/pg18-build
APTDIR=$ROOT/target/pg18-apt
PG_CONFIG=$PREFIX/bin/pg_config
STAMP=$PREFIX/.leaf_id-source
# sha256 of postgresql-18_18.6.orig.tar.bz2 (../shared/vendor/README.md)
SHA256=${LEAF_ID_PG18_SHA256:-555610c24d53e4316da5b7d3fc25c279d96856d5e0e23ee308c328c5fa881d9f}
SUITE=${LEAF_ID_PG18_APT_SUITE:-sid}
MODE=${1:-install}
case $MODE in
  install | fetch) ;;
  *) echo "usage: scripts/pg18.sh [fetch]" >&2; exit 2 ;;
esac

say() { echo "pg18: $*" >&2; }
die() { echo "pg18: $*" >&2; exit 1; }
# The server runs as postgres: the installed files must be readable by others
umask 022

# Two callers at once (suites run in parallel) must not build into the same
# directories: the second one waits, then finds the cache.
mkdir -p "$ROOT/target"
exec 9>"$ROOT/target/.pg18.lock"
flock 9

# The sha256 recorded by a complete 18.x install in PREFIX; nothing otherwise.
cached_sha() {
  [ -x "$PG_CONFIG" ] && [ -f "$STAMP" ] || return 0
  [[ $("$PG_CONFIG" --version 2>/dev/null) == "PostgreSQL 18."* ]] || return 0
  sed -n 's/^sha256=//p' "$STAMP"
}

# postgres must reach PREFIX (the checkout may be under a private directory).
# Done on every run, cached or not: it is cheap, and ancestors can change.
make_reachable() {
  # In a subshell: nothing cluster.sh (and what it sources) sets leaks into
  # this script; PG_CONFIG, inherited, makes it pick this server.
  # shellcheck source=scripts/cluster.sh
  (source "$ROOT/scripts/cluster.sh" && ensure_postgres_can_reach "$PREFIX") ||
    die "scripts/cluster.sh's ensure_postgres_can_reach $PREFIX failed"
  runuser -u postgres -- "$PREFIX/bin/postgres" --version >/dev/null 2>&1 ||
    die "the postgres OS user cannot run $PREFIX/bin/postgres (check the permissions of $PREFIX and its parents)"
}

finish() {
  make_reachable
  echo "PG18_PG_CONFIG=$PG_CONFIG"
  exit 0
}

# "URI SIGNED-BY" of the entry of this machine's apt sources that serves its
# own Debian release (Suites has the codename, e.g. bookworm), so the private
# configuration uses the same archive (mirror, proxy rules) as the system.
# Handles both the one-line format (*.list) and deb822 (*.sources).
archive_uri() {
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || return 1
  {
    # one-line: deb [opt=val ...] URI SUITE COMPONENT...
    # (either file may be missing: cat's status does not matter)
    { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
      awk -v c="$codename" '
        { sub(/#.*/, "") }
        $1 == "deb" || $1 == "deb-src" {
          line = $0; sb = ""
          if (match(line, /\[[^]]*\]/)) {
            opts = substr(line, RSTART + 1, RLENGTH - 2)
            line = substr(line, 1, RSTART - 1) substr(line, RSTART + RLENGTH)
            n = split(opts, o, /[ \t]+/)
            for (i = 1; i <= n; i++) if (o[i] ~ /^signed-by=\//) sb = substr(o[i], 11)
          }
          split(line, f, /[ \t]+/)
          if (f[3] == c) print f[2], sb
        }'
    # deb822: paragraphs of "Field: value" lines
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -f "$f" ] || continue
      awk -v c="$codename" '
        function flush() {
          if (uri != "" && enabled != "no" && types ~ /(^| )deb(-src)?( |$)/ && index(" " suites " ", " " c " "))
            print uri, sb
          uri = ""; sb = ""; suites = ""; types = ""; enabled = ""
        }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^[^ \t][^:]*:/ {
          key = tolower(substr($0, 1, index($0, ":") - 1))
          val = substr($0, index($0, ":") + 1); gsub(/^[ \t]+|[ \t]+$/, "", val)
          if (key == "uris") { split(val, u, /[ \t]+/); uri = u[1] }
          else if (key == "suites") suites = val
          else if (key == "types") types = val
          else if (key == "enabled") enabled = tolower(val)
          else if (key == "signed-by" && val ~ /^\/[^ \t]*$/) sb = val
        }
        END { flush() }' "$f"
    done
  } | awk 'NR == 1 { print; found = 1 } END { exit !found }'
}

# (b): download postgresql-18's source with a private apt configuration and
# set SRC to its .orig tarball. On failure, says why (stderr) and returns 1.
apt_fetch() {
  local entry uri signed opts
  if ! entry=$(archive_uri); then
    say "apt: found no entry for this machine's Debian release in /etc/apt/sources.list{,.d/*}"
    return 1
  fi
  read -r uri signed <<<"$entry"
  [ -n "$signed" ] || [ ! -f /usr/share/keyrings/debian-archive-keyring.gpg ] ||
    signed=/usr/share/keyrings/debian-archive-keyring.gpg
  mkdir -p "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial"
  rm -rf "$APTDIR/source"
  mkdir -p "$APTDIR/source"
  # apt downloads as _apt (its sandbox user) into the current directory
  if id _apt >/dev/null 2>&1; then chown _apt "$APTDIR/source"; fi
  echo "deb-src${signed:+ [signed-by=$signed]} $uri $SUITE main" >"$APTDIR/sources.list"
  # Only our sources list, our package lists and our cache: the system's
  # /etc/apt/sources.list*, /var/lib/apt/lists and /var/cache/apt stay as they are.
  opts=(-o Dir::Etc::SourceList="$APTDIR/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o Dir::State::Lists="$APTDIR/lists" -o Dir::Cache="$APTDIR/cache")
  say "apt: fetching postgresql-18's source from $uri $SUITE (private configuration in $APTDIR)"
  if ! apt-get -q "${opts[@]}" update >"$APTDIR/update.log" 2>&1; then
    sed 's/^/pg18:   /' "$APTDIR/update.log" | tail -n 5 >&2
    say "apt: apt-get update of the private sources list failed ($APTDIR/update.log)"
    return 1
  fi
  if ! (cd "$APTDIR/source" && apt-get -q "${opts[@]}" source --download-only postgresql-18) \
    >"$APTDIR/source.log" 2>&1; then
    sed 's/^/pg18:   /' "$APTDIR/source.log" | tail -n 5 >&2
    say "apt: apt-get source --download-only postgresql-18 failed ($APTDIR/source.log)"
    return 1
  fi
  # apt checked the files against the signed Sources index. Build from the
  # upstream tarball only (not Debian's patches), like path (a).
  SRC=$(find "$APTDIR/source" -maxdepth 1 -name 'postgresql-18_18.*.orig.tar.*' ! -name '*.asc' -print -quit)
  if [ -z "$SRC" ]; then
    say "apt: postgresql-18's source has no postgresql-18_18.*.orig.tar.* ($(ls "$APTDIR/source" | tr '\n' ' '))"
    return 1
  fi
  SRC_DESC="apt: $(basename "$SRC") from $uri $SUITE"
}

SRC=${LEAF_ID_PG18_TARBALL:-}
if [ -n "$SRC" ]; then
  # asked for explicitly: a missing or wrong file is a failure, not a skip
  [ -f "$SRC" ] || die "LEAF_ID_PG18_TARBALL=$SRC is not a file"
  SRC=$(realpath "$SRC")
  SRC_SHA=$(sha256sum "$SRC" | cut -d' ' -f1)
  [ "$SRC_SHA" = "$SHA256" ] ||
    die "$SRC has sha256 $SRC_SHA, expected $SHA256 (set LEAF_ID_PG18_SHA256 for another tarball)"
  SRC_DESC="LEAF_ID_PG18_TARBALL: $(basename "$SRC")"
  if [ "$MODE" = install ] && [ "$(cached_sha)" = "$SRC_SHA" ]; then
    say "cached: $("$PG_CONFIG" --version) in $PREFIX, built from this tarball"
    finish
  fi
else
  if [ "$MODE" = install ] && [ -n "$(cached_sha)" ]; then
    say "cached: $("$PG_CONFIG" --version) in $PREFIX ($(sed -n 's/^source=//p' "$STAMP"); LEAF_ID_PG18_TARBALL not set, so not checked against a source)"
    finish
  fi
  if ! apt_fetch; then
    {
      echo "################################################################################"
      echo "SKIP: PostgreSQL 18: no source (set LEAF_ID_PG18_TARBALL or allow apt to fetch postgresql-18's source)"
      echo "# LEAF_ID_PG18_TARBALL is not set and apt could not fetch postgresql-18 (see"
      echo "# above), so there is no PostgreSQL 18 server in $PREFIX. Set it to"
      echo "# ../shared/vendor/postgresql-18_18.6.orig.tar.bz2 (absolute path)."
      echo "################################################################################"
    } >&2
    exit 3
  fi
  SRC_SHA=$(sha256sum "$SRC" | cut -d' ' -f1)
fi

if [ "$MODE" = fetch ]; then
  say "source: $SRC_DESC, sha256 $SRC_SHA"
  echo "PG18_SOURCE=$SRC"
  exit 0
fi

# the build packages: scripts/deps.sh, the one place that installs
bash "$ROOT/scripts/deps.sh" pg18-source

say "building PostgreSQL 18 from $SRC_DESC in $BUILD into $PREFIX (3 to 7 minutes on 2 cores)"
# a previous install with another source (or half done) must not leave files behind
rm -rf "$BUILD" "$PREFIX"
mkdir -p "$BUILD"
tar -xf "$SRC" -C "$BUILD" --strip-components=1
cd "$BUILD"
step() { # step NAME COMMAND...: run, log to $BUILD/NAME.log, show the log's end on failure
  local name=$1 t0=$SECONDS
  shift
  if ! "$@" >"$BUILD/$name.log" 2>&1; then
    grep -m 20 -E 'error|Error' "$BUILD/$name.log" >&2 || tail -n 30 "$BUILD/$name.log" >&2
    die "$name failed ($BUILD/$name.log)"
  fi
  say "$name: $((SECONDS - t0)) s"
}
# --with-openssl as Debian: without it gen_random_uuid() and uuidv7() read
# /dev/urandom on each call, twice as slow, which would flatter leaf_id in a
# benchmark. No LLVM: JIT is not tested, and it saves minutes.
step configure ./configure --prefix="$PREFIX" --enable-tap-tests --without-llvm --with-openssl
step make make -j2
# installs the TAP modules too (lib/postgresql/pgxs/src/test/perl)
step install make install
step contrib make -j2 -C contrib install
cd "$ROOT"

version=$("$PG_CONFIG" --version)
[[ $version == "PostgreSQL 18."* ]] || die "$PG_CONFIG reports \"$version\", not PostgreSQL 18"
printf 'sha256=%s\nsource=%s\n' "$SRC_SHA" "$SRC_DESC" >"$STAMP"
rm -rf "$BUILD"
# the downloaded source (b) is not needed any more; the private lists are kept
rm -rf "$APTDIR/source"
say "installed: $version in $PREFIX (build took $SECONDS s)"
finish
