#!/usr/bin/env bash
# What leaf_id.synchronized_standby_slots costs (a benchmark, not a test):
# refill latency and 8-client IDs per second with the rule on ('*') and off,
# alternating, on a primary with one asynchronous standby streaming through a
# physical slot on loopback (bench/bench_standby.py). Writes its section of
# docs/BENCHMARKS.md (between the "standby cost" markers).
#
#   bash bench/bench-standby.sh               # about 3 minutes
#   BENCH_HA_REPS=3 BENCH_HA_SECONDS=3 bash bench/bench-standby.sh
#   PG_MAJOR=17 bash bench/bench-standby.sh   # another major's server
# Ports BENCH_HA_PORT (28890) and the next one.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BENCH_COMMAND=$(env | grep -E '^BENCH_HA_(REPS|SECONDS|TAGS)=' | sort | tr '\n' ' ' || true)
export BENCH_COMMAND="${BENCH_COMMAND}${PG_MAJOR:+PG_MAJOR=$PG_MAJOR }bash bench/bench-standby.sh"
[ -n "${PG_CONFIG:-}" ] || bash scripts/pg-server.sh "${PG_MAJOR:-15}" >/dev/null
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
. scripts/cluster.sh
echo "== install (release), PostgreSQL $PG_MAJOR"
bash scripts/install.sh
PORT=${BENCH_HA_PORT:-28890}
PRIMARY=$ROOT/target/bench-ha-primary$PG_SUFFIX STANDBY=$ROOT/target/bench-ha-standby$PG_SUFFIX
WORK=$ROOT/target/bench-ha-work$PG_SUFFIX
mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
cluster_stop "$STANDBY" immediate; cluster_stop "$PRIMARY" immediate
stop_all() { cluster_stop "$STANDBY" fast || true; cluster_stop "$PRIMARY" fast || true; }
trap stop_all EXIT
cluster_init "$PRIMARY" "$PORT"
cat >> "$PRIMARY/postgresql.conf" <<'CONF'
# the benchmark's (read back into docs/BENCHMARKS.md by the section's text)
shared_buffers = 512MB
max_wal_size = 8GB
autovacuum = off
jit = off
wal_level = replica
max_wal_senders = 4
CONF
echo "host replication all 127.0.0.1/32 trust" >> "$PRIMARY/pg_hba.conf"
cluster_start "$PRIMARY"
as_pg "$PGBIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qAt -c "SELECT pg_create_physical_replication_slot('s1')" >/dev/null
rm -rf "$STANDBY"; install -d -o postgres -g postgres -m 0700 "$STANDBY"
as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$PORT" -U postgres -D "$STANDBY" -R -S s1 -X stream
sed -i "s/^port = $PORT/port = $((PORT + 1))/" "$STANDBY/postgresql.conf"
cluster_start "$STANDBY"
for _ in $(seq 100); do
  [ "$(as_pg "$PGBIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qAt -c "SELECT active FROM pg_replication_slots")" = t ] && break
  sleep 0.1
done
rm -rf "$WORK"; install -d -o postgres -g postgres "$WORK"
install -o postgres -g postgres -m 0644 docs/BENCHMARKS.md "$WORK/report.md"
chmod o+rx "$ROOT/scripts"
runuser -u postgres -- env ${PG_LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$PG_LD_LIBRARY_PATH"} \
  PGBIN="$PGBIN" PORT="$PORT" WORK="$WORK" REPORT="$WORK/report.md" BENCH_COMMAND="$BENCH_COMMAND" \
  ${BENCH_HA_REPS:+BENCH_HA_REPS=$BENCH_HA_REPS} ${BENCH_HA_SECONDS:+BENCH_HA_SECONDS=$BENCH_HA_SECONDS} \
  ${BENCH_HA_TAGS:+BENCH_HA_TAGS=$BENCH_HA_TAGS} \
  /usr/bin/python3 "$ROOT/bench/bench_standby.py"
cp "$WORK/report.md" "$ROOT/docs/BENCHMARKS.md"
stop_all
trap - EXIT
echo "== docs/BENCHMARKS.md: the standby cost section written"
