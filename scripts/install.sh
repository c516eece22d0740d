#!/usr/bin/env bash
# Build leaf_id (release) and install it into the PostgreSQL server whose
# pg_config is PG_CONFIG, any major from 15 to 18:
#
#   PG_CONFIG=/usr/lib/postgresql/17/bin/pg_config bash scripts/install.sh   # Debian/Ubuntu (PGDG apt)
#   PG_CONFIG=/usr/pgsql-17/bin/pg_config bash scripts/install.sh            # RHEL-like (PGDG yum)
#
# Without PG_CONFIG: the server the test scripts pick (scripts/pg.sh:
# PG_MAJOR=16..18 in target/pgNN, else Debian's 15).
#
# It needs Rust (cargo 1.85 or newer), a C compiler and make, clang with
# libclang (pgrx generates its bindings with it), the server's headers
# (pg_config --includedir-server), and, to build cargo-pgrx when it is
# missing, OpenSSL's headers and pkg-config; it names the packages for this
# distribution when one is missing. cargo-pgrx 0.18.1 is installed into
# ~/.cargo when missing (scripts/deps.sh pgrx). The files go into
# pg_config --pkglibdir (leaf_id.so) and --sharedir/extension (the control
# file, the install script, and the first version's install script with the
# chain of update scripts, sql/leaf_id--*.sql): directories of root, so run it as root.
# Files are replaced by rename, so servers that have the old library mapped
# keep running on it. Each major has its own cargo target directory.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/need-rust.sh
. scripts/pg.sh

# prereq_hint WHAT: the packages that provide WHAT on this distribution
prereq_hint() {
  local id like
  id=$(. /etc/os-release 2>/dev/null && echo "${ID:-}")
  like=$(. /etc/os-release 2>/dev/null && echo "${ID_LIKE:-}")
  case " $id $like " in
    *" debian "* | *" ubuntu "*)
      echo "apt-get install postgresql-server-dev-$PG_MAJOR clang libclang-dev build-essential libssl-dev pkg-config" \
        "(postgresql-server-dev-$PG_MAJOR from the PGDG apt repository when the server is PGDG's)" ;;
    *" rhel "* | *" fedora "* | *" centos "*)
      echo "dnf install postgresql$PG_MAJOR-devel clang clang-devel gcc make openssl-devel pkgconf" \
        "(postgresql$PG_MAJOR-devel from the PGDG yum repository; on RHEL 8 and 9 its dependencies need the" \
        "CodeReady Builder / PowerTools repository enabled)" ;;
    *) echo "the server's development files (headers, pgxs), clang and libclang, a C compiler, make," \
      "and OpenSSL's headers with pkg-config (to build cargo-pgrx)" ;;
  esac
}
missing=()
[ -f "$("$PG_CONFIG" --includedir-server)/postgres.h" ] ||
  missing+=("the server's headers ($("$PG_CONFIG" --includedir-server)/postgres.h)")
command -v clang >/dev/null 2>&1 || missing+=("clang")
# (the list read whole first: with pipefail, grep -q's early exit would
# fail ldconfig with SIGPIPE)
libs=$(ldconfig -p 2>/dev/null || true)
grep -q 'libclang[-.0-9]*\.so' <<<"$libs" || [ -n "${LIBCLANG_PATH:-}" ] ||
  missing+=("libclang (or LIBCLANG_PATH naming its directory)")
command -v cc >/dev/null 2>&1 || missing+=("a C compiler (cc)")
command -v make >/dev/null 2>&1 || missing+=("make")
# cargo-pgrx, built once by scripts/deps.sh when missing, links OpenSSL
# (openssl-sys finds it with pkg-config)
if ! cargo pgrx --version 2>/dev/null | grep -q '0\.18\.1'; then
  command -v pkg-config >/dev/null 2>&1 || missing+=("pkg-config (to build cargo-pgrx)")
  pkg-config --exists openssl 2>/dev/null || missing+=("OpenSSL's headers (to build cargo-pgrx)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "install: missing to build leaf_id for PostgreSQL $PG_MAJOR ($PG_CONFIG):" >&2
  printf 'install:   %s\n' "${missing[@]}" >&2
  echo "install: on this machine, as root: $(prereq_hint)" >&2
  exit 1
fi
for dir in "$PG_PKGLIBDIR" "$PG_EXTDIR"; do
  [ -w "$dir" ] || { echo "install: cannot write $dir: run this as root (or as the owner of the server's directories)" >&2; exit 1; }
done

bash scripts/deps.sh pgrx
# pgrx's registry of servers: scripts/setup.sh's (this checkout's servers)
# when it names this pg_config, else one of this install's own, naming only it
if ! grep -qxF "pg$PG_MAJOR = \"$PG_CONFIG\"" "$PGRX_HOME/config.toml" 2>/dev/null; then
  export PGRX_HOME=$ROOT/target/pgrx-install-pg$PG_MAJOR
  mkdir -p "$PGRX_HOME"
  printf '[configs]\npg%s = "%s"\n' "$PG_MAJOR" "$PG_CONFIG" >"$PGRX_HOME/config.toml"
fi

echo "install: building leaf_id for $("$PG_CONFIG" --version) ($PG_CONFIG)"
CARGO_TARGET_DIR=$LEAF_ID_CARGO_TARGET cargo pgrx package --pg-config "$PG_CONFIG" \
  --no-default-features --features "$PGRX_FEATURE" >/dev/null
PKG=$LEAF_ID_CARGO_TARGET/release/leaf_id-$PGRX_FEATURE
VERSION=$(bash scripts/check-version.sh --cargo-version)
# this server's files only (pgrx's output directory keeps the trees of
# earlier builds for other servers of the major), each replaced by a rename
install_file() {
  install -d "$2"
  cp "$1" "$2/$(basename "$1").leaf_id_tmp"
  mv -f "$2/$(basename "$1").leaf_id_tmp" "$2/$(basename "$1")"
}
install_file "$PKG$PG_PKGLIBDIR/leaf_id.so" "$PG_PKGLIBDIR"
install_file "$PKG$PG_EXTDIR/leaf_id.control" "$PG_EXTDIR"
install_file "$PKG$PG_EXTDIR/leaf_id--$VERSION.sql" "$PG_EXTDIR"
for f in sql/leaf_id--*.sql; do install_file "$f" "$PG_EXTDIR"; done
# scripts an earlier build left (the full install scripts of old versions,
# which the update chain replaced; a newer version's) go: the server's
# scripts are this build's, as a package's are
for f in "$PG_EXTDIR"/leaf_id--*.sql; do
  name=${f##*/}
  [ -e "$f" ] && [ "$name" != "leaf_id--$VERSION.sql" ] && [ ! -e "sql/$name" ] || continue
  rm -f "$f"
  echo "install: removed $f (not a script of this build)"
done
echo "install: leaf_id installed: $PG_PKGLIBDIR/leaf_id.so and $PG_EXTDIR/leaf_id.control" \
  "with $(($(find sql -name 'leaf_id--*.sql' | wc -l) + 1)) install and upgrade scripts"
echo "install: next, preload it (shared_preload_libraries = 'leaf_id'), restart the server, and" \
  "CREATE EXTENSION leaf_id in each database (README.md, Quick start)"
