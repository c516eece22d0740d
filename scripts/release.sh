#!/usr/bin/env bash
# A source release from a git tag, for PGXN and packagers:
#   bash scripts/release.sh v0.6.0   -> target/release/leaf_id-0.6.0.zip
#                                       target/release/leaf_id-0.6.0.tar.gz
#   bash scripts/release.sh HEAD     -> leaf_id-<version>-<shortsha>.{zip,tar.gz}
#                                       (a dry run of the committed HEAD; work
#                                       tree changes are not in it)
# Both archives are `git archive` of the tag's commit, every tracked file
# under one top directory leaf_id-<version>/ (PGXN wants a zip so laid out);
# nothing is left out (there is no .gitattributes export-ignore).
# Refuses a tag that does not exist, a tag whose name (less a leading "v") is
# not the Cargo.toml version at that tag, and a tree at the tag that fails
# scripts/check-version.sh (this work tree's copy, run on the tag's files
# unpacked into a temporary directory) or lacks a file a build needs.
# git archive output depends only on the commit, so the same tag gives the
# same bytes again. Prints the archives' sha256 and paths last.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
die() { echo "release: $*" >&2; exit 1; }

[ $# -eq 1 ] && [ -n "$1" ] || { echo "usage: bash scripts/release.sh TAG|HEAD" >&2; exit 2; }
ref=$1
if [ "$ref" = HEAD ]; then
  commit=$(git rev-parse -q --verify 'HEAD^{commit}') || die "no commit at HEAD"
  archive_ref=$commit
else
  git rev-parse -q --verify "refs/tags/$ref" >/dev/null || die "no tag $ref (git tag -l lists the tags)"
  commit=$(git rev-parse -q --verify "refs/tags/$ref^{commit}") || die "tag $ref does not point at a commit"
  archive_ref=refs/tags/$ref
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The tree at the tag, as the archive will have it.
git archive --format=tar "$archive_ref" | tar -x -C "$tmp" ||
  die "git archive $ref failed"
version=$(bash scripts/check-version.sh --cargo-version "$tmp") ||
  die "no version in Cargo.toml at $ref"
if [ "$ref" = HEAD ]; then
  name=leaf_id-$version-$(git rev-parse --short "$commit")
else
  [ "${ref#v}" = "$version" ] ||
    die "tag $ref is not the version at that tag: Cargo.toml there says $version (tag it v$version)"
  name=leaf_id-$version
fi
echo "release: $ref is commit $commit, version $version"
bash scripts/check-version.sh "$tmp" || die "the versions at $ref disagree (above)"
for f in Cargo.toml Cargo.lock leaf_id.control META.json LICENSE README.md src/lib.rs sql/schema.sql sql/finish.sql; do
  [ -f "$tmp/$f" ] || die "$f is not in the tree at $ref"
done
if [ "$ref" = HEAD ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "release: note: the work tree has uncommitted changes; the archive is the committed HEAD"
fi

out=$ROOT/target/release
mkdir -p "$out"
zip=$out/$name.zip
tgz=$out/$name.tar.gz
rm -f "$zip" "$tgz"
git archive --format=zip --prefix="$name/" -o "$zip" "$archive_ref"
git archive --format=tar.gz --prefix="$name/" -o "$tgz" "$archive_ref"

# Both archives hold exactly the tracked files at the tag, under $name/.
python3 - "$name" "$zip" "$tgz" "$commit" <<'PY'
import subprocess, sys, tarfile, zipfile
name, zpath, tpath, commit = sys.argv[1:]
tracked = set(subprocess.run(["git", "ls-tree", "-r", "-z", "--name-only", commit],
                             check=True, capture_output=True).stdout.decode().split("\0")) - {""}
zfiles = {n for n in zipfile.ZipFile(zpath).namelist() if not n.endswith("/")}
with tarfile.open(tpath) as t:
    tfiles = {m.name for m in t.getmembers() if not m.isdir()}
for label, files in (("zip", zfiles), ("tar.gz", tfiles)):
    outside = sorted(f for f in files if not f.startswith(name + "/"))
    if outside:
        sys.exit(f"release: the {label} has files outside {name}/: {outside[:5]}")
    got = {f[len(name) + 1:] for f in files}
    if got != tracked:
        sys.exit(f"release: the {label} is not the tracked files: missing {sorted(tracked - got)[:5]}, extra {sorted(got - tracked)[:5]}")
print(f"release: {len(tracked)} files under {name}/ in each archive")
PY

sha256sum "$zip" "$tgz"
