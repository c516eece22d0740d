#!/usr/bin/env bash
# Tests the packages of scripts/package.sh for the major scripts/pg.sh picks
# (PG_MAJOR), as root: the .deb and the .rpm, each installed by its package
# manager into a server laid out at exactly the paths its package names:
#
# deb: /usr/lib/postgresql/NN (bin, lib) and /usr/share/postgresql/NN
#      (share), Debian's and PGDG apt's layout. Where Debian's postgresql-NN
#      is installed (15 on bookworm), that server. Elsewhere the test's own
#      server (PyPI's wheel, relocatable) is copied there, without leaf_id,
#      its share moved to /usr/share/postgresql/NN (a symlink where the wheel
#      looks for it), and a stand-in package postgresql-NN (no files; the
#      server's version) meets the .deb's dependency. apt-get installs the .deb.
# rpm: /usr/pgsql-NN, PGDG yum's layout: the wheel copied there (for 15 the
#      15.19 wheel, scripts/pg-wheel.sh 15; Debian's 15 is not relocatable),
#      and a stand-in rpm postgresqlNN-server meets the requirement; rpm -i
#      installs the .rpm.
# Each time: the package owns its files, the library is the packaged one, a
# throwaway cluster of that server (port PACKAGE_PORT, default 28880;
# target/package-cluster-NN-FORMAT) preloads it, CREATE EXTENSION makes this
# version and segment and snowflake IDs are drawn, all distinct. Then the
# package is removed and must leave no file behind; the stand-in and the
# copied server are removed too. A directory at those paths that the test
# did not make (a real PGDG server) is never touched: the test stops instead.
# On the way out the plain install of the test's own server is put back
# (scripts/install.sh), which Debian's 15 shares with the .deb.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/pg.sh
PORT=${PACKAGE_PORT:-28880}
MARK=.leaf_id-package-test-layout
export DEBIAN_FRONTEND=noninteractive
VERSION=$(bash scripts/check-version.sh --cargo-version)
[ -n "$VERSION" ] || { echo "test-package: no version" >&2; exit 1; }

fail() { echo "test-package: FAIL: $*" >&2; exit 1; }
# Debian's rpm warns on every call that dpkg is the package manager here;
# its database is the test's own (Debian's rpm would keep one in ~/.rpmdb)
RPMDB=$ROOT/target/package-rpmdb
rpm() { command rpm --force-debian --dbpath "$RPMDB" "$@"; }
# dpkg's lock is waited for (apt's timeout), never failed on
apt_get() { apt-get -y -q -o DPkg::Lock::Timeout=600 "$@"; }
TMPDEB=$ROOT/target/package-apt/leaf-id-test.deb
deb_installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]; }
# cleanup: what this test installs and lays out, gone (on the way out, and
# first, for what an interrupted run left); returns non-zero if something
# could not be removed
cleanup() {
  local rc=0 d
  for d in "$ROOT"/target/package-cluster-"$PG_MAJOR"-*; do
    [ -d "$d" ] && (PG_CONFIG=$(cat "$d/.pg_config" 2>/dev/null || echo "$PG_CONFIG"); . scripts/cluster.sh; cluster_stop "$d" immediate) || true
  done
  if deb_installed "postgresql-$PG_MAJOR-leaf-id"; then
    apt_get remove "postgresql-$PG_MAJOR-leaf-id" >/dev/null 2>&1 || rc=1
  fi
  if rpm -q "leaf_id_$PG_MAJOR" >/dev/null 2>&1; then rpm -e "leaf_id_$PG_MAJOR" >/dev/null 2>&1 || rc=1; fi
  if rpm -q "postgresql$PG_MAJOR-server" >/dev/null 2>&1; then rpm -e "postgresql$PG_MAJOR-server" >/dev/null 2>&1 || rc=1; fi
  if [ "$(dpkg-query -W -f='${Maintainer}' "postgresql-$PG_MAJOR" 2>/dev/null)" = "leaf_id package test" ]; then
    apt_get remove "postgresql-$PG_MAJOR" >/dev/null 2>&1 || rc=1
  fi
  for d in "/usr/lib/postgresql/$PG_MAJOR" "/usr/share/postgresql/$PG_MAJOR" "/usr/pgsql-$PG_MAJOR"; do
    if [ -e "$d/$MARK" ]; then rm -rf --one-file-system "$d" || rc=1; fi
  done
  # an empty directory rpm made for the licence, not a package's
  if [ -d /usr/share/licenses ] && [ ! -e "$ROOT/target/package-licenses-existed" ]; then
    rmdir /usr/share/licenses 2>/dev/null || true
  fi
  rm -rf "$ROOT/target/package-apt"
  return "$rc"
}
restore() {
  local rc=$?
  cleanup || rc=1
  echo "test-package: putting the plain install back (scripts/install.sh)"
  bash scripts/install.sh >"$ROOT/target/package-install$PG_SUFFIX.log" 2>&1 ||
    { tail -n 20 "$ROOT/target/package-install$PG_SUFFIX.log"; rc=1; }
  exit "$rc"
}
[ -d /usr/share/licenses ] && touch "$ROOT/target/package-licenses-existed"
cleanup || fail "what an earlier run left could not be removed"
rm -rf "$RPMDB"; mkdir -p "$RPMDB" "$ROOT/target/package-apt"
trap restore EXIT

