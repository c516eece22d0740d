#!/usr/bin/env bash
# Helpers to run a throwaway PostgreSQL 15 cluster as the postgres OS user.
# Source this file; then: cluster_init DIR PORT [extra conf lines], cluster_start, cluster_stop.
PGBIN=/usr/lib/postgresql/15/bin

as_pg() { runuser -u postgres -- "$@"; }

# cluster_init DIR PORT: a fresh cluster with leaf_id preloaded.
cluster_init() {
  local dir=$1 port=$2
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  install -d -o postgres -g postgres "$dir"
  as_pg "$PGBIN/initdb" -D "$dir" -A trust -U postgres --no-sync >/dev/null
  cat >> "$dir/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '/tmp'
shared_preload_libraries = 'leaf_id'
max_connections = 100
max_worker_processes = 16
fsync = on
log_min_messages = warning
CONF
}

cluster_start() { as_pg "$PGBIN/pg_ctl" -D "$1" -l "$1/server.log" -w -t 60 start >/dev/null; }
cluster_stop() { as_pg "$PGBIN/pg_ctl" -D "$1" -m "${2:-fast}" -w stop >/dev/null 2>&1 || true; }

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
