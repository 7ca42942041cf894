#!/usr/bin/env bash
# zklock_layers.sh LIBZKLOCK: the calls between the files of the zklock library, read
# from its archive's symbol tables (nm), and checked against the layers of
# lock/zklock_int.h: a file may call only files of a lower layer, so no two files call
# each other, directly or round a circle. Prints every edge with the symbols it uses;
# fails on an edge that does not point down, or on a zklock file without a layer.
set -euo pipefail
lib=${1:?usage: zklock_layers.sh path/to/libzklock.a}
# Member (object) name, without .c.o, and symbol, for what each member defines and uses.
nm -A --defined-only "$lib" | awk '$2 ~ /^[TDRB]$/ { n = split($1, m, ":"); sub(/\.c\.o$/, "", m[n - 1]); print "def", m[n - 1], $3 }' >"${TMPDIR:-/tmp}/zklock_layers.$$"
nm -A --undefined-only "$lib" | awk '{ n = split($1, m, ":"); sub(/\.c\.o$/, "", m[n - 1]); print "use", m[n - 1], $NF }' >>"${TMPDIR:-/tmp}/zklock_layers.$$"
trap 'rm -f "${TMPDIR:-/tmp}/zklock_layers.$$"' EXIT
awk '
  BEGIN {
    layer["zklock_conn"] = 1; layer["zklock_hold"] = 2; layer["zklock_cache"] = 3
    layer["zklock"] = 4; layer["zklock_session"] = 4; layer["zklock_view"] = 4
    layer["zklock_many"] = 5
    layer["zklock_kind"] = 6
  }
  $1 == "def" { owner[$3] = $2; files[$2] = 1; next }
  $1 == "use" && ($3 in owner) && owner[$3] != $2 { e = $2 " -> " owner[$3]; edge[e] = edge[e] " " $3 }
  END {
    bad = 0
    for (f in files) if (!(f in layer)) { print "FAIL: " f ".c has no layer in zklock_layers.sh"; bad = 1 }
    for (e in edge) {
      split(e, p, " -> ")
      up = layer[p[2]] >= layer[p[1]]
      printf "%s%s (%d -> %d):%s\n", up ? "FAIL: " : "", e, layer[p[1]], layer[p[2]], edge[e]
      bad = bad || up
    }
    exit bad
  }' "${TMPDIR:-/tmp}/zklock_layers.$$" | sort
