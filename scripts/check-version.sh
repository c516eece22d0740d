#!/usr/bin/env bash
# One version everywhere: Cargo.toml's [package] version is the source, and
# each of these must say the same, or this exits 1 naming the file and both
# values (every disagreement, not just the first):
#   META.json         top-level "version" and provides.leaf_id.version
#   sql/              the newest update script leaf_id--X--Y.sql (newest by
#                     Y, compared as numbers) must have Y = the version; no
#                     frozen install script leaf_id--Z.sql may be of that
#                     version or newer (cargo pgrx writes that one, and
#                     scripts/install.sh would copy a frozen one over it)
#   CHANGELOG.md      (if there is one) the newest `## ` heading that is not
#                     "Unreleased": `## 0.6.0`, `## [0.6.0]`, `## v0.6.0`,
#                     followed by anything (`## [0.6.0] - 2026-12-01`)
#   README.md         (if there is one) its `**Status:** X` line and the
#                     package names it shows (postgresql-NN-leaf-id_X_amd64.deb,
#                     leaf_id_NN-X-1.x86_64.rpm)
#   leaf_id.control   (if there is one) default_version is '@CARGO_VERSION@'
#                     (cargo pgrx fills it in) or the version itself
# bash and python3's standard library only; reads files, runs nothing.
#
#   bash scripts/check-version.sh [DIR]        check DIR (default: this repo)
#   bash scripts/check-version.sh --cargo-version [DIR]
#                                              print Cargo.toml's version
set -euo pipefail
mode=check
if [ "${1:-}" = --cargo-version ]; then
  mode=cargo-version
  shift
fi
case ${1:-} in -*) echo "usage: $0 [--cargo-version] [DIR]" >&2; exit 2 ;; esac
dir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
[ -d "$dir" ] || { echo "check-version: no directory $dir" >&2; exit 2; }

exec python3 - "$mode" "$dir" <<'PY'
import json, os, re, sys

mode, root = sys.argv[1], sys.argv[2]
SEMVER = r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?"
problems = []


def key(v):
    """A version as something to compare: 0.10.0 after 0.9.0; a
    pre-release (1.0.0-rc.1) before its release."""
    core, _, pre = v.partition("-")
    return (tuple(int(p) for p in core.split(".")), pre == "", pre)


def cargo_version():
    path = os.path.join(root, "Cargo.toml")
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        sys.exit(f"check-version: Cargo.toml: cannot read it ({e.strerror})")
    try:
        import tomllib  # Python 3.11+
        v = tomllib.loads(text).get("package", {}).get("version")
    except ImportError:  # older Python: the [package] table by hand
        v, section = None, None
        for line in text.splitlines():
            m = re.match(r"\s*\[([^\]]+)\]\s*(#.*)?$", line)
            if m:
                section = m.group(1).strip()
                continue
            m = re.match(r'\s*version\s*=\s*"([^"]*)"', line)
            if section == "package" and m:
                v = m.group(1)
                break
    except Exception as e:
        sys.exit(f"check-version: Cargo.toml: not valid TOML ({e})")
    if not isinstance(v, str) or not re.fullmatch(SEMVER, v):
        sys.exit(f"check-version: Cargo.toml: [package] version is {v!r}, not a version like 0.6.0")
    return v


want = cargo_version()
if mode == "cargo-version":
    print(want)
    sys.exit(0)


def differ(where, got):
    problems.append(f"{where} is {got}, but Cargo.toml's [package] version is {want}")


# META.json
path = os.path.join(root, "META.json")
try:
    meta = json.load(open(path, encoding="utf-8"))
except OSError as e:
    problems.append(f"META.json: cannot read it ({e.strerror}); Cargo.toml's version is {want}")
except ValueError as e:
    problems.append(f"META.json: not valid JSON ({e}); Cargo.toml's version is {want}")
