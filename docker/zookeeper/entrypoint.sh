#!/usr/bin/env bash
# The ZooKeeper container's main process (docker/zookeeper/Dockerfile): scripts/stack-lib.sh
# writes the zoo.cfg of every ZooKeeper of ours (tickTime 500, 1 s minimum session, all
# four-letter words), listening on all of the container's interfaces, and replaces this
# shell with the JVM, logging to stdout. Lock nodes are ephemeral, so the data lives in
# the container only. STOCKD_RUN (/var/lib/stockd) and STOCKD_ZK_PORT (2181) may be set.
set -euo pipefail
# shellcheck source=../../scripts/stack-lib.sh
source "${STOCKD_LIB:-/usr/local/lib/stockd}/scripts/stack-lib.sh"

d=${STOCKD_RUN:-/var/lib/stockd}/zk
mkdir -p "$d/data"
zk_write_cfg "$d" "${STOCKD_ZK_PORT:-2181}" 0.0.0.0
zk_log4j "$d" console
zk_exec "$d"
