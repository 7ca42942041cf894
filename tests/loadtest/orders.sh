#!/usr/bin/env bash
# The experiment's rows of issue 42 (loadtest/orders, docs/orders.md) as tests: three
# stockd instances of one lock mode behind a real nginx, with an admin token of their
# own, and the verdict the row must reach.
#   orders.sh ROW MODE EXPECT [STOCKD ARGS...]
# ROW is limit (one customer, a limit of 1, 30 requests at once) or reserve
# (reservations of 3 s paid, paid late, cancelled at the expiry and twice, a restock
# through the API, a second wave). EXPECT is
#   over-limit   the customer holds more than 1 unit (no lock: every request read "none
#                bought yet"), and the books still add up;
#   one          the customer holds exactly 1 unit and every other request was answered
#                limit_reached (409), none sold_out, 503 or lost;
#   exact        the reservation row's verdict is EXACT: paid <= initial + restocks, each
#                answer agrees with its row, no late payment accepted, no order
#                cancelled twice, nothing left reserved past its expiry, and stock =
#                initial + restocks - sold - reserved - paid.
# The same settings for every mode as the seed's experiment: a pause of 20 to 40 ms
# between the check and the write (docs/tutorial.md), so that the race is independent
# of this machine's speed.
source "$STOCKD_SRC/tests/lib.sh"
row=$1 mode=$2 expect=$3
shift 3
need_stockd_bin
# (Not `stockd --help | grep -q`: grep's early exit is stockd's SIGPIPE under pipefail.)
[[ $("$STOCKD_BIN" --help 2>&1) == *--admin-token-file* ]] ||
  skip "this stockd has no order API yet (--admin-token-file: issue 42's service side)"

t_db
(umask 077 && head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/admin-token")
for i in 1 2 3; do
  t_stockd "$i" "$mode" --think-us 20000 --think-jitter-us 20000 \
    --admin-token-file "$T/admin-token" "$@"
done
t_nginx 3

"$STOCKD_SRC/loadtest/orders" "$row" --url "http://127.0.0.1:$PORT0" --run "$STOCKD_TEST_RUN" \
  --db "$DB" --token-file "$T/admin-token" --label "$row $mode x3" | tee "$T/out"
res=$(grep '^RESULT ' "$T/out") || fail "no RESULT line"
get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$res"; }

expect_eq "books (stock = initial + restocks - held rows, answers = rows)" ok "$(get ledger)"
case $expect in
over-limit)
  expect_eq "verdict" OVER_LIMIT "$(get verdict)"
  (($(get customer_units) > 1)) || fail "expected more than 1 unit for the customer, got $(get customer_units)"
  echo "ok: one customer with a limit of 1 got $(get customer_units) units"
  ;;
one)
  expect_eq "verdict" EXACT "$(get verdict)"
  expect_eq "units the customer holds" 1 "$(get customer_units)"
  expect_eq "limit_reached answers" $(($(get requests) - 1)) "$(get limit_reached)"
  expect_eq "final stock" $(($(get initial) - 1)) "$(get final)"
  ;;
exact)
  expect_eq "verdict" EXACT "$(get verdict)"
  (($(get released) > 0)) || fail "no reservation was released: the row tested nothing"
  (($(get restocked) > 0)) || fail "the restock through the API was not counted"
  echo "ok: paid $(get paid) of $(($(get initial) + $(get restocked))), released $(get released)"
  ;;
*) fail "unknown expectation $expect" ;;
esac
echo PASS
