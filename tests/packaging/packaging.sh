#!/usr/bin/env bash
# packaging/ checked without servers (packaging/CMakeLists.txt says what it makes):
#   packaging.sh unit STOCKD UNIT MANPAGE   systemd-analyze verify on the template unit
#   packaging.sh man STOCKD MANPAGE         the man page names every option of --help
#   packaging.sh install BUILD_DIR          cmake --install puts bin, man page, unit, LICENSE
#   packaging.sh env STOCKD EXAMPLE         stockd.env.example's keys are stockd's variables
# Exits 77 (skipped) with the reason when the tool a check needs is missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../assert.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT


# options_of STOCKD: every --option that stockd --help names, one a line.
options_of() {
  env -i "$1" --help | grep -o -- '--[a-z][a-z0-9-]*' | sort -u
}

case ${1:-} in
unit)
  stockd=$2 unit=$3 manpage=$4
  command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed (package systemd)"
  # The promised hardening, and a template: one instance per port.
  for line in 'DynamicUser=yes' 'NoNewPrivileges=yes' 'ProtectSystem=strict' 'PrivateTmp=yes' \
    'EnvironmentFile=/etc/stockd/%i.env' 'ExecStart=/' '--port %i' 'Documentation=man:stockd(1)'; do
    grep -qF -- "$line" "$unit" || fail "$unit: expected '$line'"
  done
  # stockd has no reload, so the unit must not pretend to have one.
  ! grep -q '^ExecReload=' "$unit" || fail "$unit: ExecReload= but stockd has no reload"
  # verify checks that ExecStart is executable and that `man stockd(1)` opens: point
  # it at this build's binary and man page. Any warning (a misspelt or unknown setting
  # is only "ignoring") fails the test too.
  sed "s|^ExecStart=[^ ]*|ExecStart=$stockd|" "$unit" >"$T/stockd@29999.service"
  if [[ -f $manpage ]]; then
    mkdir -p "$T/man/man1"
    cp "$manpage" "$T/man/man1/stockd.1"
    man_opt=(--man=yes)
  else
    echo "note: no man page was built (help2man missing): not checking Documentation="
    man_opt=(--man=no)
  fi
  rc=0
  out=$(MANPATH=$T/man SYSTEMD_LOG_COLOR=0 systemd-analyze verify "${man_opt[@]}" \
    "$T/stockd@29999.service" 2>&1) || rc=$?
  # verify also loads the units it meets on the way and warns about theirs (Debian's
  # galera-arbitrator-4 ships garb.service with User=nobody): only the lines about
  # files of ours count.
  out=$(grep -v '^/lib/systemd/\|^/usr/lib/systemd/\|^/etc/systemd/' <<<"$out" || true)
  [[ $rc == 0 && -z $out ]] || fail "systemd-analyze verify stockd@29999.service: exit $rc: $out"
  echo "ok: systemd-analyze verify stockd@29999.service: no error, no warning"
  ;;
man)
  stockd=$2 manpage=$3
  [[ -f $manpage ]] || skip "$manpage was not built: help2man was not found at configure time"
  command -v man >/dev/null || skip "man is not installed (package man-db)"
  text=$(MANWIDTH=80 man -l "$manpage" 2>"$T/err") || fail "man -l $manpage: $(cat "$T/err")"
  [[ ! -s $T/err ]] || fail "man -l $manpage warned: $(cat "$T/err")"
  missing=()
  n=0
  while read -r opt; do
    n=$((n + 1))
    grep -qF -- "$opt" <<<"$text" || missing+=("$opt")
  done < <(options_of "$stockd")
  ((n > 20)) || fail "stockd --help named only $n options"
  ((${#missing[@]} == 0)) || fail "man -l $manpage lacks options of stockd --help: ${missing[*]}"
  for want in 'STOCKD(1)' 'STOCKD_MYSQL_PASSWORD' '/etc/stockd/PORT.env' 'EXIT STATUS' \
    "$(env -i "$stockd" --version)"; do
    grep -qF -- "$want" <<<"$text" || fail "man -l $manpage: expected '$want'"
  done
  echo "ok: man -l stockd.1 names all $n options of stockd --help, the environment, files, exit status, version"
  ;;
install)
  build=$2
  cmake --install "$build" --prefix "$T/prefix" >"$T/log" 2>&1 ||
    fail "cmake --install: $(cat "$T/log")"
  [[ -x $T/prefix/bin/stockd ]] || fail "no bin/stockd under the prefix: $(cat "$T/log")"
  [[ -x $T/prefix/bin/stock-writer ]] || fail "no bin/stock-writer under the prefix: $(cat "$T/log")"
  unit=$(find "$T/prefix" -name 'stockd@.service')
  [[ $unit == "$T/prefix/lib/systemd/system/stockd@.service" ]] ||
    fail "stockd@.service not in lib/systemd/system: '$unit'"
  grep -qF "ExecStart=$T/prefix/bin/stockd --port %i" "$unit" ||
    fail "the installed unit does not start the installed stockd: $(grep ExecStart "$unit")"
  cmp -s "$T/prefix/share/doc/stockd/LICENSE" "$(dirname "${BASH_SOURCE[0]}")/../../LICENSE" ||
    fail "share/doc/stockd/LICENSE is not the root's LICENSE: $(cat "$T/log")"
  if grep -q '^HELP2MAN:FILEPATH=/' "$build/CMakeCache.txt"; then
    [[ -f $T/prefix/share/man/man1/stockd.1 ]] || fail "no share/man/man1/stockd.1: $(cat "$T/log")"
    [[ -f $T/prefix/share/man/man1/stock-writer.1 ]] ||
      fail "no share/man/man1/stock-writer.1: $(cat "$T/log")"
  else
    echo "note: help2man was not found at configure time: no man page to install"
  fi
  echo "ok: cmake --install: bin/stockd, bin/stock-writer, their man pages, ${unit#"$T/prefix/"}, share/doc/stockd/LICENSE"
  ;;
env)
  # Every line of the example, commented or not, is accepted by stockd --config (which
  # parses the file, then --help exits 0): its keys and values are those of the option
  # table. The password is the environment's only, so it is checked apart, and the
  # port is the unit's instance name.
  stockd=$2 example=$3
  sed -n -e '/^STOCKD_/p' -e 's/^# *\(STOCKD_[A-Z_]*=\)/\1/p' "$example" >"$T/all.env"
  grep -q '^STOCKD_MYSQL_PASSWORD=' "$T/all.env" || fail "$example: no STOCKD_MYSQL_PASSWORD"
  ! grep -q '^STOCKD_PORT=' "$T/all.env" || fail "$example sets STOCKD_PORT (the unit's instance)"
  grep -v '^STOCKD_MYSQL_PASSWORD=' "$T/all.env" >"$T/stockd.conf"
  n=$(wc -l <"$T/stockd.conf")
  ((n >= 5)) || fail "$example names only $n keys"
  out=$(env -i "$stockd" --config "$T/stockd.conf" --help 2>&1 >/dev/null) ||
    fail "stockd --config with the lines of $example: $out"
  echo "ok: all $n keys of $example (commented or not) are accepted by stockd --config"
  ;;
*)
  echo "usage: packaging.sh unit|man|install|env ..." >&2
  exit 2
  ;;
esac
