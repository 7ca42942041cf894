#!/usr/bin/env bash
# stockd in mode redis against a Redis that wants a password (issue 16, defect 12): its
# own redis-server with lab/servers.py's ACL (the default user off, one user
# `stockd` limited to the lock's commands and keys).
#   - the right password, from STOCKD_REDIS_PASSWORD or --redis-password-file, with
#     --redis-user stockd: every deduction goes through, stock and orders move exactly;
#   - a wrong password, or none: 503 "Redis is unavailable", nothing deducted, the
#     process stays up, and its log says the credentials were refused (WRONGPASS,
#     NOAUTH), not a vague failure;
#   - the password is nowhere in stockd's argv;
#   - the ACL itself: without the password a client cannot SET the fencing counter,
#     and with it cannot FLUSHALL or touch keys outside lock:*.
source "$STOCKD_SRC/tests/lib.sh"

t_db

rport=$((PORT0 + 17))
REDIS=127.0.0.1:$rport
PW=right-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
STACK_REDIS_PASSWORD=$PW redis_start "$T" "$rport" own-redis || fail "no Redis with a password"
unset STOCKD_REDIS_PASSWORD

# The ACL, seen from plain redis-cli.
out=$(redis-cli -h 127.0.0.1 -p "$rport" set 'lock:#fence' 9223372036854775807 2>&1)
[[ $out == NOAUTH* ]] || fail "a client without the password could SET the fence counter: $out"
echo "ok: without the password: $out"
out=$(REDISCLI_AUTH=$PW redis-cli -h 127.0.0.1 -p "$rport" --user stockd flushall 2>&1)
[[ $out == NOPERM* ]] || fail "user stockd could FLUSHALL: $out"
echo "ok: user stockd, FLUSHALL: $out"

p=3 s0=$(stock 3) n0=$(orders 3)
common=(--redis "$REDIS" --redis-user stockd --lock-timeout-ms 2000)

# Right password from the environment: exact deductions.
# (The user from the environment here, from argv below.)
STOCKD_REDIS_USER=stockd STOCKD_REDIS_PASSWORD=$PW t_stockd 1 redis --redis "$REDIS" --lock-timeout-ms 2000
for i in 1 2 3 4 5; do
  expect_eq "deduction $i with the right password" "200 deducted" "$(reduce $((PORT0 + 1)) $p)"
done
expect_eq "stock after 5 deductions" $((s0 - 5)) "$(stock $p)"
expect_eq "orders after 5 deductions" $((n0 + 5)) "$(orders $p)"
grep -q -- "$PW" "/proc/$(cat "$T/stockd/1.pid")/cmdline" && fail "the password is in argv"
echo "ok: the password is not in argv"

# Right password from a file.
printf '%s\n' "$PW" >"$T/redis-pw"
chmod 600 "$T/redis-pw"
t_stockd 2 redis "${common[@]}" --redis-password-file "$T/redis-pw"
expect_eq "a deduction with the password from a file" "200 deducted" "$(reduce $((PORT0 + 2)) $p)"
s1=$(stock $p) n1=$(orders $p)
expect_eq "stock after 6 deductions" $((s0 - 6)) "$s1"

# Wrong password, and none at all: 503, nothing deducted, a clear log line.
STOCKD_REDIS_PASSWORD=wrong-password t_stockd 3 redis "${common[@]}"
t_stockd 4 redis --redis "$REDIS" --lock-timeout-ms 2000
for i in 3 4; do
  for k in 1 2 3; do
    expect_eq "stockd-$i, deduction $k" "503 unavailable" "$(reduce $((PORT0 + i)) $p)"
  done
  expect_eq "stockd-$i's message" "Redis is unavailable; nothing was deducted" \
    "$(jq -r .message "$T/ans.$((PORT0 + i))")"
  code=$(curl -sS -m 10 -o "$T/health" -w '%{http_code}' "http://127.0.0.1:$((PORT0 + i))/health")
  expect_eq "stockd-$i /health" 503 "$code"
  alive "$i"
done
expect_eq "stock: nothing deducted without the right password" "$s1" "$(stock $p)"
expect_eq "orders: none without the right password" "$n1" "$(orders $p)"
line=$(grep -m1 'authentication as stockd refused: WRONGPASS' "$T/stockd/3.log") ||
  fail "no clear log line for the wrong password: $(tail -n 5 "$T/stockd/3.log")"
echo "ok: stockd-3 logs: $line"
grep -q -- wrong-password "$T/stockd/3.log" && fail "the wrong password is in the log"
line=$(grep -m1 'NOAUTH' "$T/stockd/4.log") ||
  fail "no clear log line for the missing password: $(tail -n 5 "$T/stockd/4.log")"
echo "ok: stockd-4 logs: $line"
redis_stop "$T" own-redis