else:
    got = meta.get("version") if isinstance(meta, dict) else None
    if got != want:
        differ('META.json: "version"', got)
    provides = meta.get("provides") if isinstance(meta, dict) else None
    ext = provides.get("leaf_id") if isinstance(provides, dict) else None
    got = ext.get("version") if isinstance(ext, dict) else None
    if got != want:
        differ("META.json: provides.leaf_id.version", got)

# sql/
sqldir = os.path.join(root, "sql")
names = sorted(os.listdir(sqldir)) if os.path.isdir(sqldir) else []
updates, installs = [], []
for n in names:
    m = re.fullmatch(rf"leaf_id--({SEMVER})--({SEMVER})\.sql", n)
    if m:
        updates.append((key(m.group(2)), m.group(2), n))
        continue
    m = re.fullmatch(rf"leaf_id--({SEMVER})\.sql", n)
    if m:
        installs.append((key(m.group(1)), m.group(1), n))
if not updates:
    problems.append(f"sql/: no update script leaf_id--X--{want}.sql (none of the form leaf_id--X--Y.sql); Cargo.toml's version is {want}")
else:
    _, target, name = max(updates)
    if target != want:
        differ(f"sql/{name}: the newest update script's target", target)
for k, v, name in installs:
    if k >= key(want):
        problems.append(f"sql/{name}: a frozen install script of version {v}, not older than Cargo.toml's version {want} (cargo pgrx generates leaf_id--{want}.sql)")

# CHANGELOG.md
path = os.path.join(root, "CHANGELOG.md")
if os.path.exists(path):
    heading, fenced = None, False
    for line in open(path, encoding="utf-8"):
        if re.match(r"\s*(```|~~~)", line):
            fenced = not fenced
        if fenced or not line.startswith("## "):
            continue
        text = line[3:].strip()
        if re.fullmatch(r"\[?\s*unreleased\s*\]?(\s.*|[-:(].*)?", text, re.I):
            continue
        heading = text
        break
    if heading is None:
        problems.append(f"CHANGELOG.md: no `## ` heading of a released version (only Unreleased or none); Cargo.toml's version is {want}")
    else:
        m = re.match(rf"\[?\s*v?({SEMVER})(?=$|[\]\s,;:(])", heading)
        if not m:
            problems.append(f"CHANGELOG.md: the newest heading `## {heading}` names no version like {want} (`## {want}` or `## [{want}]`)")
        elif m.group(1) != want:
            differ(f"CHANGELOG.md: the newest heading `## {heading}`", m.group(1))

# README.md: its status line and the package file names it shows
path = os.path.join(root, "README.md")
if os.path.exists(path):
    text = open(path, encoding="utf-8").read()
    shown = [
        (r"\*\*Status:\*\* v?(" + SEMVER + r")", "the status line"),
        (r"leaf-id_(" + SEMVER + r")_amd64\.deb", "a .deb's name"),
        (r"leaf_id_\d+-(" + SEMVER + r")-\d+\.x86_64\.rpm", "an .rpm's name"),
    ]
    for pattern, what in shown:
        for m in re.finditer(pattern, text):
            if m.group(1) != want:
                line = text.count("\n", 0, m.start()) + 1
                differ(f"README.md:{line}: {what}", m.group(1))

# leaf_id.control
path = os.path.join(root, "leaf_id.control")
if os.path.exists(path):
    m = re.search(r"^\s*default_version\s*=\s*'([^']*)'", open(path, encoding="utf-8").read(), re.M)
    if not m:
        problems.append(f"leaf_id.control: no default_version (want '@CARGO_VERSION@'); Cargo.toml's version is {want}")
    elif m.group(1) not in ("@CARGO_VERSION@", want):
        differ("leaf_id.control: default_version", m.group(1))

if problems:
    for p in problems:
        print(f"check-version: {p}", file=sys.stderr)
    sys.exit(1)
checked = ["Cargo.toml", "META.json", f"sql/{max(updates)[2]}"]
checked += [f for f in ("CHANGELOG.md", "README.md", "leaf_id.control") if os.path.exists(os.path.join(root, f))]
print(f"check-version: {want} in " + ", ".join(checked))
PY
