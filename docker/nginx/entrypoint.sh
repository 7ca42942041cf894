#!/usr/bin/env bash
# The nginx container's main process (docker/nginx/Dockerfile). nginx resolves the
# upstream names (stockd-1..3) once, when it loads its configuration, and refuses to
# start if one does not resolve. Under Docker Compose nginx starts after the stockd
# containers are healthy, but podman-compose only keeps the start order, and a stockd
# container that is restarted may come back with another address. So:
#   - before starting nginx, wait until every upstream name resolves (nginx -t passes);
#   - then run nginx as the container's main process (it gets the engine's signals),
#     with a watcher beside it that reloads nginx whenever the addresses of the
#     upstream names change, so it never keeps sending to an address that is gone.
# A stockd that resolves but does not listen yet costs the requests sent to it a 502
# (deductions are never retried on another instance, see nginx.conf); other routes
# move on to the next instance.
set -euo pipefail
conf=${STOCKD_NGINX_CONF:-/etc/nginx/nginx.conf}

# The configuration: nginx/nginx.conf.in, the native stack's template, rendered by the
# same code (lab/nginx.py) for the image, with the route and the rate limit that
# docker-compose.yml passes from the host's environment:
#   STOCKD_NGINX_ROUTE       round-robin (default) | affinity (hash $arg_id consistent)
#   STOCKD_NGINX_RATE_LIMIT  empty or off (no limit) | RATE[:BURST], RATE per second or N r/s, N r/m
#   STOCKD_NGINX_UPSTREAMS   the stockd services (default stockd-1:8080 stockd-2:8080 stockd-3:8080)
route=${STOCKD_NGINX_ROUTE:-round-robin} limit=${STOCKD_NGINX_RATE_LIMIT:-}
up=()
for u in ${STOCKD_NGINX_UPSTREAMS:-stockd-1:8080 stockd-2:8080 stockd-3:8080}; do up+=(--upstream "$u"); done
PYTHONPATH=${STOCKD_NGINX_LAB:-/usr/local/lib/stockd} python3 -m lab.nginx container "${up[@]}" \
  --route "$route" --rate-limit "$limit" --template "${STOCKD_NGINX_TEMPLATE:-/etc/stockd/nginx.conf.in}" \
  --out "$conf" || exit 2
printf 'stockd-nginx: route %s, rate limit %s\n' "$route" "${limit:-none}" >&2
# STOCKD_NGINX_RENDER_ONLY=1: only write the configuration (tests/stack/compose_config.sh).
[[ ${STOCKD_NGINX_RENDER_ONLY:-} != 1 ]] || exit 0

log() { printf 'stockd-nginx: %s\n' "$*" >&2; }

# addresses: the IPv4 addresses of every upstream name, one line per name.
addresses() {
  local name
  for name in $(sed -n 's/^[[:space:]]*server[[:space:]]\+\([A-Za-z0-9._-]\+\):[0-9].*/\1/p' "$conf"); do
    printf '%s %s\n' "$name" "$(getent ahostsv4 "$name" | awk '{ print $1 }' | sort -u | tr '\n' ' ')"
  done
}

# nginx -t's own last line is logged too: a configuration that fails for another
# reason than a name keeps failing, and the log must say so.
waited=0
until err=$(nginx -t -q 2>&1); do
  if ((waited % 10 == 0)); then
    log "waiting for the upstreams to resolve: $(addresses | tr '\n' ';') nginx -t: ${err##*$'\n'}"
  fi
  sleep 1
  waited=$((waited + 1))
done

# The watcher: nginx becomes its parent after the exec below and reaps it.
(
  applied=$(addresses)
  while sleep 2; do
    now=$(addresses)
    [[ $now != "$applied" ]] || continue
    if nginx -t -q 2>/dev/null && nginx -s reload; then
      log "upstream addresses changed, reloaded: $(tr '\n' ';' <<<"$now")"
      applied=$now
    fi
  done
) &
exec nginx -g 'daemon off;'
