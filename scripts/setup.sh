#!/usr/bin/env bash
# Installs what leaf_id needs on a Debian bookworm machine, as root, idempotently:
# PostgreSQL 15 and its server headers, clang (for pgrx), Perl's IPC::Run (TAP
# tests), sudo (cargo pgrx test --runas), cargo-pgrx 0.18.1, and registers the
# system PostgreSQL with pgrx.
set -euo pipefail

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
need_pkgs=()
for p in postgresql-15 postgresql-server-dev-15 postgresql-contrib libclang-dev clang libipc-run-perl sudo pkg-config make; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "setup: installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo pgrx --version 2>/dev/null | grep -q '0\.18\.1'; then
  echo "setup: installing cargo-pgrx 0.18.1 (a few minutes)"
  cargo install cargo-pgrx --version 0.18.1 --locked
fi
if ! grep -qs "pg15" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
  cargo pgrx init --pg15 "$PG_CONFIG"
fi
