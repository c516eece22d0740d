#!/usr/bin/env bash
# The one place that installs what leaf_id's scripts need: every apt-get
# install and every pip, npm or cargo install of the project is here, and nowhere
# else. Callers hold one lock (target/.deps.lock) while they install, so two
# scripts started together never run apt-get, pip or npm at the same time;
# scripts/test.sh runs `deps.sh test` before it starts anything in parallel,
# and its jobs then find everything in place.
#
#   bash scripts/deps.sh base       # build and run leaf_id (scripts/setup.sh runs it)
#   bash scripts/deps.sh test       # base and what every test suite needs
#   bash scripts/deps.sh apt PKG... # more Debian packages (e.g. python3-matplotlib)
#   bash scripts/deps.sh citus | pg18-source | patroni | django | node | exporter | pgbouncer
#
# Groups:
#   base        Debian's PostgreSQL 15 and its headers, clang (pgrx), make,
#               pkg-config, sudo (cargo pgrx test --runas), dpkg-dev
#               (scripts/package.sh), libssl-dev (cargo-pgrx's build),
#               bzip2 (the PostgreSQL source tarball), Perl's IPC::Run (TAP), python3-pip (the
#               wheels of 16 to 18), the example clients' psycopg 3, psycopg2,
#               SQLAlchemy and ActiveRecord; and cargo-pgrx 0.18.1 (group pgrx,
#               with cargo install: leaf_id's build tool)
#   citus       Citus' build packages (scripts/citus.sh)
#   pg18-source PostgreSQL 18's build packages (scripts/pg18.sh, the fallback
#               when its wheel cannot be had)
#   patroni     Patroni 4.1.5 from PyPI, pinned by hash, into target/patroni-py
#   django      Django 5.2 and psycopg 3.2 from PyPI into target/pydeps
#   node        Node.js and npm (Debian's, when the machine has none), and the
#               example's pg and Sequelize (npm ci) into target/nodedeps
#   exporter    Debian's prometheus-postgres-exporter, downloaded and unpacked
#               into target/exporter (not installed)
#   pgbouncer   Debian's pgbouncer, downloaded and unpacked into
#               target/pgbouncer (not installed), and the libraries it loads
#   meta        pgxn_meta (PGXN's META.json validator) from crates.io into
#               target/tools, for a release (not part of the test command:
#               its build takes two minutes of the command's budget)
#   test        base, citus, rpm (package.sh rpm), patroni, django, node,
#               exporter, pgbouncer
#
# A project-local group whose registry cannot be reached is not a failure
# here: it writes the reason to target/deps/GROUP.skip, and the suite that
# needs it prints a SKIP line. With LEAF_ID_DEPS_READY=1 (scripts/test.sh sets
# it once `deps.sh test` ran) nothing is installed any more: a group that is
# not in place is a failure, said at once.
# Exit status: 0 in place (or skipped, see above); 2 usage; 1 failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=$ROOT/target/deps
mkdir -p "$DEPS"
export DEBIAN_FRONTEND=noninteractive
PYTHON=/usr/bin/python3

BASE_PKGS=(postgresql-15 postgresql-server-dev-15 postgresql-contrib libclang-dev clang libipc-run-perl sudo
  pkg-config make dpkg-dev libssl-dev bzip2 python3-pip python3-psycopg python3-psycopg2 python3-sqlalchemy
  ruby-activerecord ruby-pg)
CITUS_PKGS=(build-essential liblz4-dev libzstd-dev libkrb5-dev)
# the libraries Debian's pgbouncer binary loads (scripts/test-pgbouncer.sh)
PGBOUNCER_LIBS=(libevent-2.1-7 libc-ares2)
# scripts/package.sh rpm and the package test (rpmbuild, rpm)
RPM_PKGS=(rpm)
PG18_PKGS=(build-essential bison flex libreadline-dev zlib1g-dev libicu-dev libssl-dev pkg-config libipc-run-perl bzip2)
# Django 5.2 needs psycopg 3.1.8 or newer; bookworm has 3.1.7
DJANGO=('django>=5.2,<5.3' 'psycopg[binary]>=3.1.8,<3.3')
PATRONI_REQ=$ROOT/tests/patroni/requirements.txt

say() { echo "deps: $*" >&2; }
die() { say "$*"; exit 1; }
ready_only() { [ "${LEAF_ID_DEPS_READY:-}" = 1 ]; }
not_ready() { die "$1 is not in place and LEAF_ID_DEPS_READY=1 (run bash scripts/deps.sh $2 first)"; }

