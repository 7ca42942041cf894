#!/usr/bin/env bash
# The Redis container's main process (docker/redis/Dockerfile): redis-server with
# scripts/stack-lib.sh's settings (STACK_REDIS_FLAGS: no persistence), logging to
# stdout, where the container engine collects it.
#
# It differs from the native stack's redis_start in where it listens, and only as far
# as the container network needs: it listens on all of the container's interfaces
# (loopback, for the health check, and the compose network, for stockd). With
# STACK_REDIS_PASSWORD (docker-compose.yml sets it) it has redis_start's ACL: the
# default user off, user stockd with that password and only the lock's commands. So
# protected mode stays on: it only refuses clients off loopback while the default user
# has no password, and here that user is off. Without a password it therefore serves
# loopback only. The container publishes no port (docker-compose.yml), so only the
# containers of the same compose network reach it. STOCKD_RUN (/var/lib/stockd),
# STOCKD_REDIS_PORT (6379) and STOCKD_REDIS_BIND (0.0.0.0) may be set.
set -euo pipefail
# shellcheck source=../../scripts/stack-lib.sh
source "${STOCKD_LIB:-/usr/local/lib/stockd}/scripts/stack-lib.sh"

d=${STOCKD_RUN:-/var/lib/stockd}/redis
mkdir -p "$d"
conf=$(redis_auth_conf "$d")
exec redis-server ${conf:+"$conf"} --port "${STOCKD_REDIS_PORT:-6379}" \
  --bind "${STOCKD_REDIS_BIND:-0.0.0.0}" --protected-mode yes "${STACK_REDIS_FLAGS[@]}" --dir "$d"
