#!/usr/bin/env bash
# Checks the README's two commands on a machine with nothing installed, so
# that what this machine already has cannot hide a missing install step:
#  1. makes a fresh Debian bookworm root with debootstrap --variant=minbase
#     (Debian's packages) in DIR;
#  2. installs in it what a new machine of this kind comes with (NEW_MACHINE
#     below: build-essential, git, curl, python3 and pip, Node.js, Debian's
#     PostgreSQL 15, ...), with this machine's apt sources;
#  3. carries in the CA certificates the registries are reached through
#     (/usr/local/share/ca-certificates), the pip and npm client settings, and
#     the certificate variables of this environment;
#  4. binds the Rust toolchain in read-only (~/.rustup) with rustup's proxies
#     and without cargo-pgrx;
#  5. clones this checkout's HEAD into it, with the shared notes beside it
#     (as CI has them), binds /proc, /dev and /sys, and runs as root under
#     chroot: `bash scripts/run.sh` (the run command), then `bash .ci/run`
#     (the test command, as CI calls it), each timed;
#  6. stops the servers it started and unmounts.
# Not part of the test command: it takes about as long as that command plus
# its one-time installs. Nothing else may use the test ports meanwhile (the
# root shares this machine's network).
#
#   bash scripts/fresh-root.sh                  # both commands
#   LEAF_ID_FRESH_COMMANDS=run bash scripts/fresh-root.sh    # the run command only
#   LEAF_ID_FRESH_ENV='LEAF_ID_PG_MAJORS=15' ...             # variables for the commands
#
# Logs: target/fresh-root/{setup,run,test}.log; the last lines say what passed
# and how long each command took. DIR: LEAF_ID_FRESH_DIR (default
# /var/tmp/leaf-id-fresh-root), made anew each time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${LEAF_ID_FRESH_DIR:-/var/tmp/leaf-id-fresh-root}
COMMANDS=${LEAF_ID_FRESH_COMMANDS:-run test}
LOGS=$ROOT/target/fresh-root
SHARED=$(realpath "$ROOT/../shared" 2>/dev/null || true)
MIRROR=http://deb.debian.org/debian
# what a new machine of this kind has besides minbase (../shared/toolchain.md)
NEW_MACHINE=(build-essential git curl ca-certificates python3 python3-pip python3-venv pkg-config libssl-dev
  unzip xz-utils bzip2 bc iproute2 procps nodejs npm postgresql-15)

[ "$(id -u)" -eq 0 ] || { echo "fresh-root: run as root (debootstrap, chroot, mount)" >&2; exit 2; }
mkdir -p "$LOGS"
say() { echo "fresh-root: $*"; }

unmount_all() {
  local m
  for m in dev sys proc root/.rustup; do
    if mountpoint -q "$DIR/$m" 2>/dev/null; then umount -R "$DIR/$m" 2>/dev/null || umount -lR "$DIR/$m" || true; fi
  done
}
# in_root CMD: CMD (a bash script) as root inside the root, with the
# environment a new machine's shell has
in_root() {
  local certs=()
  while IFS= read -r v; do certs+=("$v"); done < <(env | grep -E '^[A-Z_]*(CERT|CA_BUNDLE|CAINFO|SSL_ROOTS)[A-Z_]*=' || true)
  chroot "$DIR" /usr/bin/env -i HOME=/root USER=root LANG=C.UTF-8 TERM=dumb \
    PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ${CI:+CI=$CI} "${certs[@]}" /bin/bash -c "$1"
}
# in_root_pids: the processes whose root is DIR
in_root_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$DIR" ] && echo "${p#/proc/}"
  done
  return 0
}
stop_servers() {
  # every postmaster left in the root (the run command's cluster stays up by design)
  local pid
  for pid in $(in_root_pids); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = postgres ] && kill -TERM "$pid" 2>/dev/null
  done
  sleep 2
  return 0
}
# stop_all: everything still running in the root (an interrupted check)
stop_all() {
  stop_servers
  local pid
  for pid in $(in_root_pids); do kill -KILL "$pid" 2>/dev/null || true; done
}
cleanup() { stop_all; unmount_all; }
trap 'exit 130' INT TERM
trap cleanup EXIT

