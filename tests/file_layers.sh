#!/usr/bin/env bash
# No circle between files: a file calls only files at or below its layer. Given the
# object files of one module (or a few), it prints each file-to-file call edge (caller
# callee, from the symbols each object defines and those it leaves undefined) and fails
# when tsort finds a loop among them, which it names. Run by ctest on service/, lock/ and
# db/; by hand: bash tests/file_layers.sh build/db/CMakeFiles/stockdb.dir/*.o
set -euo pipefail
[ $# -gt 0 ] || {
  echo "usage: file_layers.sh OBJECT..." >&2
  exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for o in "$@"; do
  f=$(basename "$o" .o)
  f=${f%.c}
  nm -g --defined-only "$o" | awk -v f="$f" 'NF == 3 { print $3, f }' >>"$tmp/defs"
  nm -u "$o" | awk -v f="$f" '{ print $2, f }' >>"$tmp/uses"
done
sort -k1,1 -o "$tmp/defs" "$tmp/defs"
sort -k1,1 -o "$tmp/uses" "$tmp/uses"
join "$tmp/uses" "$tmp/defs" | awk '$2 != $3 { print $2, $3 }' | sort -u >"$tmp/edges"
cat "$tmp/edges"
if ! tsort "$tmp/edges" >/dev/null 2>"$tmp/loop"; then
  echo "FAIL: files call each other in a circle:" >&2
  cat "$tmp/loop" >&2
  exit 1
fi
echo "ok: no circle among $# files"
