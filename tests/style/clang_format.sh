#!/usr/bin/env bash
# Every C file of the repository (git ls-files '*.c' '*.h') is as Debian's clang-format 14
# writes it with the repository's .clang-format: `clang-format -i FILE` is the fix.
#   clang_format.sh SRC_DIR
source "$(dirname "$0")/../assert.sh"
src=$1
cd "$src" || fail "no source directory $src"
command -v clang-format >/dev/null || fail "clang-format is not installed (scripts/deps installs it)"
version=$(clang-format --version)
[[ $version == *"version 14."* ]] ||
  fail "the format is Debian's clang-format 14's; this is: $version"
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || skip "$src is no git checkout"
mapfile -t files < <(git ls-files '*.c' '*.h')
((${#files[@]} > 50)) || fail "git ls-files found only ${#files[@]} C files in $src"
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
((${#bad[@]} == 0)) || fail "not clang-formatted (run clang-format -i on them): ${bad[*]}"
echo "ok: ${#files[@]} C files as clang-format writes them"
