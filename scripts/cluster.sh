#!/usr/bin/env bash
# Helpers to run a throwaway PostgreSQL cluster as the postgres OS user, of
# the server scripts/pg.sh picks (PG_CONFIG or PG_MAJOR; the system 15 by
# default). Source this file; then: cluster_init DIR PORT, cluster_start DIR,
# cluster_stop DIR [MODE].
# Every cluster is made with the C locale, UTF8 encoding and lc_messages = 'C',
# so that server messages (and the expected output that shows them) do not
# depend on the machine's locale.
. "$(dirname "${BASH_SOURCE[0]}")/pg.sh"

# as the postgres OS user; with the server's own libraries first
# (PG_LD_LIBRARY_PATH, scripts/pg.sh) where it has them: a wheel's
# walreceiver would load the system's libpq otherwise
as_pg() { runuser -u postgres -- env ${PG_LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$PG_LD_LIBRARY_PATH"} "$@"; }

# cluster_init DIR PORT: a fresh cluster with leaf_id preloaded.
cluster_init() {
  local dir=$1 port=$2
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  install -d -o postgres -g postgres "$dir"
  as_pg "$PGBIN/initdb" -D "$dir" -A trust -U postgres --no-sync --no-locale --encoding=UTF8 >/dev/null
  cat >> "$dir/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '/tmp'
shared_preload_libraries = 'leaf_id'
max_connections = 100
max_worker_processes = 16
fsync = on
log_min_messages = warning
lc_messages = 'C'
CONF
}

cluster_start() { as_pg "$PGBIN/pg_ctl" -D "$1" -l "$1/server.log" -w -t 60 start >/dev/null; }
# cluster_stop DIR [MODE]: stop the cluster in DIR (mode fast by default). A
# cluster that is not running, or does not exist, is fine; a stop that fails
# on a running cluster is an error.
cluster_stop() {
  local dir=$1 mode=${2:-fast} rc=0
  as_pg "$PGBIN/pg_ctl" -D "$dir" status >/dev/null 2>&1 || rc=$?
  case $rc in
    0) ;;         # running
    3 | 4) return 0 ;; # not running; no data directory
    *) echo "cluster_stop: pg_ctl status of $dir failed (exit $rc)" >&2; return 1 ;;
  esac
  if ! as_pg "$PGBIN/pg_ctl" -D "$dir" -m "$mode" -w -t 60 stop >/dev/null; then
    echo "cluster_stop: could not stop the cluster in $dir (mode $mode)" >&2
    return 1
  fi
}

# The servers run as postgres and read the repository (test files) and write
# under target/: make sure postgres can reach DIR, by giving "others" search
# permission on each ancestor that lacks it (a throwaway machine's checkout
# may live under a private directory such as /root).
ensure_postgres_can_reach() {
  local dir
  dir=$(realpath "$1")
  if runuser -u postgres -- test -x "$dir" 2>/dev/null; then return 0; fi
  while [ "$dir" != "/" ]; do
    chmod o+x "$dir"
    dir=$(dirname "$dir")
  done
}
