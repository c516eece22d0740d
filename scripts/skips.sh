# report_skips NOTES REQUIRE_ALL MAJORS [NOT_RUN...]: the test command's
# last lines. NOTES: a file with one skip a line (suites that said SKIP,
# TAP tests' noted skips, skipped examples, majors without a server);
# REQUIRE_ALL 1: any skip fails the run (exit 1), listing them all; 0: the
# run passes with them in its last line. NOT_RUN: what the caller's own
# choice of majors left out, said but never a failure. Sourced by
# scripts/test.sh; tested by scripts/test-skips.sh.
report_skips() {
  local notes=$1 require_all=$2 majors=$3 note="" line
  shift 3
  while IFS= read -r line; do
    [ -n "$line" ] && note="$note; $line"
  done <"$notes"
  if [ -n "$note" ] && [ "$require_all" = 1 ]; then
    # every skip, one a line, last (CI keeps only the end)
    echo "== FAILED: the run skipped what it must test (LEAF_ID_REQUIRE_ALL=1; =0 lets it pass):"
    while IFS= read -r line; do
      [ -n "$line" ] && echo "==   $line"
    done <"$notes"
    return 1
  fi
  for line in "$@"; do note="$note; $line"; done
  echo "== all suites passed on PostgreSQL $majors${note:+, but:${note#;}}"
}
