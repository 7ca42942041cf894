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
# One process for every file (one per file took minutes on a busy machine): each
# difference is reported as "FILE:LINE:COL: error: code should be clang-formatted".
rc=0
out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1) || rc=$?
mapfile -t bad < <(grep -o '^[^:]*:[0-9]*:[0-9]*: error' <<<"$out" | cut -d: -f1 | sort -u)
((rc == 0 && ${#bad[@]} == 0)) || fail "not clang-formatted (run clang-format -i on them): ${bad[*]:-$out}"
echo "ok: ${#files[@]} C files as clang-format writes them"
