#!/usr/bin/env bash
# nemesis_run.sh EXPECT NEMESIS-ARGS...: runs loadtest/nemesis on this test's own ports
# (STOCKD_TEST_PORTS, 19 of its 20) with its output under the test's run directory, and
# checks its verdict. EXPECT is `exact` (exit 0, no anomaly) or the name of an anomaly
# the run must report (exit 1 and an "ANOMALY NAME" line): a self-check, showing that
# the checker fails where it must.
source "$STOCKD_SRC/tests/lib.sh"
expect=${1:?exact or an anomaly name}
shift
rc=0
"$STOCKD_SRC/loadtest/nemesis" --port-base "$PORT0" --out "$T/nemesis" --stockd-bin "$STOCKD_BIN" \
  "$@" >"$T/nemesis.out" 2>"$T/nemesis.err" || rc=$?
grep -v '^  ' "$T/nemesis.out" | head -40
tail -n 3 "$T/nemesis.err"
((rc != 2)) || fail "the nemesis run itself failed (exit 2): $(tail -n 5 "$T/nemesis.err")"
if [[ $expect == exact ]]; then
  expect_eq "nemesis exit (0: no anomaly)" 0 "$rc"
else
  expect_eq "nemesis exit (1: anomalies)" 1 "$rc"
  grep -q "^ANOMALY $expect " "$T/nemesis.out" || fail "no $expect anomaly was reported"
  echo "ok: the checker reported $expect"
fi
