#!/usr/bin/env bash
# Source this file with a group of scripts/deps.sh and the name of the test
# that needs it: `. scripts/deps-or-skip.sh patroni "the Patroni test"`.
# It brings the group in place (scripts/deps.sh, which installs nothing once
# the test command's dependency step ran) and, when the group could not be
# had here (its registry unreachable: target/deps/GROUP.skip says why),
# prints a SKIP line and exits 3, which the test command repeats in its last
# line.
bash "$(dirname "${BASH_SOURCE[0]}")/deps.sh" "$1"
_skip_file="$(dirname "${BASH_SOURCE[0]}")/../target/deps/$1.skip"
if [ -f "$_skip_file" ]; then
  echo "################################################################################"
  echo "SKIP: $2: $(cat "$_skip_file")"
  echo "################################################################################"
  exit 3
fi
unset _skip_file
