#!/usr/bin/env bash
# Self test of scripts/check-version.sh, on copies in a temporary directory
# (no server, no build; about a second): the repo's Cargo.toml, META.json,
# sql/leaf_id--*.sql (empty files of the same names: only names are read),
# README.md, leaf_id.control and CHANGELOG.md (the repo's, or, while there is none, one
# written here with an Unreleased heading first) pass; then each is broken in
# turn (its version edited) and the check must fail and name that file.
# Prints one line per case and `N passed, M failed`; exits 1 on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CHECK=$ROOT/scripts/check-version.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
V=$(bash "$CHECK" --cargo-version "$ROOT") || { echo "test-version: no version in Cargo.toml"; echo "0 passed, 1 failed"; exit 1; }

# A fresh copy of the five files in $work/t.
fixture() {
  rm -rf "$work/t"
  mkdir -p "$work/t/sql"
  cp "$ROOT/Cargo.toml" "$ROOT/META.json" "$ROOT/leaf_id.control" "$ROOT/README.md" "$work/t/"
  for f in "$ROOT"/sql/leaf_id--*.sql; do : >"$work/t/sql/${f##*/}"; done
  if [ -f "$ROOT/CHANGELOG.md" ]; then
    cp "$ROOT/CHANGELOG.md" "$work/t/"
  else
    printf '# Changelog\n\n## [Unreleased]\n\n- next\n\n## [%s] - 2026-12-01\n\n- this\n\n## 0.5.2\n\n- older\n' "$V" >"$work/t/CHANGELOG.md"
  fi
}

# expect pass|fail NAME [TEXT...]: run the check on $work/t; on fail, each
# TEXT must appear in what it printed.
expect() {
  local want=$1 name=$2 out rc t ok=1
  shift 2
  out=$(bash "$CHECK" "$work/t" 2>&1)
  rc=$?
  if [ "$want" = pass ]; then
    [ $rc -eq 0 ] || ok=0
  else
    [ $rc -eq 1 ] || ok=0
    for t in "$@"; do
      grep -qF -- "$t" <<<"$out" || ok=0
    done
  fi
  if [ $ok = 1 ]; then
    passed=$((passed + 1))
    echo "ok - $name"
  else
    failed=$((failed + 1))
    echo "not ok - $name (expected $want${*:+ naming: $*}; exit $rc)"
    sed 's/^/    | /' <<<"$out"
  fi
}

# set_json KEYPATH VALUE: META.json's field at KEYPATH (dots) := VALUE
set_json() {
  python3 - "$work/t/META.json" "$1" "$2" <<'PY'
import json, sys
path, keys, value = sys.argv[1], sys.argv[2].split("."), sys.argv[3]
meta = json.load(open(path))
d = meta
for k in keys[:-1]:
    d = d[k]
d[keys[-1]] = value
json.dump(meta, open(path, "w"), indent=3)
PY
}
set_cargo() { sed -i "0,/^version = \"[^\"]*\"/s//version = \"$1\"/" "$work/t/Cargo.toml"; }
bump() { python3 -c 'import sys; a = sys.argv[1].split("."); a[-1] = str(int(a[-1]) + 1); print(".".join(a))' "$1"; }
W=$(bump "$V")  # a wrong version: the next patch release
newest_update=$(cd "$ROOT/sql" && ls leaf_id--*--*.sql | sed 's/.*--\(.*\)\.sql$/\1 &/' | sort -V | tail -n 1 | cut -d' ' -f2)

fixture
expect pass "the copies agree ($V)"

fixture; set_cargo "$W"
expect fail "Cargo.toml says $W" "Cargo.toml's [package] version is $W" "META.json" "CHANGELOG.md"

fixture; set_json version "$W"
expect fail "META.json version says $W" 'META.json: "version" is '"$W"

fixture; set_json provides.leaf_id.version "$W"
expect fail "META.json provides.leaf_id.version says $W" "META.json: provides.leaf_id.version is $W"

fixture; rm "$work/t/META.json"
expect fail "META.json missing" "META.json: cannot read it"

fixture; : >"$work/t/sql/leaf_id--$V--$W.sql"
expect fail "a newer update script leaf_id--$V--$W.sql" "sql/leaf_id--$V--$W.sql" "target is $W"

