#!/usr/bin/env bash
# The test command: every suite, starting whatever it needs, on every
# PostgreSQL major of LEAF_ID_PG_MAJORS (default "15 18"; e.g.
# LEAF_ID_PG_MAJORS=15 for the system PostgreSQL 15 only). 15 is Debian's;
# 18 is built from source into target/pg18 by scripts/pg18.sh (from
# LEAF_ID_PG18_TARBALL, or Debian's source package through apt), else its
# suites are SKIPPED with a loud line.
#  0. the module layout: no import circle, the pure core without pgrx
#     (scripts/check-imports.py)
#  1. pure Rust unit tests, once, with the first major's #[pg_test] tests:
#     one build, cargo pgrx test runs both (the unit tests also run alone
#     with `cargo test --lib`); each other major runs its #[pg_test] tests
#  per major:
#  2. install (release build; one cargo target directory per major)
#  3. pg_regress suite in pg_test/ (SQL + expected output)
#  4. real-client tests (tests/client, Rust `postgres` crate)
#  5. the Debian package (scripts/package.sh): apt-get install, IDs, removal;
#     puts the plain install back (on 18: the payload checked and unpacked)
#  6. client examples in examples/ (Python psycopg + SQLAlchemy, Rust postgres)
#  7. TAP tests in tests/tap (crashes, restarts, clock, several databases)
#  then, on 15 only (Citus 13 supports 15 to 17; this machine has 15):
#  8. Citus suite in tests/citus (coordinator + two workers); builds and installs
#     Citus from LEAF_ID_CITUS_TARBALL when it is missing, else a SKIP line
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MAJORS=${LEAF_ID_PG_MAJORS:-15 18}
skipped=()

# PostgreSQL 18 first, so that setup.sh registers it with pgrx
for major in $MAJORS; do
  case $major in
    15) ;;
    18)
      rc=0
      bash scripts/pg18.sh >/dev/null || rc=$?
      case $rc in
        0) ;;
        3) skipped+=(18); echo "== PostgreSQL 18: SKIPPED (no source; see the SKIP line above)" ;;
        *) exit "$rc" ;;
      esac ;;
    *) echo "test: LEAF_ID_PG_MAJORS: $major is not a major this machine can run (15, 18)" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

echo "== module layout"
python3 scripts/check-imports.py

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
    mkdir -p "$ROOT/target"; . scripts/cluster.sh; ensure_postgres_can_reach "$ROOT/target"
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

    echo "== Debian package, PostgreSQL $PG_MAJOR"
    bash scripts/test-package.sh

    echo "== client examples, PostgreSQL $PG_MAJOR"
    bash scripts/test-examples.sh

    if compgen -G "tests/tap/*.pl" >/dev/null; then
      echo "== TAP tests, PostgreSQL $PG_MAJOR"
      bash scripts/test-tap.sh
    fi
  )
  first=0
done

citus_rc=3
case " $MAJORS " in
  *" 15 "*)
    echo "== Citus tests (PostgreSQL 15)"
    citus_rc=0
    bash scripts/test-citus.sh || citus_rc=$? ;;
  *) echo "== Citus tests: not run (they run on PostgreSQL 15, not in LEAF_ID_PG_MAJORS)" ;;
esac
case $citus_rc in
  0 | 3) ;;
  *) exit "$citus_rc" ;;
esac
note=""
[ "$citus_rc" = 3 ] && note="$note, but the Citus suite was SKIPPED (no Citus installed, LEAF_ID_CITUS_TARBALL not set, or 15 not run)"
[ ${#skipped[@]} -gt 0 ] && note="$note, but PostgreSQL ${skipped[*]} was SKIPPED (no source)"
echo "== all suites passed on PostgreSQL $(echo "$MAJORS" | tr ' ' ',')$note"
