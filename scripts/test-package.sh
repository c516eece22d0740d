#!/usr/bin/env bash
# Tests the Debian package (scripts/package.sh) on this machine, as root:
# builds it, installs it with apt-get, checks that the package owns the
# library and the extension files, starts a throwaway cluster
# (target/package-cluster, port PACKAGE_PORT, default 28880) with leaf_id
# preloaded, creates the extension and draws segment and snowflake IDs, then
# removes the package and checks that it left no file behind.
#
# The package replaces the files scripts/install.sh put into the system
# PostgreSQL 15 (the same build), and removing it deletes them: on the way
# out this script removes the package if it is still installed and puts the
# plain install back with scripts/install.sh, so the other suites still find
# leaf_id. Run it while no other server on the machine needs to load leaf_id
# (the test command runs it between its suites).
#
# For the server scripts/pg.sh picks (PG_MAJOR=16..18, PG_CONFIG). A major
# with no Debian server package here (16, 17, 18 on bookworm: from wheels or
# built from source) cannot be installed with apt-get (the package depends on
# postgresql-NN): the test checks that the payload is exactly the files at
# that server's pg_config directories and that the package depends on
# postgresql-NN, unpacks it with dpkg-deb -x into target/package-unpack-pgNN,
# copies its files (only they) into the server, checks that no directory on
# their paths changed, and draws IDs as above.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/cluster.sh
NAME=postgresql-$PG_MAJOR-leaf-id
DATA=$ROOT/target/package-cluster$PG_SUFFIX
UNPACK=$ROOT/target/package-unpack$PG_SUFFIX
# apt-get can install the package only where the server is a Debian package
if dpkg -s "postgresql-$PG_MAJOR" >/dev/null 2>&1; then VIA_APT=1; else VIA_APT=0; fi
PORT=${PACKAGE_PORT:-28880}
export DEBIAN_FRONTEND=noninteractive

fail() { echo "test-package: FAIL: $*" >&2; exit 1; }
installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$NAME" 2>/dev/null)" = installed ]; }
restore() {
  local rc=$?
  cluster_stop "$DATA" immediate || true
  if installed; then dpkg -r "$NAME" >/dev/null 2>&1 || rc=1; fi
  echo "test-package: putting the plain install back (scripts/install.sh)"
  bash scripts/install.sh >"$ROOT/target/package-install$PG_SUFFIX.log" 2>&1 ||
    { tail -n 20 "$ROOT/target/package-install$PG_SUFFIX.log"; rc=1; }
  exit "$rc"
}
trap restore EXIT

out=$(bash scripts/package.sh)
echo "$out"
DEB=$(tail -n 1 <<<"$out")
[ -f "$DEB" ] || fail "scripts/package.sh made no package"
VERSION=$(dpkg-deb -f "$DEB" Version)
echo "test-package: $(basename "$DEB")"

LIB=$PG_PKGLIBDIR/leaf_id.so
EXT=$PG_EXTDIR
expected=("$LIB" "$EXT/leaf_id.control" "$EXT/leaf_id--$VERSION.sql")
for s in sql/leaf_id--*.sql; do expected+=("$EXT/$(basename "$s")"); done
if [ "$VIA_APT" = 0 ]; then
  dpkg-deb -f "$DEB" Depends | grep -q "^postgresql-$PG_MAJOR (>= $PG_MAJOR\\." ||
    fail "the package does not depend on postgresql-$PG_MAJOR: $(dpkg-deb -f "$DEB" Depends)"
  payload=$(dpkg-deb -c "$DEB" | awk '$1 !~ /^d/ {print substr($6, 2)}' | grep -v "^/usr/share/doc/" | sort)
  want=$(printf '%s\n' "${expected[@]}" | sort)
  [ "$payload" = "$want" ] || fail "the payload is not the files at $PG_CONFIG's directories:
$(diff <(echo "$want") <(echo "$payload"))"
  echo "test-package: no Debian package postgresql-$PG_MAJOR here: the payload is the ${#expected[@]} files at its pg_config directories; unpacking it into the server (dpkg-deb -x into $UNPACK, then the files only)"
  # Not dpkg-deb -x into /: it also sets the mode of every directory on the
  # payload's paths (/, /work, /tmp... when the checkout is below them) to the
  # package's 0755. A test changes no directory outside the checkout and its
  # own servers: only the files are copied, by rename (as scripts/install.sh,
  # so that running servers keep the library they mapped), into directories
  # that exist; the modes of those directories and their ancestors are checked.
  modes() {
    local f d
    for f in "${expected[@]}"; do
      d=$(dirname "$f")
      while :; do
        stat -c '%a %U:%G %n' "$d"
        [ "$d" != / ] || break
        d=$(dirname "$d")
      done
    done | sort -u
  }
  before=$(modes)
  rm -rf "$UNPACK"
  mkdir -p "$UNPACK"
  dpkg-deb -x "$DEB" "$UNPACK"
  for f in "${expected[@]}"; do
    [ -d "$(dirname "$f")" ] || fail "$(dirname "$f") (the server's directory for $(basename "$f")) does not exist"
    cp "$UNPACK$f" "$f.leaf_id_tmp"
    chmod 0644 "$f.leaf_id_tmp"
    mv -f "$f.leaf_id_tmp" "$f"
  done
  rm -rf "$UNPACK"
  after=$(modes)
  [ "$before" = "$after" ] || fail "unpacking changed directories:
$(diff <(echo "$before") <(echo "$after"))"
  cmp -s "$LIB" "target/debian/$NAME$LIB" || fail "the unpacked library differs from the packaged one"
fi

if [ "$VIA_APT" = 1 ]; then
# a leftover of an interrupted run would make the install below a no-op
if installed; then dpkg -r "$NAME" >/dev/null 2>&1; fi
# apt reads the file as the _apt user when it can, else it says so: copy it
# to a place _apt can read
cp "$DEB" /tmp/leaf-id-test.deb
chmod 0644 /tmp/leaf-id-test.deb
apt-get install -y -q --no-install-recommends /tmp/leaf-id-test.deb >/tmp/leaf-id-test-apt.log 2>&1 ||
  { cat /tmp/leaf-id-test-apt.log; fail "apt-get install of the package failed"; }
rm -f /tmp/leaf-id-test.deb
installed || fail "$NAME is not installed after apt-get install"
[ "$(dpkg-query -W -f='${Version}' "$NAME")" = "$VERSION" ] || fail "installed version is not $VERSION"

owned=$(dpkg -L "$NAME")
for f in "${expected[@]}"; do
  grep -qxF "$f" <<<"$owned" || fail "dpkg -L $NAME does not list $f"
  [ -f "$f" ] || fail "$f is listed but not installed"
  [ "$(dpkg -S "$f" | cut -d: -f1)" = "$NAME" ] || fail "dpkg -S $f does not name $NAME"
done
cmp -s "$LIB" "target/debian/$NAME$LIB" || fail "the installed library differs from the packaged one"
echo "test-package: $NAME $VERSION installed; it owns the library, the control file and ${#expected[@]} files in all"
fi

mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
cluster_stop "$DATA" immediate
cluster_init "$DATA" "$PORT" # preloads leaf_id
cluster_start "$DATA"
psql_q() { as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d postgres "$@"; }
psql_q -c "CREATE EXTENSION leaf_id"
[ "$(psql_q -c "SELECT extversion FROM pg_extension WHERE extname = 'leaf_id'")" = "$VERSION" ] ||
  fail "CREATE EXTENSION did not create version $VERSION"
psql_q -c "INSERT INTO leaf_alloc (biz_tag, step) VALUES ('pkg', 100)"
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
echo "test-package: CREATE EXTENSION leaf_id $VERSION; 1500 segment and 1000 snowflake IDs, all distinct"
cluster_stop "$DATA"
[ "$VIA_APT" = 1 ] || { echo "test-package: passed"; exit 0; }

dpkg -r "$NAME" >/dev/null 2>&1 || fail "dpkg -r $NAME failed"
! installed || fail "$NAME is still installed after dpkg -r"
left=()
while read -r f; do
  # directories such as /usr/lib/postgresql/15/lib belong to postgresql-15 too
  if [ -e "$f" ] && [ ! -d "$f" ]; then left+=("$f"); fi
done <<<"$owned"
[ ${#left[@]} -eq 0 ] || fail "dpkg -r left ${left[*]}"
[ ! -e "/usr/share/doc/$NAME" ] || fail "dpkg -r left /usr/share/doc/$NAME"
echo "test-package: dpkg -r removed every file of the package"
echo "test-package: passed"