fixture; rm "$work/t/sql/$newest_update"
expect fail "the update script to $V ($newest_update) missing" "the newest update script's target is" "Cargo.toml's [package] version is $V"

fixture; : >"$work/t/sql/leaf_id--$V.sql"
expect fail "a frozen install script of $V" "sql/leaf_id--$V.sql"

fixture; python3 - "$work/t/CHANGELOG.md" "$V" "$W" <<'PY'
# the first `## ` heading naming the version: name W instead
import re, sys
path, v, w = sys.argv[1:]
text = open(path).read()
new = re.sub(r"^(## \[?v?)" + re.escape(v) + r"(?![0-9.])", lambda m: m.group(1) + w, text, count=1, flags=re.M)
if new == text:
    sys.exit(f"test-version: no heading of {v} in CHANGELOG.md to break")
open(path, "w").write(new)
PY
expect fail "CHANGELOG.md's newest heading says $W" "CHANGELOG.md" "is $W"

fixture; printf '# Changelog\n\n## [Unreleased]\n\n## Notes\n\n## [%s]\n' "$V" >"$work/t/CHANGELOG.md"
expect fail "CHANGELOG.md's newest heading names no version" "CHANGELOG.md: the newest heading \`## Notes\` names no version"

fixture; printf '# Changelog\n\n## %s0\n' "$V" >"$work/t/CHANGELOG.md"
expect fail "CHANGELOG.md heading ${V}0 is not $V" "CHANGELOG.md" "is ${V}0"

fixture; printf '# Changelog\n\n## Unreleased\n' >"$work/t/CHANGELOG.md"
expect fail "CHANGELOG.md with only Unreleased" "CHANGELOG.md: no \`## \` heading of a released version"

fixture; printf '# Changelog\n\n## Unreleased\n\n```\n## %s\n```\n\n## %s (2026-12-01)\n\n## 0.1.0\n' "$W" "$V" >"$work/t/CHANGELOG.md"
expect pass "CHANGELOG.md: \`## $V (date)\` after Unreleased, a heading in a code block skipped"

fixture; printf '# Changelog\n\n## [unreleased] - soon\n\n## [v%s] - 2026-12-01\n' "$V" >"$work/t/CHANGELOG.md"
expect pass "CHANGELOG.md: \`## [v$V] - date\`"

fixture; rm "$work/t/CHANGELOG.md"
expect pass "no CHANGELOG.md"

fixture; sed -i "0,/\*\*Status:\*\* $V/s//**Status:** $W/" "$work/t/README.md"
expect fail "README.md's status line says $W" "README.md:" "the status line is $W"

fixture; sed -i "0,/leaf-id_${V}_amd64/s//leaf-id_${W}_amd64/" "$work/t/README.md"
expect fail "README.md shows a .deb of $W" "README.md:" "a .deb's name is $W"

fixture; sed -i "0,/leaf_id_\([0-9]*\)-$V-1/s//leaf_id_\1-$W-1/" "$work/t/README.md"
expect fail "README.md shows an .rpm of $W" "README.md:" "an .rpm's name is $W"

fixture; sed -i "s/^default_version = .*/default_version = '$W'/" "$work/t/leaf_id.control"
expect fail "leaf_id.control default_version '$W'" "leaf_id.control: default_version is $W"

fixture; sed -i "s/^default_version = .*/default_version = '$V'/" "$work/t/leaf_id.control"
expect pass "leaf_id.control default_version '$V' (spelled out)"

# Versions compare as numbers: 0.10.0 is newer than 0.9.0 and than $V.
fixture; set_cargo 0.10.0; set_json version 0.10.0; set_json provides.leaf_id.version 0.10.0
: >"$work/t/sql/leaf_id--0.9.0--0.10.0.sql"; : >"$work/t/sql/leaf_id--0.8.0--0.9.0.sql"
printf '## 0.10.0\n' >"$work/t/CHANGELOG.md"
rm "$work/t/README.md"
expect pass "0.10.0 everywhere, leaf_id--0.9.0--0.10.0.sql the newest (numeric order)"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