# lay_out SRC_PREFIX DEST [SHARE]: the server of SRC_PREFIX copied to DEST
# without leaf_id's files; with SHARE, its share directory moved there and
# DEST/share a symlink to it. Refuses a DEST (or SHARE) it did not make.
lay_out() {
  local src=$1 dest=$2 share=${3:-} d
  for d in "$dest" $share; do
    if [ -e "$d" ] && [ ! -e "$d/$MARK" ]; then
      fail "$d exists and is not this test's (a server installed here?): not touching it"
    fi
    rm -rf --one-file-system "$d"
  done
  # the mark first: an interrupted copy is still known as the test's
  install -d "$dest"
  touch "$dest/$MARK"
  cp -a "$src/." "$dest/"
  rm -f "$dest"/lib/leaf_id.so "$dest"/share/extension/leaf_id*
  if [ -n "$share" ]; then
    install -d "$share"
    touch "$share/$MARK"
    cp -a "$dest/share/." "$share/"
    rm -rf "$dest/share"
    ln -s "$share" "$dest/share"
  fi
  chmod -R o+rX "$dest" $share
}

# check_ids PG_CONFIG FORMAT: a cluster of that server preloads leaf_id, and
# CREATE EXTENSION gives this version and distinct IDs of both modes
check_ids() (
  export PG_CONFIG=$1
  local data=$ROOT/target/package-cluster-$PG_MAJOR-$2 got
  . scripts/cluster.sh
  mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
  cluster_stop "$data" immediate
  cluster_init "$data" "$PORT" # preloads leaf_id
  echo "$PG_CONFIG" >"$data/.pg_config"
  cluster_start "$data"
  psql_q() { as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d postgres "$@"; }
  psql_q -c "CREATE EXTENSION leaf_id"
  [ "$(psql_q -c "SELECT extversion FROM pg_extension WHERE extname = 'leaf_id'")" = "$VERSION" ] ||
    fail "CREATE EXTENSION did not create version $VERSION"
  psql_q -c "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('pkg', 100)"
  # 1,000 single calls and a batch of 500 (several refills of step 100): all distinct
  got=$(psql_q -c "WITH ids AS (SELECT leaf_segment_next('pkg') AS id FROM generate_series(1, 1000)
                                UNION ALL SELECT leaf_segment_next('pkg', 500))
                   SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || min(id) FROM ids")
  [ "$got" = "1500 1500 1" ] || fail "segment IDs: count, distinct, min = $got (want 1500 1500 1)"
  # (the status is read after the draw: the first call waits for the worker id claim)
  got=$(psql_q -c "CREATE TEMP TABLE sf AS SELECT leaf_snowflake_next() AS id FROM generate_series(1, 1000)" \
    -c "SELECT count(DISTINCT id) || ' ' || bool_and(d.worker_id = s.worker_id)
               || ' ' || bool_and(abs(extract(epoch FROM d.timestamp - now())) < 60)
        FROM sf, leaf_snowflake_decode(sf.id) d, leaf_snowflake_status s")
  [ "$got" = "1000 true true" ] || fail "snowflake IDs: distinct, worker id, timestamp = $got (want 1000 true true)"
  [ "$(psql_q -c "SELECT setting FROM pg_settings WHERE name = 'dynamic_library_path'")" = '$libdir' ] ||
    fail "the server looks for libraries elsewhere than its pkglibdir"
  echo "test-package: $2: $("$PGBIN/postgres" --version) in $("$PG_CONFIG" --bindir): CREATE EXTENSION leaf_id $VERSION; 1500 segment and 1000 snowflake IDs, all distinct"
  cluster_stop "$data"
  rm -rf "$data"
)

# check_owned FORMAT PG_CONFIG FILE...: the package manager lists exactly these
# files of the payload, they are installed, and the library is the packaged one
check_files() {
  local format=$1 pgc=$2 owned f
  shift 2
  case $format in
    deb) owned=$(dpkg -L "postgresql-$PG_MAJOR-leaf-id") ;;
    rpm) owned=$(rpm -ql "leaf_id_$PG_MAJOR") ;;
  esac
  for f in "$@"; do
    grep -qxF "$f" <<<"$owned" || fail "$format: the package does not list $f"
    [ -f "$f" ] || fail "$format: $f is listed but not installed"
  done
  [ -f "$("$pgc" --pkglibdir)/leaf_id.so" ] || fail "$format: no leaf_id.so in the server's pkglibdir"
  [ -f "$("$pgc" --sharedir)/extension/leaf_id.control" ] || fail "$format: no leaf_id.control in the server's sharedir"
}

