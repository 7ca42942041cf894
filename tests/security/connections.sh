#!/usr/bin/env bash
# Connections that hold stockd without finishing a request: a slow client (half a
# request head, or a head with only part of its body) is closed by the connection
# timeout, and more idle sockets than --max-connections neither crash stockd nor stop
# it for good. What happens over the limit (measured, libmicrohttpd 0.9.75): stockd
# stops accepting, so the extra connections wait in the kernel's listen queue and are
# served once the idle ones time out; a normal request in the meantime is delayed by
# up to the connection timeout per round of idle sockets, not refused. Behind nginx the
# idle sockets never reach stockd at all: nginx opens an upstream connection only for a
# complete request, so normal requests through nginx keep being served at once.
#
# The bounds below (30 s for a 2 s timeout) only catch a hang; they measure nothing.
source "$STOCKD_SRC/tests/lib.sh"

t_db
t_stockd 1 none --connection-timeout-s 2 --max-connections 20
t_nginx 1
port=$((PORT0 + 1))
spid=$(cat "$T/stockd/1.pid")
orders=$(sql 'SELECT COUNT(*) FROM orders')

# accepted: how many connections on stockd's port stockd has accepted (a socket still in
# the listen queue belongs to no process yet).
accepted() {
  ss -tnpH state established "( sport = :$port )" | grep -c "pid=$spid," || true
}

# closed_within SECONDS FD: true if the peer closes FD (EOF) within SECONDS.
closed_within() {
  timeout "$1" cat <&"$2" >/dev/null 2>&1
}

# A slow client: half a request head, then nothing.
exec {fd}<>"/dev/tcp/127.0.0.1/$port"
printf 'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ' >&"$fd"
closed_within 30 "$fd" || fail "a half-sent request head was not closed by the 2 s timeout"
exec {fd}<&-
echo "ok: a half-sent request head is closed by the connection timeout"

# A slow body: a complete head announcing 100 bytes, then 10.
exec {fd}<>"/dev/tcp/127.0.0.1/$port"
printf 'POST /stock/reduce?id=2 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789' >&"$fd"
closed_within 30 "$fd" || fail "a half-sent body was not closed by the 2 s timeout"
exec {fd}<&-
echo "ok: a half-sent body is closed by the connection timeout"

# 40 idle sockets against a limit of 20.
idle=()
for ((i = 0; i < 40; i++)); do
  exec {fd}<>"/dev/tcp/127.0.0.1/$port" || fail "connect $i to stockd failed"
  idle+=("$fd")
done
# stockd has taken what it will: its limit, the rest queued (a socket closed by the 2 s
# timeout lets one more in, which keeps it at the limit).
wait_until 10 eval '(($(accepted) >= 20))' || echo "stockd accepted only $(accepted) of 40"
n=$(accepted)
((n <= 20)) || fail "stockd accepted $n connections over its limit of 20"
echo "ok: stockd holds $n of 40 idle sockets (limit 20); the rest wait in the listen queue"
code=$(curl -s -m 30 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health") || true
expect_eq "/health while 40 idle sockets are open (served after they time out)" 200 "$code"
for fd in "${idle[@]}"; do
  closed_within 30 "$fd" || fail "an idle socket (fd $fd) was never closed by stockd"
  exec {fd}<&-
done
echo "ok: stockd closed all 40 idle sockets"
pid_alive "$T/stockd/1.pid" || fail "stockd died"

# The same 40 idle sockets against nginx: stockd does not even see them.
idle=()
for ((i = 0; i < 40; i++)); do
  exec {fd}<>"/dev/tcp/127.0.0.1/$PORT0" || fail "connect $i to nginx failed"
  idle+=("$fd")
done
wait_until 10 eval '(($(tcp_conns "sport = :$PORT0" nginx) >= 40))' ||
  fail "nginx accepted $(tcp_conns "sport = :$PORT0" nginx) of the 40 idle sockets"
for ((i = 0; i < 5; i++)); do
  code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT0/health") || true
  expect_eq "/health through nginx with 40 idle sockets on nginx" 200 "$code"
done
n=$(accepted)
((n < 20)) || fail "idle sockets on nginx took $n of stockd's 20 connections"
echo "ok: 40 idle sockets on nginx hold $n connection(s) to stockd"
for fd in "${idle[@]}"; do exec {fd}<&-; done

code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health") || true
expect_eq "/health afterwards" 200 "$code"
pid_alive "$T/stockd/1.pid" || fail "stockd died"
expect_eq "orders (nothing deducted)" "$orders" "$(sql 'SELECT COUNT(*) FROM orders')"
echo "PASS"