command -v debootstrap >/dev/null || bash scripts/deps.sh apt debootstrap
unmount_all
rm -rf --one-file-system "$DIR"
t0=$SECONDS
say "debootstrap --variant=minbase bookworm $DIR (log: $LOGS/setup.log)"
debootstrap --variant=minbase bookworm "$DIR" "$MIRROR" >"$LOGS/setup.log" 2>&1 ||
  { tail -n 20 "$LOGS/setup.log"; say "debootstrap failed"; exit 1; }

# this machine's apt sources, resolver, CA certificates and client settings
rm -f "$DIR/etc/apt/sources.list"
cp -a /etc/apt/sources.list /etc/apt/sources.list.d "$DIR/etc/apt/" 2>/dev/null || true
cp -L /etc/resolv.conf "$DIR/etc/resolv.conf"
mkdir -p "$DIR/usr/local/share/ca-certificates" "$DIR/root"
cp /usr/local/share/ca-certificates/*.crt "$DIR/usr/local/share/ca-certificates/" 2>/dev/null || true
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$DIR/etc/pip.conf"
[ -f "$HOME/.npmrc" ] && cp "$HOME/.npmrc" "$DIR/root/.npmrc"
# no service starts while packages install (as in any chroot)
printf '#!/bin/sh\nexit 101\n' >"$DIR/usr/sbin/policy-rc.d"
chmod 0755 "$DIR/usr/sbin/policy-rc.d"

mount -t proc proc "$DIR/proc"
mount --rbind /dev "$DIR/dev"; mount --make-rslave "$DIR/dev"
mount --rbind /sys "$DIR/sys"; mount --make-rslave "$DIR/sys"

say "installing what a new machine has: ${NEW_MACHINE[*]}"
in_root "export DEBIAN_FRONTEND=noninteractive; apt-get update -q && apt-get install -y -q ${NEW_MACHINE[*]} && update-ca-certificates" \
  >>"$LOGS/setup.log" 2>&1 || { tail -n 30 "$LOGS/setup.log"; say "installing the new machine's packages failed"; exit 1; }

# Rust: the toolchains read-only, rustup's proxies without cargo-pgrx
mkdir -p "$DIR/root/.rustup" "$DIR/root/.cargo/bin"
mount --bind -o ro "$HOME/.rustup" "$DIR/root/.rustup"
mount -o remount,bind,ro "$DIR/root/.rustup"
for f in "$HOME"/.cargo/bin/*; do
  case $(basename "$f") in cargo-pgrx) ;; *) cp -a "$f" "$DIR/root/.cargo/bin/" ;; esac
done

# the checkout as a clean clone of HEAD, the shared notes beside it
git clone -q --no-local "$ROOT" "$DIR/root/leaf_id"
say "cloned $(git -C "$DIR/root/leaf_id" log -1 --format='%h %s')"
if [ -n "$SHARED" ] && [ -d "$SHARED" ]; then
  cp -a "$SHARED" "$DIR/root/shared"
  chmod -R a-w "$DIR/root/shared"
fi
say "the root is ready after $((SECONDS - t0)) s"

results=()
status=0
for c in $COMMANDS; do
  case $c in
    run) cmd="bash scripts/run.sh </dev/null" ;;
    test) cmd="bash .ci/run </dev/null" ;;
    *) say "LEAF_ID_FRESH_COMMANDS: $c: run or test"; exit 2 ;;
  esac
  say "running \`$cmd\` in the root (log: $LOGS/$c.log)"
  t=$SECONDS rc=0
  in_root "cd /root/leaf_id && ${LEAF_ID_FRESH_ENV:+export $LEAF_ID_FRESH_ENV &&} $cmd" >"$LOGS/$c.log" 2>&1 || rc=$?
  d=$((SECONDS - t))
  tail -n 5 "$LOGS/$c.log"
  if [ "$rc" = 0 ]; then results+=("$c command passed in $d s"); else results+=("$c command FAILED (exit $rc) after $d s"); status=1; fi
  say "${results[-1]}"
  [ "$c" = run ] && stop_servers
done
say "done: $(IFS=';'; echo "${results[*]}")"
exit "$status"