# check_gone FORMAT FILE...: after the removal, none of the files is left
check_gone() {
  local format=$1 f left=()
  shift
  for f in "$@"; do [ ! -e "$f" ] || left+=("$f"); done
  [ ${#left[@]} -eq 0 ] || fail "$format: the removal left ${left[*]}"
  echo "test-package: $format: removed, no file left"
}

# payload LIBDIR EXTDIR: the files a package of this version must install
payload() {
  local s
  echo "$1/leaf_id.so"; echo "$2/leaf_id.control"; echo "$2/leaf_id--$VERSION.sql"
  for s in sql/leaf_id--*.sql; do echo "$2/$(basename "$s")"; done
}

test_deb() {
  local deb server_pgc lib=/usr/lib/postgresql/$PG_MAJOR share=/usr/share/postgresql/$PG_MAJOR files ver
  deb=$(bash scripts/package.sh | tail -n 1)
  [ -f "$deb" ] || fail "scripts/package.sh made no .deb"
  echo "test-package: deb: $(basename "$deb"), Depends: $(dpkg-deb -f "$deb" Depends)"
  mapfile -t files < <(payload "$lib/lib" "$share/extension")
  if deb_installed "postgresql-$PG_MAJOR" &&
    [ "$(dpkg-query -W -f='${Maintainer}' "postgresql-$PG_MAJOR")" != "leaf_id package test" ]; then
    echo "test-package: deb: into Debian's postgresql-$PG_MAJOR"
  else
    ver=$("$PG_CONFIG" --version | awk '{print $2}')
    lay_out "$(dirname "$("$PG_CONFIG" --bindir)")" "$lib" "$share"
    stand_in_deb "$ver"
    echo "test-package: deb: into PostgreSQL $ver laid out at $lib and $share (stand-in postgresql-$PG_MAJOR $ver)"
  fi
  server_pgc=$lib/bin/pg_config
  [ "$("$server_pgc" --pkglibdir)" = "$lib/lib" ] || fail "deb: the server's pkglibdir is $("$server_pgc" --pkglibdir)"
  # apt reads the file as the _apt user: a copy it can read
  cp "$deb" "$TMPDEB"
  chmod 0755 "$(dirname "$TMPDEB")"; chmod 0644 "$TMPDEB"
  ensure_reach "$(dirname "$TMPDEB")"
  apt_get install --no-install-recommends "$TMPDEB" >"$ROOT/target/package-apt/apt.log" 2>&1 ||
    { cat "$ROOT/target/package-apt/apt.log"; fail "apt-get install of the .deb failed"; }
  check_files deb "$server_pgc" "${files[@]}"
  cmp -s "$lib/lib/leaf_id.so" "target/debian/postgresql-$PG_MAJOR-leaf-id$lib/lib/leaf_id.so" ||
    fail "deb: the installed library differs from the packaged one"
  check_ids "$server_pgc" deb
  apt_get remove "postgresql-$PG_MAJOR-leaf-id" >/dev/null 2>&1 || fail "apt-get remove of the .deb failed"
  check_gone deb "${files[@]}" "/usr/share/doc/postgresql-$PG_MAJOR-leaf-id"
}

# stand_in_deb VERSION: an empty package postgresql-NN of that version
stand_in_deb() {
  local dir=$ROOT/target/package-stand-in/deb
  rm -rf "$dir"; install -d "$dir/DEBIAN"
  printf '%s\n' "Package: postgresql-$PG_MAJOR" "Version: $1" "Architecture: all" \
    "Maintainer: leaf_id package test" "Description: stand-in for the server laid out by scripts/test-package.sh" \
    >"$dir/DEBIAN/control"
  dpkg-deb --root-owner-group --build "$dir" "$dir.deb" >/dev/null
  chmod 0644 "$dir.deb"
  ensure_reach "$(dirname "$dir")"
  apt_get install "$dir.deb" >/dev/null 2>&1 || fail "apt-get install of the stand-in postgresql-$PG_MAJOR failed"
}

# stand_in_rpm VERSION: an empty rpm postgresqlNN-server of that version
stand_in_rpm() {
  local top=$ROOT/target/package-stand-in/rpm
  rm -rf "$top"; install -d "$top/SPECS"
  # (rpm's database here is empty: the stand-in also provides the C
  # library's versions the .rpm requires, which a RHEL-like system's glibc has)
  printf '%s\n' "Name: postgresql$PG_MAJOR-server" "Version: $1" "Release: leafidtest" \
    "Summary: stand-in for the server laid out by scripts/test-package.sh" "License: PostgreSQL" \
    "BuildArch: noarch" "Provides: $2" "%description" "stand-in" "%files" >"$top/SPECS/stand-in.spec"
  rpmbuild -bb --quiet --define "_topdir $top" --define "_dbpath $RPMDB" "$top/SPECS/stand-in.spec" >/dev/null 2>&1 ||
    fail "rpmbuild of the stand-in failed"
  rpm -i "$top"/RPMS/noarch/*.rpm
}

test_rpm() {
  local rpmf prefix=/usr/pgsql-$PG_MAJOR src ver files
  rpmf=$(bash scripts/package.sh rpm | tail -n 1)
  [ -f "$rpmf" ] || fail "scripts/package.sh rpm made no .rpm"
  echo "test-package: rpm: $(basename "$rpmf"), requires: $(rpm -qpR "$rpmf" | grep -v '^rpmlib' | tr '\n' ' ')"
  src=$(dirname "$("$PG_CONFIG" --bindir)")
  if [ "$PG_MAJOR" = 15 ] && [ "$PG_CONFIG" = /usr/lib/postgresql/15/bin/pg_config ]; then
    # Debian's 15 is not relocatable: the 15.19 wheel, which the library serves too
    local out rc=0
    out=$(bash scripts/pg-wheel.sh 15) || rc=$?
    [ "$rc" = 0 ] || fail "rpm: no server of 15 to lay out at $prefix (scripts/pg-wheel.sh 15 exited $rc)"
    src=$(dirname "$(dirname "$(sed -n 's/^PG15_PG_CONFIG=//p' <<<"$out")")")
  fi
  ver=$("$src/bin/pg_config" --version | awk '{print $2}')
  mapfile -t files < <(payload "$prefix/lib" "$prefix/share/extension")
  lay_out "$src" "$prefix"
  stand_in_rpm "$ver" "$(rpm -qpR "$rpmf" | grep '^libc\.so' | tr '\n' ' ')"
  echo "test-package: rpm: into PostgreSQL $ver laid out at $prefix (stand-in postgresql$PG_MAJOR-server $ver)"
  rpm -i "$rpmf" || fail "rpm -i of the .rpm failed"
  check_files rpm "$prefix/bin/pg_config" "${files[@]}"
  cmp -s "$prefix/lib/leaf_id.so" "target/rpm/payload$prefix/lib/leaf_id.so" ||
    fail "rpm: the installed library differs from the packaged one"
  check_ids "$prefix/bin/pg_config" rpm
  rpm -e "leaf_id_$PG_MAJOR"
  check_gone rpm "${files[@]}" "/usr/share/licenses/leaf_id_$PG_MAJOR"
}

# ensure_reach DIR: the _apt user (apt's downloads) and postgres reach DIR
ensure_reach() { (. scripts/cluster.sh; ensure_postgres_can_reach "$1"); }

# The server is copied to the packages' paths: it must find its files
# relative to its programs (a wheel's does; one built from source with
# --prefix=target/pg18 has lib/postgresql and share/postgresql below it)
if [ "$("$PG_CONFIG" --pkglibdir)" != "$(dirname "$("$PG_CONFIG" --bindir)")/lib" ] &&
  [ "$PG_CONFIG" != /usr/lib/postgresql/15/bin/pg_config ]; then
  echo "################################################################################"
  echo "SKIP: the package test on $PG_MAJOR: this server ($PG_CONFIG) keeps its libraries in"
  echo "# $("$PG_CONFIG" --pkglibdir), not in lib/ beside its programs, so a copy at the PGDG paths"
  echo "# would not find leaf_id where the packages put it (a server built from source)"
  echo "################################################################################"
  exit 3
fi
test_deb
test_rpm
echo "test-package: passed (deb and rpm, PostgreSQL $PG_MAJOR)"
