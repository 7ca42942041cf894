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
template=${STOCKD_NGINX_TEMPLATE:-/etc/nginx/stockd-nginx.conf.in}

# The route and the rate limit (docker-compose.yml passes them from the host's
# environment): the template's marker comments become the directives, as
# scripts/stack-lib.sh's nginx_render does for the native stack.
#   STOCKD_NGINX_ROUTE       round-robin (default) | affinity (hash $arg_id consistent)
#   STOCKD_NGINX_RATE_LIMIT  empty or off (no limit) | RATE[:BURST], RATE per second or N r/s, N r/m
route=${STOCKD_NGINX_ROUTE:-round-robin} limit=${STOCKD_NGINX_RATE_LIMIT:-}
[[ $limit == off ]] && limit=""
balance="" zone="" limit_req="" servers_fail=max_fails=0
case $route in
round-robin) ;;
affinity) balance='hash $arg_id consistent;' servers_fail='max_fails=1 fail_timeout=2s' ;;
*) printf 'stockd-nginx: STOCKD_NGINX_ROUTE must be round-robin or affinity, got %s\n' "$route" >&2; exit 2 ;;
esac
if [[ -n $limit ]]; then
  if ! [[ $limit =~ ^([1-9][0-9]{0,6})(r/s|r/m)?(:([0-9]{1,7}))?$ ]]; then
    printf 'stockd-nginx: STOCKD_NGINX_RATE_LIMIT wants RATE[:BURST], got %s\n' "$limit" >&2
    exit 2
  fi
  rate=${BASH_REMATCH[1]}${BASH_REMATCH[2]:-r/s} burst=${BASH_REMATCH[4]:-${BASH_REMATCH[1]}}
  zone="limit_req_zone \$arg_id zone=stockd_product:1m rate=$rate;"
  limit_req="limit_req zone=stockd_product burst=$burst nodelay; limit_req_status 429;"
fi
[[ -r $template ]] || cp "$conf" "$template"
sed -e "s|^\([[:space:]]*\)#@BALANCE@[[:space:]]*\$|\1$balance|" \
  -e "s|^\([[:space:]]*\)#@LIMIT_ZONE@[[:space:]]*\$|\1$zone|" \
  -e "s|^\([[:space:]]*\)#@LIMIT_REQ@[[:space:]]*\$|\1$limit_req|" \
  -e "s|max_fails=0;|$servers_fail;|" "$template" >"$conf"
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
