# shellcheck shell=bash
# The stack's servers for shell scripts: the integration tests' helpers, the load tools
# and the container entrypoints source this file. Each thing is written once, here or
# in the lab library (lab/):
#   - starting, stopping and asking the servers is lab/servers.py's, the same code as
#     scripts/stack's; the functions of the list below call it (through lab/shell.py);
#   - what the container images need, which have no Python, is written here, and
#     lab/servers.py runs these same functions for the native servers: the MariaDB
#     install, schema and grants (mysql_install, mysql_create_db), the zoo.cfg and the
#     JVM (zk_write_cfg, zk_ensemble_cfg, zk_log4j, zk_exec), Redis's ACL file
#     (redis_auth_conf), the server flags, and the probes of their health checks
#     (zk_serving, redis_ping);
#   - stockd_start is shell, so that the instance is a child of the calling test,
#     which can wait for its exit status; with it the few process helpers it needs.
#
# Everything lives under one run directory ($1 of each function) and listens on ports
# given by the caller. Each server writes its pid file there; stopping reads it back.
# Functions return non-zero on failure and print why on stderr.

STACK_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STACK_SRC=$(cd "$STACK_LIB_DIR/.." && pwd)

stack_log() { printf '%s\n' "$*" >&2; }

# stack_lab FUNCTION ARGS...: FUNCTION of the lab library (lab/shell.py), on Debian's
# python3, whose python3-pymysql the library uses.
stack_lab() { PYTHONPATH=$STACK_SRC${PYTHONPATH:+:$PYTHONPATH} /usr/bin/python3 -m lab.shell "$@"; }

# The servers, each started by the lab library; starting one that runs does nothing.
#   mysql_start RUN PORT                 MariaDB (RUN/mysql, root over RUN/mysql/sock)
#   zk_start RUN PORT [NAME]             a standalone ZooKeeper (RUN/NAME, default zk)
#   zk_ensemble_start RUN FIRST          three servers from port FIRST (RUN/zk1..3):
#                                        clients FIRST+0..2, quorum +3..5, election +6..8
#   zk_ensemble_start_one RUN FIRST N [nowait]
#                                        member N again (waits until it serves, which
#                                        needs a quorum, unless told nowait)
#   redis_start RUN PORT [NAME [MASTER_PORT]]
#                                        Redis (RUN/NAME, default redis); with
#                                        STACK_REDIS_PASSWORD only the ACL user
#                                        STACK_REDIS_USER may log in (redis_auth_conf);
#                                        with MASTER_PORT a replica
#   sentinel_start RUN PORT MASTER_PORT [NAME]
#   etcd_start RUN PORT                  one member, its peer port PORT-1
#   prometheus_start RUN PORT            scraping RUN/prometheus/targets.json
#                                        (STACK_PROMETHEUS_INTERVAL, default 5s)
#   prometheus_targets RUN STOCKD_PORT...
#   nginx_start RUN PORT UPSTREAM_PORT...
#                                        nginx/nginx.conf.in, routed and limited as
#                                        STACK_NGINX_ROUTE / STACK_NGINX_RATE_LIMIT say
#   etcd_cluster_start RUN FIRST         three members from port FIRST (RUN/etcd1..3):
#                                        clients FIRST+0..2, peers +3..5
#   mysql_stop RUN, zk_stop RUN [NAME], zk_ensemble_stop RUN, redis_stop RUN [NAME],
#   sentinel_stop RUN [NAME], etcd_stop RUN, etcd_cluster_stop RUN, prometheus_stop RUN,
#   stockd_stop_all RUN, nginx_stop RUN
# and what the tests ask of them, from the same library:
#   zk_ensemble_hosts FIRST, etcd_cluster_hosts FIRST
#                                        stockd's --zk / --etcd for all three members
#   zk_leader FIRST, etcd_cluster_leader FIRST
#                                        the member (1..3) that leads; fails if none
#   zk_ensemble_mode FIRST N             member N's mode (nothing while it is down)
#   mysql_set_stock RUN DB ID STOCK [SEGMENTS]
#                                        one product's stock (split over SEGMENTS, as
#                                        `stockd --segments` expects), fence 0, no orders
mysql_start() { stack_lab mysql_start "$@"; }
mysql_stop() { stack_lab mysql_stop "$@"; }
zk_start() { stack_lab zk_start "$@"; }
zk_stop() { stack_lab zk_stop "$@"; }
zk_ensemble_start() { stack_lab zk_ensemble_start "$@"; }
zk_ensemble_start_one() { stack_lab zk_ensemble_start_one "$@"; }
zk_ensemble_stop() { stack_lab zk_ensemble_stop "$@"; }
redis_start() { stack_lab redis_start "$@"; }
redis_stop() { stack_lab redis_stop "$@"; }
sentinel_start() { stack_lab sentinel_start "$@"; }
sentinel_stop() { stack_lab sentinel_stop "$@"; }
etcd_start() { stack_lab etcd_start "$@"; }
etcd_stop() { stack_lab etcd_stop "$@"; }
prometheus_start() { stack_lab prometheus_start "$@"; }
prometheus_stop() { stack_lab prometheus_stop "$@"; }
prometheus_targets() { stack_lab prometheus_targets "$@"; }
stockd_stop_all() { stack_lab stockd_stop_all "$@"; }
nginx_start() { stack_lab nginx_start "$@"; }
nginx_stop() { stack_lab nginx_stop "$@"; }
etcd_cluster_start() { stack_lab etcd_cluster_start "$@"; }
etcd_cluster_stop() { stack_lab etcd_cluster_stop "$@"; }
etcd_cluster_hosts() { stack_lab etcd_cluster_hosts "$@"; }
etcd_cluster_leader() { stack_lab etcd_cluster_leader "$@"; }
zk_ensemble_hosts() { stack_lab zk_ensemble_hosts "$@"; }
zk_ensemble_mode() { stack_lab zk_ensemble_mode "$@"; }
zk_leader() { stack_lab zk_leader "$@"; }
mysql_set_stock() { stack_lab mysql_set_stock "$@"; }

