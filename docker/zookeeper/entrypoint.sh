#!/usr/bin/env bash
# The ZooKeeper container's main process (docker/zookeeper/Dockerfile): scripts/stack-lib.sh
# writes the zoo.cfg of every ZooKeeper of ours (tickTime 500, 1 s minimum session, all
# four-letter words), listening on all of the container's interfaces, and replaces this
# shell with the JVM, logging to stdout. Lock nodes are ephemeral, so the data lives in
# the container only. STOCKD_RUN (/var/lib/stockd) and STOCKD_ZK_PORT (2181) may be set.
#
# Standalone unless STOCKD_ZK_MYID is set: then the server is member STOCKD_ZK_MYID of
# the ensemble STOCKD_ZK_SERVERS, a comma-separated HOST:QUORUM_PORT:ELECTION_PORT
# list whose I-th entry is server I (docker-compose.yml: zk1..zk3, each given the same
# list and its own number), configured by stack-lib's zk_ensemble_cfg as the native
# ensemble is.
set -euo pipefail
# shellcheck source=../../scripts/stack-lib.sh
source "${STOCKD_LIB:-/usr/local/lib/stockd}/scripts/stack-lib.sh"

d=${STOCKD_RUN:-/var/lib/stockd}/zk
mkdir -p "$d/data"
zk_write_cfg "$d" "${STOCKD_ZK_PORT:-2181}" 0.0.0.0
if [[ -n ${STOCKD_ZK_MYID:-} ]]; then
  [[ -n ${STOCKD_ZK_SERVERS:-} ]] ||
    { stack_log "stockd-zookeeper: STOCKD_ZK_MYID is set but STOCKD_ZK_SERVERS is not"; exit 2; }
  IFS=, read -r -a servers <<<"$STOCKD_ZK_SERVERS"
  zk_ensemble_cfg "$d" "$STOCKD_ZK_MYID" "${servers[@]}" || exit 2
  # A member's own entry names its service, which resolves to the container's address
  # on the compose network; listening on every interface for the quorum and election
  # ports as well keeps it reachable whatever that name resolves to inside.
  echo quorumListenOnAllIPs=true >>"$d/zoo.cfg"
fi
zk_log4j "$d" console
zk_exec "$d"
