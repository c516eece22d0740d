#!/usr/bin/env bash
# Source this file: it checks that Rust's cargo, MIN_CARGO or newer, is on
# PATH (~/.cargo/bin first), and otherwise stops the script that sourced it
# with a message naming the prerequisite. leaf_id uses edition 2024; Debian
# bookworm's own rustc and cargo packages are too old.
MIN_CARGO=1.85
export PATH="$HOME/.cargo/bin:$PATH"
_rust_missing() {
  echo "$(basename "$0"): $1" >&2
  echo "$(basename "$0"): leaf_id needs Rust with cargo $MIN_CARGO or newer (edition 2024); install it from" \
    "https://rustup.rs (Debian bookworm's own rustc and cargo packages are too old), then run this again." >&2
  exit 1
}
command -v cargo >/dev/null 2>&1 || _rust_missing "cargo not found (PATH is $PATH)."
_cargo_version=$(cargo --version 2>/dev/null | awk '{print $2}')
[ -n "$_cargo_version" ] || _rust_missing "\`cargo --version\` failed."
if [ "$(printf '%s\n' "$MIN_CARGO" "${_cargo_version%%-*}" | sort -V | head -n 1)" != "$MIN_CARGO" ]; then
  _rust_missing "found cargo $_cargo_version at $(command -v cargo), older than $MIN_CARGO."
fi
unset _cargo_version
