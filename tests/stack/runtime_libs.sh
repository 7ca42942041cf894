#!/usr/bin/env bash
# The Dockerfile's runtime stage installs only a list of library packages, and no
# Docker engine runs here to try the image. So check the list against the binaries
# built on this Debian 12 host (the build stage's distribution): every shared library
# that stockd, stockload or stock-writer needs directly (ELF NEEDED) must come from a package of that
# list or from one that every Debian image has (libc6 and the like).
# Indirect libraries are the packages' own dependencies, which apt installs.
# Usage: runtime_libs.sh BINARY...
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../assert.sh"
df=$STOCKD_SRC/Dockerfile


# owner FILE: the package that installed FILE. dpkg knows each file under the path its
# package shipped, which on a merged-/usr system may be /lib/... for /usr/lib/... .
owner() {
  local f=$1 real c
  real=$(readlink -f "$f")
  for c in "$f" "$real" "${f#/usr}" "${real#/usr}" "/usr$f" "/usr$real"; do
    dpkg -S "$c" 2>/dev/null | awk -F': ' -v c="$c" '$2 == c { sub(/:.*/, "", $1); print $1; exit }' |
      grep . && return 0
  done
  return 0
}

for bin; do
  if [[ ! -x $bin ]]; then
    echo "SKIP: $bin is not built (cmake --build <dir> --target stockd stockload)"
    exit 77
  fi
  # The image is built without sanitizers; a sanitizer build of the tests links their
  # runtimes, which no image ships, so its answer here would say nothing about the image.
  if ldd "$bin" | grep -qE 'lib(asan|tsan|ubsan)\.so'; then
    echo "SKIP: $bin is a sanitizer build; the Docker image is not"
    exit 77
  fi
done

# The runtime stage's library packages: the lib* words of its lines, comments left out.
runtime_pkgs=$(awk '/^FROM / { n++ } n == 2 && !/^[[:space:]]*#/' "$df" | sed 's/[[:space:]\\]\+/\n/g' |
  grep -E '^lib[a-z0-9.+-]+$' | sort -u)
[[ -n $runtime_pkgs ]] || fail "no packages found in the Dockerfile's runtime stage"
echo "runtime stage installs: ${runtime_pkgs//$'\n'/ }"

# What every Debian image has: the packages of priority required, apt, and everything
# they depend on (libc6, libgcc-s1, libstdc++6, ...).
mapfile -t required < <(dpkg-query -W -f='${Package} ${Priority}\n' | awk '$2 == "required" { print $1 }')
base_pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances "${required[@]}" apt 2>/dev/null | grep -E '^[a-z0-9]' |
  sort -u)

for bin; do
  # ldd maps each NEEDED name to the file this host would load.
  declare -A path=()
  while read -r name _ file _; do
    [[ -n $file && $file == /* ]] && path[$name]=$file
  done < <(ldd "$bin")
  while read -r lib; do
    file=${path[$lib]:-}
    [[ -n $file ]] || fail "$(basename "$bin"): ldd does not resolve $lib"
    pkg=$(owner "$file")
    [[ -n $pkg ]] || fail "$(basename "$bin"): no package owns $lib ($file)"
    if grep -qx -- "$pkg" <<<"$runtime_pkgs"; then
      echo "ok: $(basename "$bin") needs $lib from $pkg (installed by the runtime stage)"
    elif grep -qx -- "$pkg" <<<"$base_pkgs"; then
      echo "ok: $(basename "$bin") needs $lib from $pkg (in every Debian image)"
    else
      fail "$(basename "$bin") needs $lib from $pkg, which the runtime stage does not install"
    fi
  done < <(objdump -p "$bin" | awk '$1 == "NEEDED" { print $2 }')
  unset path
done