# apt PKG...: the Debian packages of PKG... that are missing, installed
apt_install() {
  local p missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  ready_only && not_ready "Debian packages ${missing[*]}" apt
  [ "$(id -u)" -eq 0 ] || die "not root, cannot apt-get install ${missing[*]} (install them, or run this as root)"
  say "installing Debian packages: ${missing[*]}"
  # a machine whose package lists were never fetched has none of them: fetch
  # the lists first when any is unknown to apt
  if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >"$DEPS/apt-update.log" 2>&1 ||
      { tail -n 20 "$DEPS/apt-update.log" >&2; die "apt-get update failed ($DEPS/apt-update.log)"; }
  fi
  # DPkg::Lock::Timeout: an apt run by someone else (not by these scripts,
  # which hold the lock above) is waited for, not failed on
  # (lists that are there but stale give 404s: fetched anew, then once more)
  apt-get install -y -q -o DPkg::Lock::Timeout=600 "${missing[@]}" >"$DEPS/apt-install.log" 2>&1 ||
    { apt-get update -q >>"$DEPS/apt-install.log" 2>&1 &&
      apt-get install -y -q -o DPkg::Lock::Timeout=600 "${missing[@]}" >>"$DEPS/apt-install.log" 2>&1; } ||
    { tail -n 30 "$DEPS/apt-install.log" >&2; die "apt-get install ${missing[*]} failed ($DEPS/apt-install.log)"; }
}

# unreachable LOG: whether LOG says a registry could not be reached
unreachable() { grep -qiE 'connection|resolve|network|timed out|temporary failure' "$1"; }
# skip GROUP REASON: the group cannot be had here; its suite says SKIP
skip() { say "$1: SKIPPED: $2"; echo "$2" >"$DEPS/$1.skip"; }

group_pgrx() {
  export PATH="$HOME/.cargo/bin:$PATH"
  cargo pgrx --version 2>/dev/null | grep -q '0\.18\.1' && return 0
  ready_only && not_ready "cargo-pgrx 0.18.1" pgrx
  command -v cargo >/dev/null || die "no cargo: leaf_id needs Rust (scripts/setup.sh says which)"
  say "installing cargo-pgrx 0.18.1 (a few minutes)"
  cargo install cargo-pgrx --version 0.18.1 --locked
}

# pgxn_meta, PGXN's META.json validator from crates.io, into target/tools
PGXN_META_VERSION=0.7.0
group_meta() {
  local root=$ROOT/target/tools
  "$root/bin/pgxn_meta" --version 2>/dev/null | grep -qF "$PGXN_META_VERSION" && return 0
  ready_only && not_ready "pgxn_meta $PGXN_META_VERSION ($root/bin)" meta
  export PATH="$HOME/.cargo/bin:$PATH"
  command -v cargo >/dev/null || die "no cargo: leaf_id needs Rust (scripts/setup.sh says which)"
  say "installing pgxn_meta $PGXN_META_VERSION into $root (a minute or two)"
  cargo install pgxn_meta --version "$PGXN_META_VERSION" --locked --root "$root" >"$DEPS/meta.log" 2>&1 ||
    { tail -n 20 "$DEPS/meta.log" >&2; die "cargo install pgxn_meta failed ($DEPS/meta.log)"; }
}

group_patroni() {
  local dir=$ROOT/target/patroni-py stamp
  stamp=$(sha256sum "$PATRONI_REQ" | cut -c1-16)
  [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ] && return 0
  ready_only && { [ -f "$DEPS/patroni.skip" ] && return 0; not_ready "Patroni ($dir)" patroni; }
  rm -rf "$dir" "$DEPS/patroni.skip"
  say "installing Patroni (tests/patroni/requirements.txt) into $dir"
  if ! "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
      --target "$dir" -r "$PATRONI_REQ" >"$DEPS/patroni-pip.log" 2>&1; then
    cat "$DEPS/patroni-pip.log" >&2
    unreachable "$DEPS/patroni-pip.log" || die "pip install of Patroni failed ($DEPS/patroni-pip.log)"
    skip patroni "PyPI cannot be reached (pip install -r tests/patroni/requirements.txt, $DEPS/patroni-pip.log)"
    return 0
  fi
  echo "$stamp" >"$dir/.stamp"
}

