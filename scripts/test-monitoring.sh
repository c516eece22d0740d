#!/usr/bin/env bash
# The monitoring test: Debian's prometheus-postgres-exporter (its package's
# binary, fetched with `apt-get download` into target/exporter and unpacked
# there by scripts/deps.sh exporter: nothing is installed, no service started) runs with leaf_id's
# examples/prometheus/queries.yaml against a throwaway cluster (port
# MONITORING_PORT, default 28882; the exporter on the next port, loopback),
# as a pg_monitor member. It scrapes /metrics, draws IDs, scrapes again, and
# checks that the leaf_id metrics are there, without query errors, and move.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/cluster.sh
PORT=${MONITORING_PORT:-28882}
EPORT=$((PORT + 1))
DIR=$ROOT/target/exporter
DATA=$ROOT/target/monitoring-cluster$PG_SUFFIX
EXPORTER=$DIR/usr/bin/prometheus-postgres-exporter

# fetched by scripts/deps.sh, the one place that installs
. scripts/deps-or-skip.sh exporter "the monitoring test"
echo "monitoring: $("$EXPORTER" --version 2>&1 | head -1)"

mkdir -p "$ROOT/target"; ensure_postgres_can_reach "$ROOT/target"
cluster_stop "$DATA" immediate
cluster_init "$DATA" "$PORT"
cluster_start "$DATA"
exporter_pid=
cleanup() {
  [ -n "$exporter_pid" ] && kill "$exporter_pid" 2>/dev/null || true
  cluster_stop "$DATA" fast || true
}
trap cleanup EXIT
psql_() { as_pg "$PGBIN/psql" -X -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 "$@"; }
psql_ -c "CREATE EXTENSION leaf_id" \
  -c "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('order', 1000)" \
  -c "CREATE ROLE exporter LOGIN IN ROLE pg_monitor" \
  -c "SELECT count(leaf_segment_next('order')) FROM generate_series(1, 10)" \
  -c "SELECT count(leaf_snowflake_next()) FROM generate_series(1, 10)" >/dev/null

DATA_SOURCE_NAME="host=127.0.0.1 port=$PORT user=exporter dbname=postgres sslmode=disable" \
  "$EXPORTER" --web.listen-address="127.0.0.1:$EPORT" \
  --extend.query-path="$ROOT/examples/prometheus/queries.yaml" >"$DIR/exporter.log" 2>&1 &
exporter_pid=$!

python3 - "$EPORT" "$PORT" "$PGBIN" <<'PY'
import re, subprocess, sys, time, urllib.request
eport, port, pgbin = sys.argv[1], sys.argv[2], sys.argv[3]
failed = []
def check(ok, what):
    print(("ok - " if ok else "not ok - ") + what, flush=True)
    if not ok:
        failed.append(what)
def scrape():
    for _ in range(100):
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{eport}/metrics", timeout=5).read().decode()
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the exporter did not answer on 127.0.0.1:" + eport)
def value(text, name, **labels):
    for line in text.splitlines():
        m = re.match(r"^" + name + r"\{([^}]*)\} (\S+)$", line) or re.match(r"^" + name + r"() (\S+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            return float(m.group(2))
    return None
def draw(sql):
    subprocess.run(["runuser", "-u", "postgres", "--", f"{pgbin}/psql", "-X", "-h", "127.0.0.1", "-p", port,
                    "-U", "postgres", "-qAt", "-c", sql], check=True, stdout=subprocess.DEVNULL)
first = scrape()
check(value(first, "pg_up") == 1, "the exporter reaches the server (pg_up 1)")
# (present and 0: a missing metric is no proof)
load_error = value(first, "pg_exporter_user_queries_load_error")
check(load_error == 0, f"queries.yaml loads without error (pg_exporter_user_queries_load_error {load_error})")
r1 = value(first, "leaf_id_segment_refills", tag="order")
check(r1 is not None and r1 >= 1, f"leaf_id_segment_refills of tag order is there ({r1})")
for name in ("current_segment_left", "dynamic_step", "waits", "ids_left_in_domain", "missing", "next_ready"):
    check(value(first, "leaf_id_segment_" + name, tag="order") is not None, f"leaf_id_segment_{name} is there")
check(value(first, "leaf_id_snowflake_worker_id", state="ready") is not None,
      f"leaf_id_snowflake_worker_id of the ready generator ({value(first, 'leaf_id_snowflake_worker_id', state='ready')})")
for name in ("rollback_events", "mark_ahead_seconds", "layout_seconds_left", "failed"):
    check(value(first, "leaf_id_snowflake_" + name) is not None, f"leaf_id_snowflake_{name} is there")
for mode in ("segment", "snowflake"):
    check(value(first, "leaf_id_worker_running", mode=mode) == 1, f"leaf_id_worker_running of the {mode} worker is 1")
    for name in ("waiting_for_standby", "standby_wait_seconds", "standby_lag_bytes"):
        check(value(first, "leaf_id_worker_" + name, mode=mode) == 0, f"leaf_id_worker_{name} of the {mode} worker is 0")
left1 = value(first, "leaf_id_segment_current_segment_left", tag="order")
draw("SELECT count(leaf_segment_next('order')) FROM generate_series(1, 5000)")
time.sleep(0.5)
second = scrape()
r2 = value(second, "leaf_id_segment_refills", tag="order")
check(r2 is not None and r1 is not None and r2 > r1, f"after 5000 more IDs the refill counter moved ({r1} -> {r2})")
left2 = value(second, "leaf_id_segment_current_segment_left", tag="order")
check(left2 is not None and left2 != left1, f"current_segment_left moved ({left1} -> {left2})")
scrape_error = value(second, "pg_exporter_last_scrape_error")
check("leaf_id_" in second and scrape_error == 0,
      f"the last scrape had no error (pg_exporter_last_scrape_error {scrape_error})")
if failed:
    sys.exit(f"monitoring: {len(failed)} check(s) failed: {failed}")
print("monitoring: all checks passed")
PY