# wait_until SECONDS CMD...: runs CMD every 0.1 s until it succeeds or time runs out.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# pid_runs PID: true if process PID runs. A zombie does not: a server killed while its
# starter has exited is reaped by init, which may take seconds (seen here), and in the
# meantime it must already count as down, for `status` and for starting it again. (A
# zombie main thread whose other threads still run is a running process.)
pid_runs() {
  local state='' tasks
  kill -0 "$1" 2>/dev/null || return 1
  state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || true
  [[ $state == Z ]] || return 0
  tasks=("/proc/$1/task"/*)
  ((${#tasks[@]} > 1))
}

pid_gone() { ! pid_runs "$1"; }

# pid_alive PIDFILE: true if the process named in PIDFILE runs.
pid_alive() {
  [[ -s $1 ]] && pid_runs "$(cat "$1")"
}

# stop_pidfile PIDFILE [SECONDS]: SIGTERM, wait, then SIGKILL.
stop_pidfile() {
  local f=$1 secs=${2:-20} pid
  [[ -s $f ]] || return 0
  pid=$(cat "$f")
  if pid_runs "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_until "$secs" pid_gone "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      wait_until 5 pid_gone "$pid" || true
    fi
  fi
  rm -f "$f"
}

# port_free PORT: true if nothing listens on 127.0.0.1:PORT.
port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ---------------------------------------------------------------- MariaDB

# mysql_cli RUN [ARGS...]: the mariadb client as root over the private socket.
mysql_cli() {
  local run=$1
  shift
  mariadb --no-defaults -uroot -S "$run/mysql/sock" "$@"
}

# The server settings of every MariaDB of ours: the native stack's (mysql_start) and
# the container's (docker/mariadb). Durable defaults (innodb_flush_log_at_trx_commit=1)
# are kept on purpose: the experiments must run against a database that behaves like
# production.
# shellcheck disable=SC2034 # used by docker/mariadb/entrypoint.sh
STACK_MYSQL_FLAGS=(--max-connections=2000 --skip-name-resolve --innodb-buffer-pool-size=128M)

# mysql_install RUN [OSUSER]: makes the system tables in RUN/mysql/data unless they are
# there. The server will run as OSUSER (default root); root logs in over the socket
# with no password, as mysql_cli expects. The bootstrap's temporary tables go to
# RUN/mysql/tmp: in a shared /tmp they have been seen to vanish under it ("Error on
# delete of '/tmp/#sql-temptable-...'").
mysql_install() {
  local run=$1 user=${2:-root} d
  d=$run/mysql
  mkdir -p "$d/tmp"
  [[ -d $d/data/mysql ]] && return 0
  mariadb-install-db --no-defaults --user="$user" --datadir="$d/data" --tmpdir="$d/tmp" \
    --auth-root-authentication-method=normal --skip-test-db >"$d/install.log" 2>&1 || {
    stack_log "mysql: install-db failed, see $d/install.log"
    return 1
  }
}

# mysql_create_db RUN DB USER PASS [HOST...]: (re)creates DB with the schema and seed,
# and the service user (mysql_grant_service_user, HOSTs passed on).
mysql_create_db() {
  local run=$1 db=$2 user=$3 pass=$4
  mysql_cli "$run" <<SQL || return 1
DROP DATABASE IF EXISTS \`$db\`;
CREATE DATABASE \`$db\` CHARACTER SET utf8mb4;
SQL
  mysql_cli "$run" "$db" <"$STACK_SRC/sql/schema.sql" || return 1
  mysql_cli "$run" "$db" <"$STACK_SRC/sql/seed.sql" || return 1
  mysql_grant_service_user "$@"
}

# mysql_grant_service_user RUN DB USER PASS [HOST...]: makes sure USER exists with
# password PASS and can do only what a deduction needs: read and update product, read
# and add orders (and oversold promises: the order writer of mode redis-stock), and take and give back a lock row in stock_lock (the db-lock mode:
# INSERT, and DELETE with a WHERE on the row, which needs SELECT). USER may connect from
# each HOST: by default 127.0.0.1 and localhost (the native stack); the containers give
# '%' (stockd connects from its own container).
mysql_grant_service_user() {
  local run=$1 db=$2 user=$3 pass host
  pass=$(mysql_quote "$4")
  shift 4
  (($#)) || set -- 127.0.0.1 localhost
  for host; do
    mysql_cli "$run" <<SQL || return 1
CREATE USER IF NOT EXISTS '$user'@'$host' IDENTIFIED BY '$pass';
ALTER USER '$user'@'$host' IDENTIFIED BY '$pass';
GRANT SELECT, UPDATE ON \`$db\`.product TO '$user'@'$host';
GRANT SELECT, UPDATE ON \`$db\`.product_segment TO '$user'@'$host';
GRANT SELECT ON \`$db\`.product_stock TO '$user'@'$host';
GRANT SELECT, INSERT ON \`$db\`.orders TO '$user'@'$host';
GRANT SELECT, INSERT ON \`$db\`.oversold_promise TO '$user'@'$host';
GRANT SELECT, INSERT, DELETE, UPDATE (expires_at) ON \`$db\`.stock_lock TO '$user'@'$host';
SQL
  done
}

# mysql_quote STRING: STRING for the inside of a '...' SQL literal (backslashes and
# quotes escaped), so a password chosen by a user cannot end the literal.
mysql_quote() {
  local s=${1//\\/\\\\}
  printf '%s' "${s//\'/\\\'}"
}

# ---------------------------------------------------------------- ZooKeeper

zk_classpath() {
  printf '%s' "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/*"
}

# zk_serving PORT: true when the server serves requests (`ruok` answers imok earlier
# than that, so ask `srvr` for its mode: standalone, leader or follower).
zk_serving() {
  local out
  out=$(zk_4lw "$1" srvr) && [[ $out == *"Mode: "* ]]
}

# zk_4lw PORT WORD: prints the server's answer to a four-letter word.
zk_4lw() {
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf '%s' "$2" >&3
  timeout 5 cat <&3
  exec 3<&-
}

# zk_write_cfg DIR PORT [ADDRESS]: the zoo.cfg every server of ours uses, listening on
# ADDRESS (default 127.0.0.1; the container gives 0.0.0.0). tickTime 500 and a 1 s
# minimum session let tests expire sessions in about 2 s. (The container check
# interval is a JVM property, set by zk_exec: ZooKeeper ignores it here.)
zk_write_cfg() {
  cat >"$1/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$1/data
clientPort=$2
clientPortAddress=${3:-127.0.0.1}
admin.enableServer=false
4lw.commands.whitelist=*
minSessionTimeout=1000
maxSessionTimeout=60000
maxClientCnxns=0
CFG
}

# zk_log4j DIR [console]: the server's logging, WARN and up, into DIR/zk.log (or to
# stdout with `console`, for a container).
zk_log4j() {
  local appender='org.apache.log4j.FileAppender
log4j.appender.F.File=${zookeeper.log.dir}/zk.log'
  [[ ${2:-} == console ]] && appender=org.apache.log4j.ConsoleAppender
  cat >"$1/log4j.properties" <<L4J
log4j.rootLogger=WARN, F
log4j.appender.F=$appender
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=%d %p [%t] %c{1}: %m%n
L4J
}

# zk_exec DIR: replaces the shell with the server for DIR/zoo.cfg (the container's
# entrypoint runs it as its main process; lab/servers.py starts the native one).
zk_exec() {
  local d=$1
  exec java -Xmx256m -XX:+UseSerialGC -cp "$(zk_classpath)" \
    -Dzookeeper.log.dir="$d" -Dlog4j.configuration="file:$d/log4j.properties" \
    -Dzookeeper.jmx.log4j.disable=true \
    -Dznode.container.checkIntervalMs=1000 \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg"
}

# zk_ensemble_cfg DIR N SERVER...: makes the server of DIR (its zoo.cfg written by
# zk_write_cfg) member N of an ensemble: N in DIR/data/myid, and one server.I line per
# SERVER (HOST:QUORUM_PORT:ELECTION_PORT, the I-th is server I) appended to the
# zoo.cfg. Every member must be given the same list: the ZooKeeper containers zk1..zk3
# of docker-compose.yml, and the native ensemble (lab/servers.py's zk_ensemble_start).
zk_ensemble_cfg() {
  local d=$1 n=$2 i=0 s
  shift 2
  if ! [[ $n =~ ^[1-9][0-9]*$ ]] || ((n > $#)); then
    stack_log "zk: member number '$n' is not one of 1..$#"
    return 1
  fi
  echo "$n" >"$d/data/myid"
  for s in "$@"; do
    i=$((i + 1))
    echo "server.$i=$s" >>"$d/zoo.cfg"
  done
}

# ---------------------------------------------------------------- Redis

# The server settings of every Redis of ours: the native stack's (redis_start) and the
# container's (docker/redis). No persistence (no RDB snapshots, no append-only file):
# the lock keys are leases that may as well vanish with the server, and the fencing
# counter survives a restart through its clock floor (see lock/redislock.h). Where it
# listens and whether protected mode is on is each caller's.
# shellcheck disable=SC2034 # used by docker/redis/entrypoint.sh
STACK_REDIS_FLAGS=(--save '' --appendonly no --daemonize no)

# Redis credentials. With STACK_REDIS_PASSWORD set (in the environment, never argv),
# redis_start turns the default user off and makes one ACL user, STACK_REDIS_USER
# (stockd), that may run only what lock/redislock.c sends: EVALSHA and SCRIPT LOAD of
# its two scripts, the commands those scripts call (EXISTS PTTL TIME INCR SET GET DEL
# PUBLISH), SUBSCRIBE/UNSUBSCRIBE for waiting and PING for /health, on the keys lock:*
# and the channels lock:#released:* only; and for mode redis-stock, on the keys stockd:*,
# what db/stockredis.c's script and the stock watch send (DECR XADD, XGROUP CREATE,
# XINFO, WAIT) and what the order writer (writer/) reads and acknowledges the stream with
# (XREADGROUP XACK XAUTOCLAIM XPENDING XRANGE XLEN, SCAN for --reconcile). So a client
# without the password can do nothing, and one with it cannot FLUSHALL, CONFIG SET or
# touch other keys. The password reaches the server as its SHA-256 in a 0600 file, not
# in argv; protected mode stays on (the default user is off, so it never refuses our
# user).
STACK_REDIS_USER=${STACK_REDIS_USER:-stockd}
STACK_REDIS_ACL=(-@all +evalsha "+script|load" +exists +pttl +time +incr +set +get +del +publish
  +subscribe +unsubscribe +ping +decr +xadd "+xgroup|create" "+xinfo|groups" +wait
  "+xinfo|consumers" +xreadgroup +xack +xautoclaim +xpending +xrange +xlen +scan)

# With a Sentinel (scripts/stack up --redis-sentinel, STACK_REDIS_REPLICATION=1), two more
# users with the same password: `replica`, which a replica logs in as to replicate
# (masteruser), and `sentinel`, with the commands Redis's documentation lists for
# Sentinel (INFO, ROLE, REPLICAOF, CONFIG REWRITE, its hello channel, ...). Neither may
# touch a key.
STACK_REDIS_REPLICA_ACL=(+psync +replconf +ping)
STACK_REDIS_SENTINEL_ACL=(allchannels +multi +exec +slaveof +replicaof +ping +subscribe
  "+config|rewrite" +role +publish +info "+client|setname" "+client|kill" "+script|kill")

# redis_auth_conf DIR [MASTER_PORT]: writes DIR/auth.conf for STACK_REDIS_PASSWORD and
# prints its path, or prints nothing when there is no password. With MASTER_PORT, the
# server is a replica that logs in to 127.0.0.1:MASTER_PORT as user `replica`.
redis_auth_conf() {
  local d=$1 master=${2:-} hash
  [[ -n ${STACK_REDIS_PASSWORD:-} ]] || return 0
  hash=$(printf '%s' "$STACK_REDIS_PASSWORD" | sha256sum | cut -d' ' -f1)
  (
    umask 077
    printf 'user default off\nuser %s reset on #%s ~lock:* ~stockd:* resetchannels &lock:#released:* %s\n' \
      "$STACK_REDIS_USER" "$hash" "${STACK_REDIS_ACL[*]}" >"$d/auth.conf"
    if [[ ${STACK_REDIS_REPLICATION:-0} == 1 ]]; then
      printf 'user replica reset on #%s resetchannels -@all %s\n' "$hash" \
        "${STACK_REDIS_REPLICA_ACL[*]}" >>"$d/auth.conf"
      printf 'user sentinel reset on #%s -@all %s\n' "$hash" "${STACK_REDIS_SENTINEL_ACL[*]}" \
        >>"$d/auth.conf"
    fi
    # A replica's password to its primary: in this 0600 file, never in argv.
    [[ -z $master ]] || printf 'masteruser replica\nmasterauth "%s"\n' "$STACK_REDIS_PASSWORD" \
      >>"$d/auth.conf"
  )
  printf '%s' "$d/auth.conf"
}

# redis_ping PORT: true if the server on PORT answers PONG (as STACK_REDIS_USER when
# STACK_REDIS_PASSWORD is set; redis-cli reads the password from REDISCLI_AUTH).
redis_ping() {
  if [[ -n ${STACK_REDIS_PASSWORD:-} ]]; then
    [[ $(REDISCLI_AUTH=$STACK_REDIS_PASSWORD redis-cli -h 127.0.0.1 -p "$1" \
      --user "$STACK_REDIS_USER" ping 2>/dev/null) == PONG ]]
  else
    [[ $(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null) == PONG ]]
  fi
}

# ---------------------------------------------------------------- stockd

# stockd_bin: the built binary (STOCKD_BIN, else build/service/stockd).
stockd_bin() {
  printf '%s' "${STOCKD_BIN:-$STACK_SRC/build/service/stockd}"
}

# stockd_start RUN INDEX PORT LOCK MYSQL_URL ZK [EXTRA ARGS...]: one instance.
# The password comes from STOCKD_MYSQL_PASSWORD in the environment, never argv.
stockd_start() {
  local run=$1 i=$2 port=$3 lock=$4 url=$5 zk=$6 d
  shift 6
  d=$run/stockd
  mkdir -p "$d"
  stop_pidfile "$d/$i.pid" 10
  port_free "$port" || { stack_log "stockd: port $port is taken"; return 1; }
  "$(stockd_bin)" --port "$port" --lock "$lock" --mysql "$url" --zk "$zk" \
    --instance "stockd-$i" "$@" >"$d/$i.log" 2>&1 &
  echo $! >"$d/$i.pid"
  # Ready when it answers HTTP at all: /health may well say 503 while MySQL is down,
  # and that instance is still up and answering.
  local deadline=$((SECONDS + 20))
  until http_answers "http://127.0.0.1:$port/health"; do
    if ! pid_alive "$d/$i.pid" || ((SECONDS >= deadline)); then
      stack_log "stockd-$i: no answer on port $port, see $d/$i.log:"
      tail -n 5 "$d/$i.log" >&2
      return 1
    fi
    sleep 0.1
  done
}

# http_answers URL: true if URL gives any HTTP answer.
http_answers() {
  local code
  code=$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$1") && [[ $code != 000 ]]
}

stockd_stop() { stop_pidfile "$1/stockd/$2.pid" 20; }
