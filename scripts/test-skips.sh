#!/usr/bin/env bash
# The test command's verdict on skips (scripts/skips.sh): with
# LEAF_ID_REQUIRE_ALL=1 a run with any skip fails and lists each; with 0 it
# passes and says them; what the choice of majors left out never fails.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/skips.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "test-skips: $*" >&2; exit 1; }

: >"$dir/none"
out=$(report_skips "$dir/none" 1 15,16 "Citus tests on 18: not run") || fail "no skip, REQUIRE_ALL=1: failed"
case $out in *"all suites passed on PostgreSQL 15,16, but: Citus tests on 18: not run"*) ;; *) fail "no skip: said $out" ;; esac

printf '%s\n' "Citus tests (PostgreSQL 18): SKIPPED (see its SKIP line above)" \
  "TAP 075_pg_upgrade_from_older_majors.pl: SKIPPED (no older major)" >"$dir/two"
rc=0; out=$(report_skips "$dir/two" 1 15,16,17,18) || rc=$?
[ "$rc" = 1 ] || fail "two skips, REQUIRE_ALL=1: exit $rc, not 1"
case $out in *"FAILED: the run skipped"*"==   Citus tests (PostgreSQL 18): SKIPPED"*"==   TAP 075_pg_upgrade_from_older_majors.pl: SKIPPED"*) ;;
  *) fail "two skips, REQUIRE_ALL=1: said $out" ;; esac

out=$(report_skips "$dir/two" 0 15,16,17,18) || fail "two skips, REQUIRE_ALL=0: failed"
case $out in *"all suites passed"*"but: Citus tests (PostgreSQL 18): SKIPPED"*"TAP 075"*) ;;
  *) fail "two skips, REQUIRE_ALL=0: said $out" ;; esac
echo "test-skips: a skip fails the run under LEAF_ID_REQUIRE_ALL=1 and is listed; =0 passes and says it"