group_django() {
  local dir=$ROOT/target/pydeps
  PYTHONPATH=$dir "$PYTHON" -c 'import django, psycopg, sys; sys.exit(django.VERSION[:2] != (5, 2) or psycopg.__version__ < "3.1.8")' \
    2>/dev/null && return 0
  ready_only && not_ready "Django 5.2 ($dir)" django
  say "installing ${DJANGO[*]} into $dir"
  rm -rf "$dir"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --target "$dir" "${DJANGO[@]}" \
    >"$DEPS/django-pip.log" 2>&1 || { cat "$DEPS/django-pip.log" >&2; die "pip install of Django failed"; }
}

group_node() {
  local dir=$ROOT/target/nodedeps lock=$ROOT/examples/node/package-lock.json stamp
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
  fi
  stamp=$(sha256sum "$lock" | cut -c1-16)
  [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ] && return 0
  ready_only && { [ -f "$DEPS/node.skip" ] && return 0; not_ready "the Node.js example's modules ($dir)" node; }
  rm -rf "$dir" "$DEPS/node.skip"
  mkdir -p "$dir"
  cp "$ROOT/examples/node/package.json" "$lock" "$dir/"
  say "npm ci (examples/node/package-lock.json) into $dir"
  if ! (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >"$DEPS/npm.log" 2>&1); then
    cat "$DEPS/npm.log" >&2
    unreachable "$DEPS/npm.log" || die "npm ci failed ($DEPS/npm.log)"
    skip node "npm ci failed: the npm registry cannot be reached ($DEPS/npm.log)"
    return 0
  fi
  echo "$stamp" >"$dir/.stamp"
}

# fetch_deb GROUP PACKAGE BINARY: PACKAGE's .deb downloaded and unpacked into
# target/GROUP (nothing installed, no service started), done once BINARY is
# there; a download that fails is a skip of GROUP
fetch_deb() {
  local group=$1 pkg=$2 dir=$ROOT/target/$1
  [ -x "$dir/$3" ] && return 0
  ready_only && { [ -f "$DEPS/$group.skip" ] && return 0; not_ready "$pkg ($dir)" "$group"; }
  rm -rf "$dir" "$DEPS/$group.skip"
  mkdir -p "$dir"
  # a machine whose package lists were never fetched: fetch them once
  if ! (cd "$dir" && apt-get download "$pkg" >"$DEPS/$group.log" 2>&1) &&
    ! { [ "$(id -u)" = 0 ] && apt-get update -qq >>"$DEPS/$group.log" 2>&1 &&
        (cd "$dir" && apt-get download "$pkg" >>"$DEPS/$group.log" 2>&1); }; then
    cat "$DEPS/$group.log" >&2
    skip "$group" "apt-get download $pkg failed ($DEPS/$group.log)"
    return 0
  fi
  dpkg-deb -x "$dir/${pkg}"_*.deb "$dir"
}

run_group() {
  case $1 in
    base) apt_install "${BASE_PKGS[@]}"; group_pgrx ;;
    pgrx) group_pgrx ;;
    meta) group_meta ;;
    citus) apt_install "${CITUS_PKGS[@]}" ;;
    pg18-source) apt_install "${PG18_PKGS[@]}" ;;
    patroni) group_patroni ;;
    django) group_django ;;
    node) group_node ;;
    exporter) fetch_deb exporter prometheus-postgres-exporter usr/bin/prometheus-postgres-exporter ;;
    # PgBouncer's binary, and the libraries it loads (no service)
    pgbouncer) apt_install "${PGBOUNCER_LIBS[@]}"; fetch_deb pgbouncer pgbouncer usr/sbin/pgbouncer ;;
    # one apt-get for the packages, then the project-local ones
    test) apt_install "${BASE_PKGS[@]}" "${CITUS_PKGS[@]}" "${RPM_PKGS[@]}"
      group_pgrx
      for g in node django patroni exporter pgbouncer; do run_group "$g"; done ;;
    *) echo "usage: scripts/deps.sh base|test|pgrx|meta|citus|pg18-source|patroni|django|node|exporter|pgbouncer|apt PKG..." >&2; exit 2 ;;
  esac
}

[ $# -gt 0 ] || run_group usage
# one installer at a time, whoever calls (this script starts no server
# that could inherit the lock)
exec 8>"$ROOT/target/.deps.lock"
flock 8
if [ "$1" = apt ]; then
  shift
  [ $# -eq 0 ] || apt_install "$@"
  exit 0
fi
for g in "$@"; do run_group "$g"; done
