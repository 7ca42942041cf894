# shellcheck shell=bash
# Functions that start and stop the real parts of the stack on loopback: a private
# MariaDB, a standalone ZooKeeper, a Redis, an etcd, N stockd instances, nginx and
# Prometheus. Sourced by
# scripts/stack, the demo, the load scripts and the integration tests.
#
# Everything lives under one run directory ($1 of each function, or $STACK_RUN) and
# listens on ports given by the caller, never the system defaults. Each server writes
# its pid file there; stopping reads it back. Functions return non-zero on failure
# and print why on stderr.

STACK_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STACK_SRC=$(cd "$STACK_LIB_DIR/.." && pwd)

stack_log() { printf '%s\n' "$*" >&2; }

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
    if ! wait_until "$secs" eval "! pid_runs $pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      wait_until 5 eval "! pid_runs $pid" || true
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
STACK_MYSQL_FLAGS=(--max-connections=2000 --skip-name-resolve --innodb-buffer-pool-size=128M)

# mysql_install RUN [OSUSER]: makes the system tables in RUN/mysql/data unless they are
# there. The server will run as OSUSER (default root); root logs in over the socket
# with no password, as mysql_cli expects.
mysql_install() {
  local run=$1 user=${2:-root} d
  d=$run/mysql
  mkdir -p "$d"
  [[ -d $d/data/mysql ]] && return 0
  mariadb-install-db --no-defaults --user="$user" --datadir="$d/data" \
    --auth-root-authentication-method=normal --skip-test-db >"$d/install.log" 2>&1 || {
    stack_log "mysql: install-db failed, see $d/install.log"
    return 1
  }
}

# mysql_start RUN PORT: initialise (first time) and start a private MariaDB.
mysql_start() {
  local run=$1 port=$2 d
  d=$run/mysql
  mkdir -p "$d"
  if pid_alive "$d/pid"; then return 0; fi
  mysql_install "$run" || return 1
  port_free "$port" || { stack_log "mysql: port $port is taken"; return 1; }
  mariadbd --no-defaults --user=root --datadir="$d/data" --socket="$d/sock" \
    --port="$port" --bind-address=127.0.0.1 --pid-file="$d/pid" "${STACK_MYSQL_FLAGS[@]}" \
    --log-error="$d/error.log" >/dev/null 2>&1 &
  if ! wait_until 60 mysql_cli "$run" -e 'select 1'; then
    stack_log "mysql: did not start on port $port, see $d/error.log"
    return 1
  fi
}

mysql_stop() { stop_pidfile "$1/mysql/pid" 60; }

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
# and add orders, and take and give back a lock row in stock_lock (the db-lock mode:
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

# mysql_set_stock RUN DB ID STOCK [SEGMENTS]: resets one product's stock and fence and
# clears its orders. With SEGMENTS K > 1 the stock is split evenly over segments 1..K of
# product_segment (the first STOCK mod K get one more) and product.stock is 0, as
# `stockd --segments K` expects; with K = 1 (the default) the product has no segments.
mysql_set_stock() {
  local k=${5:-1} rows='' s
  [[ $k =~ ^[1-9][0-9]*$ ]] || { echo "mysql_set_stock: bad segment count '$k'" >&2; return 2; }
  if ((k == 1)); then
    mysql_cli "$1" "$2" -e "DELETE FROM orders WHERE product_id=$3;
      DELETE FROM product_segment WHERE product_id=$3;
      UPDATE product SET stock=$4, fence=0 WHERE id=$3;"
    return
  fi
  for ((s = 1; s <= k; s++)); do
    rows+="${rows:+,}($3, $s, $(($4 / k + (s <= $4 % k ? 1 : 0))), 0)"
  done
  mysql_cli "$1" "$2" -e "START TRANSACTION;
    DELETE FROM orders WHERE product_id=$3;
    DELETE FROM product_segment WHERE product_id=$3;
    UPDATE product SET stock=0, fence=0 WHERE id=$3;
    INSERT INTO product_segment (product_id, seg, stock, fence) VALUES $rows;
    COMMIT;"
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

# zk_start RUN PORT [NAME]: a standalone ZooKeeper under RUN/NAME (default zk).
zk_start() {
  local run=$1 port=$2 name=${3:-zk} d
  d=$run/$name
  mkdir -p "$d/data"
  if pid_alive "$d/pid"; then return 0; fi
  port_free "$port" || { stack_log "zk: port $port is taken"; return 1; }
  zk_write_cfg "$d" "$port"
  zk_launch "$d"
  if ! wait_until 60 zk_serving "$port"; then
    stack_log "zk: did not start on port $port, see $d/zk.log"
    return 1
  fi
}

# zk_launch DIR: starts the JVM for DIR/zoo.cfg in the background, pid in DIR/pid.
zk_launch() {
  local d=$1
  zk_log4j "$d"
  zk_exec "$d" >"$d/stdout.log" 2>&1 &
  echo $! >"$d/pid"
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

# zk_exec DIR: replaces the shell with the server for DIR/zoo.cfg (zk_launch runs it
# in the background; the container's entrypoint runs it as its main process).
zk_exec() {
  local d=$1
  exec java -Xmx256m -XX:+UseSerialGC -cp "$(zk_classpath)" \
    -Dzookeeper.log.dir="$d" -Dlog4j.configuration="file:$d/log4j.properties" \
    -Dzookeeper.jmx.log4j.disable=true \
    -Dznode.container.checkIntervalMs=1000 \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg"
}

zk_stop() { stop_pidfile "$1/${2:-zk}/pid" 20; }

# ---------------------------------------------------------------- ZooKeeper ensemble

# A three-server ensemble on loopback, for the fault tests and `scripts/stack up
# --zk-ensemble`. Server N (1..3) lives in RUN/zkN (so a test's cleanup, which stops
# RUN/*/pid, stops it too) and uses the ports
#   client BASE+N-1, quorum BASE+N+2, leader election BASE+N+5
# (nine ports from BASE). It forms a quorum in 2 to 8 s on this machine.

# zk_ensemble_cfg DIR N SERVER...: makes the server of DIR (its zoo.cfg written by
# zk_write_cfg) member N of an ensemble: N in DIR/data/myid, and one server.I line per
# SERVER (HOST:QUORUM_PORT:ELECTION_PORT, the I-th is server I) appended to the
# zoo.cfg. Every member must be given the same list. Used by zk_ensemble_start_one
# and by the ZooKeeper container (docker/zookeeper/entrypoint.sh), whose members are
# zk1..zk3 of docker-compose.yml.
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

# zk_ensemble_hosts BASE: the connection string, "127.0.0.1:BASE,...:BASE+2".
zk_ensemble_hosts() {
  local b=$1
  printf '127.0.0.1:%s,127.0.0.1:%s,127.0.0.1:%s' "$b" $((b + 1)) $((b + 2))
}

# zk_ensemble_start RUN BASE: writes the three configs (first time) and starts every
# server not running; returns once each one serves as leader or follower.
zk_ensemble_start() {
  local run=$1 b=$2 n
  for n in 1 2 3; do zk_ensemble_start_one "$run" "$b" "$n" nowait || return 1; done
  for n in 1 2 3; do
    if ! wait_until 60 zk_serving $((b + n - 1)); then
      stack_log "zk ensemble: server $n did not join a quorum, see $run/zk$n/zk.log"
      return 1
    fi
  done
}

# zk_ensemble_start_one RUN BASE N [nowait]: starts server N (again) and, unless told
# not to, waits until it serves (which needs a quorum: another server must be up).
zk_ensemble_start_one() {
  local run=$1 b=$2 n=$3 wait=${4:-wait} d i members=()
  d=$run/zk$n
  mkdir -p "$d/data"
  if ! pid_alive "$d/pid"; then
    port_free $((b + n - 1)) || { stack_log "zk$n: port $((b + n - 1)) is taken"; return 1; }
    zk_write_cfg "$d" $((b + n - 1))
    for i in 1 2 3; do members+=("127.0.0.1:$((b + i + 2)):$((b + i + 5))"); done
    zk_ensemble_cfg "$d" "$n" "${members[@]}" || return 1
    zk_launch "$d"
  fi
  [[ $wait == nowait ]] && return 0
  wait_until 60 zk_serving $((b + n - 1)) ||
    { stack_log "zk$n: did not serve, see $d/zk.log"; return 1; }
}

# zk_ensemble_stop RUN: stops the three servers.
zk_ensemble_stop() {
  local n
  for n in 1 2 3; do zk_stop "$1" "zk$n"; done
}

# zk_ensemble_mode BASE N: prints server N's mode (leader, follower; nothing if down).
zk_ensemble_mode() {
  zk_4lw $(($1 + $2 - 1)) srvr 2>/dev/null | sed -n 's/^Mode: //p'
}

# zk_leader BASE: prints the number (1..3) of the current leader; fails if none leads.
zk_leader() {
  local n
  for n in 1 2 3; do
    [[ $(zk_ensemble_mode "$1" "$n") == leader ]] && { echo "$n"; return 0; }
  done
  return 1
}

# ---------------------------------------------------------------- Redis

# The server settings of every Redis of ours: the native stack's (redis_start) and the
# container's (docker/redis). No persistence (no RDB snapshots, no append-only file):
# the lock keys are leases that may as well vanish with the server, and the fencing
# counter survives a restart through its clock floor (see lock/redislock.h). Where it
# listens and whether protected mode is on is each caller's.
STACK_REDIS_FLAGS=(--save '' --appendonly no --daemonize no)

# Redis credentials. With STACK_REDIS_PASSWORD set (in the environment, never argv),
# redis_start turns the default user off and makes one ACL user, STACK_REDIS_USER
# (stockd), that may run only what lock/redislock.c sends: EVALSHA and SCRIPT LOAD of
# its two scripts, the commands those scripts call (EXISTS PTTL TIME INCR SET GET DEL
# PUBLISH), SUBSCRIBE/UNSUBSCRIBE for waiting and PING for /health, on the keys lock:*
# and the channels lock:#released:* only. So a client without the password can do
# nothing, and one with it cannot FLUSHALL, CONFIG SET or touch other keys. The
# password reaches the server as its SHA-256 in a 0600 file, not in argv; protected
# mode stays on (the default user is off, so it never refuses our user).
STACK_REDIS_USER=${STACK_REDIS_USER:-stockd}
STACK_REDIS_ACL=(-@all +evalsha "+script|load" +exists +pttl +time +incr +set +get +del +publish
  +subscribe +unsubscribe +ping)

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
    printf 'user default off\nuser %s reset on #%s ~lock:* resetchannels &lock:#released:* %s\n' \
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

# redis_start RUN PORT [NAME [MASTER_PORT]]: a private redis-server under RUN/NAME
# (default redis), on loopback only, protected mode on, with STACK_REDIS_FLAGS (and the
# ACL above when STACK_REDIS_PASSWORD is set); with MASTER_PORT a replica of the Redis
# on 127.0.0.1:MASTER_PORT.
redis_start() {
  local run=$1 port=$2 name=${3:-redis} master=${4:-} d conf
  d=$run/$name
  mkdir -p "$d"
  if pid_alive "$d/pid"; then return 0; fi
  port_free "$port" || { stack_log "redis: port $port is taken"; return 1; }
  conf=$(redis_auth_conf "$d" "$master")
  redis-server ${conf:+"$conf"} --port "$port" --bind 127.0.0.1 --protected-mode yes \
    "${STACK_REDIS_FLAGS[@]}" ${master:+--replicaof 127.0.0.1 "$master"} --dir "$d" \
    --logfile "$d/redis.log" >/dev/null 2>&1 &
  echo $! >"$d/pid"
  if ! wait_until 20 redis_ping "$port"; then
    stack_log "redis: did not start on port $port, see $d/redis.log"
    return 1
  fi
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

# redis_stop RUN [NAME]
redis_stop() { stop_pidfile "$1/${2:-redis}/pid" 10; }

# sentinel_start RUN PORT MASTER_PORT [NAME]: a redis-sentinel under RUN/NAME (default
# sentinel) on 127.0.0.1:PORT that watches the primary on 127.0.0.1:MASTER_PORT as master
# `stockd`, alone (quorum 1): it calls the primary down after 1 s without an answer and
# promotes a replica. failover-timeout is 60 s, so it leaves a replica that replicates
# from elsewhere alone for that long (the failover test cuts a replica's link on purpose).
# With STACK_REDIS_PASSWORD it logs in to the servers as user `sentinel` (its 0600 config
# file holds the password, as Sentinel wants it).
sentinel_start() {
  local run=$1 port=$2 master=$3 name=${4:-sentinel} d
  d=$run/$name
  mkdir -p "$d"
  if pid_alive "$d/pid"; then return 0; fi
  port_free "$port" || { stack_log "sentinel: port $port is taken"; return 1; }
  (
    umask 077
    {
      printf 'port %s\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\n' "$port" "$d"
      printf 'logfile %s/sentinel.log\n' "$d"
      printf 'sentinel monitor stockd 127.0.0.1 %s 1\n' "$master"
      printf 'sentinel down-after-milliseconds stockd 1000\n'
      printf 'sentinel failover-timeout stockd 60000\n'
      if [[ -n ${STACK_REDIS_PASSWORD:-} ]]; then
        printf 'sentinel auth-user stockd sentinel\nsentinel auth-pass stockd "%s"\n' \
          "$STACK_REDIS_PASSWORD"
      fi
    } >"$d/sentinel.conf"
  )
  redis-sentinel "$d/sentinel.conf" >/dev/null 2>&1 &
  echo $! >"$d/pid"
  if ! wait_until 20 sentinel_primary "$port"; then
    stack_log "sentinel: did not start on port $port, see $d/sentinel.log"
    return 1
  fi
}

# ---------------------------------------------------------------- etcd

# Debian's etcd 3.4 (etcd-server), one member, for --lock etcd: the stand-in for Consul
# (article 001 §5), which Debian 12 does not package. Its data lives in RUN/etcd/data
# with etcd's safe defaults (every write fsynced before it is answered), so the fencing
# token (a key's create revision) keeps growing across restarts. Client and peer URLs
# are on loopback only and without authentication: nothing but the lock keys is kept.

# etcd_start RUN PORT: a one-member etcd under RUN/etcd, clients on 127.0.0.1:PORT, its
# peer URL on 127.0.0.1:PORT-1; returns once /health says true.
etcd_start() {
  local run=$1 port=$2 d peer
  d=$run/etcd
  peer=$((port - 1))
  mkdir -p "$d"
  if pid_alive "$d/pid"; then return 0; fi
  port_free "$port" || { stack_log "etcd: port $port is taken"; return 1; }
  port_free "$peer" || { stack_log "etcd: peer port $peer is taken"; return 1; }
  etcd --name s1 --data-dir "$d/data" \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "s1=http://127.0.0.1:$peer" --initial-cluster-state new \
    >"$d/etcd.log" 2>&1 &
  echo $! >"$d/pid"
  if ! wait_until 30 etcd_healthy "$port"; then
    stack_log "etcd: not healthy on port $port, see $d/etcd.log"
    return 1
  fi
}

# sentinel_primary PORT: prints HOST:PORT of the primary the Sentinel on PORT names for
# master `stockd` (SENTINEL get-master-addr-by-name); fails if it names none.
sentinel_primary() {
  local a
  mapfile -t a < <(redis-cli -p "$1" --raw SENTINEL get-master-addr-by-name stockd 2>/dev/null)
  ((${#a[@]} == 2)) && [[ ${a[1]} =~ ^[0-9]+$ ]] || return 1
  printf '%s:%s\n' "${a[0]}" "${a[1]}"
}

sentinel_stop() { stop_pidfile "$1/${2:-sentinel}/pid" 10; }

# etcd_healthy PORT: true when the member on PORT has a leader and answers.
etcd_healthy() {
  [[ $(curl -s -m 3 "http://127.0.0.1:$1/health" 2>/dev/null) == *'"health":"true"'* ]]
}

# etcd_stop RUN
etcd_stop() { stop_pidfile "$1/etcd/pid" 20; }

# A three-member etcd cluster on loopback, for the fault tests. Member N (1..3) lives in
# RUN/etcdN and uses the ports client BASE+N-1 and peer BASE+N+2 (six ports from BASE).

# etcd_cluster_hosts BASE: the member list, "127.0.0.1:BASE,...:BASE+2" (for --etcd).
etcd_cluster_hosts() {
  printf '127.0.0.1:%s,127.0.0.1:%s,127.0.0.1:%s' "$1" $(($1 + 1)) $(($1 + 2))
}

# etcd_cluster_start RUN BASE: starts the three members (the first time, as a new
# cluster) and returns once each one reports a leader.
etcd_cluster_start() {
  local run=$1 b=$2 n d cluster='' state=new
  for n in 1 2 3; do cluster+="${cluster:+,}e$n=http://127.0.0.1:$((b + n + 2))"; done
  for n in 1 2 3; do
    d=$run/etcd$n
    mkdir -p "$d"
    pid_alive "$d/pid" && continue
    [[ -d $d/data ]] && state=existing
    port_free $((b + n - 1)) || { stack_log "etcd$n: port $((b + n - 1)) is taken"; return 1; }
    etcd --name "e$n" --data-dir "$d/data" \
      --listen-client-urls "http://127.0.0.1:$((b + n - 1))" \
      --advertise-client-urls "http://127.0.0.1:$((b + n - 1))" \
      --listen-peer-urls "http://127.0.0.1:$((b + n + 2))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((b + n + 2))" \
      --initial-cluster "$cluster" --initial-cluster-state "$state" >"$d/etcd.log" 2>&1 &
    echo $! >"$d/pid"
  done
  for n in 1 2 3; do
    wait_until 60 etcd_healthy $((b + n - 1)) ||
      { stack_log "etcd$n: not healthy, see $run/etcd$n/etcd.log"; return 1; }
  done
}

# etcd_cluster_leader BASE: prints the number (1..3) of the member that leads; fails if
# none answers as the leader.
etcd_cluster_leader() {
  local n out
  for n in 1 2 3; do
    out=$(curl -s -m 3 -X POST -d '{}' "http://127.0.0.1:$(($1 + n - 1))/v3/maintenance/status") ||
      continue
    [[ -n $out && $(jq -r '.leader // empty' <<<"$out") == "$(jq -r '.header.member_id // "x"' <<<"$out")" ]] &&
      { echo "$n"; return 0; }
  done
  return 1
}

# etcd_cluster_stop RUN
etcd_cluster_stop() {
  local n
  for n in 1 2 3; do stop_pidfile "$1/etcd$n/pid" 20; done
}

# ---------------------------------------------------------------- Prometheus

# Debian's Prometheus, scraping every stockd of the stack with the rules of
# monitoring/stockd-rules.yml. Its targets are a file (file_sd) that Prometheus watches,
# so a new instance list (restart-stockd) needs no restart. The data (a TSDB) lives in
# RUN/prometheus/data and is kept 2 days.

# STACK_PROMETHEUS_INTERVAL: scrape and evaluation interval (default 5s; the tests give 1s).

# prometheus_write_cfg DIR PORT: DIR/prometheus.yml, scraping the targets of
# DIR/targets.json (prometheus_targets).
prometheus_write_cfg() {
  local d=$1 interval=${STACK_PROMETHEUS_INTERVAL:-5s}
  cat >"$d/prometheus.yml.tmp" <<CFG
# Written by scripts/stack-lib.sh (prometheus_write_cfg); rewritten on every start.
global:
  scrape_interval: $interval
  scrape_timeout: $interval
  evaluation_interval: $interval
rule_files:
  - $STACK_SRC/monitoring/stockd-rules.yml
scrape_configs:
  - job_name: stockd
    file_sd_configs:
      - files: ['$d/targets.json']
CFG
  mv "$d/prometheus.yml.tmp" "$d/prometheus.yml"
}

# prometheus_targets RUN STOCKD_PORT...: points Prometheus at these stockd instances
# (written whole and renamed into place: Prometheus never reads half a file).
prometheus_targets() {
  local d=$1/prometheus p list=""
  shift
  mkdir -p "$d"
  for p in "$@"; do list+="${list:+, }\"127.0.0.1:$p\""; done
  printf '[{"targets": [%s], "labels": {}}]\n' "$list" >"$d/targets.json.tmp"
  mv "$d/targets.json.tmp" "$d/targets.json"
}

# prometheus_start RUN PORT: starts Prometheus on 127.0.0.1:PORT (the targets file must
# exist, or it scrapes nothing until it does); returns once it is ready.
prometheus_start() {
  local run=$1 port=$2 d
  d=$run/prometheus
  mkdir -p "$d/data"
  [[ -e $d/targets.json ]] || printf '[]\n' >"$d/targets.json"
  prometheus_write_cfg "$d"
  if pid_alive "$d/pid"; then
    kill -HUP "$(cat "$d/pid")" # the configuration may have changed: reload it
    return 0
  fi
  port_free "$port" || { stack_log "prometheus: port $port is taken"; return 1; }
  prometheus --config.file="$d/prometheus.yml" --storage.tsdb.path="$d/data" \
    --storage.tsdb.retention.time=2d --web.listen-address="127.0.0.1:$port" \
    --web.console.templates=/etc/prometheus/consoles \
    --web.console.libraries=/etc/prometheus/console_libraries \
    >"$d/prometheus.log" 2>&1 &
  echo $! >"$d/pid"
  if ! wait_until 30 prometheus_ready "$port"; then
    stack_log "prometheus: not ready on port $port, see $d/prometheus.log"
    return 1
  fi
}

# prometheus_ready PORT: true once Prometheus serves queries.
prometheus_ready() {
  curl -fsS -m 5 -o /dev/null "http://127.0.0.1:$1/-/ready" 2>/dev/null
}

prometheus_stop() { stop_pidfile "$1/prometheus/pid" 20; }

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

stockd_stop_all() {
  local f
  for f in "$1"/stockd/*.pid; do
    [[ -e $f ]] && stop_pidfile "$f" 20
  done
  return 0
}

# ---------------------------------------------------------------- nginx

# How nginx routes and limits, for nginx_start (and so for every caller: scripts/stack,
# the tests' t_nginx, loadtest/report): STACK_NGINX_ROUTE is round-robin (the default,
# the seed's experiment) or affinity (`hash $arg_id consistent`: every deduction of one
# product goes to one instance while it is up); STACK_NGINX_RATE_LIMIT is empty (no
# limit) or RATE[:BURST] for a limit_req zone keyed by the product id (RATE in requests
# per second, or N r/s, N r/m as nginx writes it; BURST requests above it are let
# through at once, the rest get 429 JSON). nginx_route_check / nginx_rate_limit_check
# say whether a value is one (for the scripts' option parsing).
nginx_route_check() { [[ $1 == round-robin || $1 == affinity ]]; }
nginx_rate_limit_check() { [[ $1 =~ ^[1-9][0-9]{0,6}(r/s|r/m)?(:[0-9]{1,7})?$ ]]; }

# nginx_start RUN PORT UPSTREAM_PORT...: nginx over the given stockd ports, routed and
# limited as STACK_NGINX_ROUTE and STACK_NGINX_RATE_LIMIT say (see above), rendered
# from nginx/nginx.conf.in by the lab library (lab/nginx.py), as scripts/stack does. A
# running nginx of RUN is reloaded with the new configuration.
nginx_start() {
  local run=$1 port=$2 d p up=()
  shift 2
  d=$run/nginx
  mkdir -p "$d/logs" "$d/tmp"
  for p in "$@"; do up+=(--upstream "127.0.0.1:$p"); done
  (cd "$STACK_SRC" && /usr/bin/python3 -m lab.nginx native --prefix "$d" --port "$port" "${up[@]}" \
    --route "${STACK_NGINX_ROUTE:-round-robin}" --rate-limit "${STACK_NGINX_RATE_LIMIT:-}" \
    --out "$d/nginx.conf") || return 1
  if pid_alive "$d/nginx.pid"; then
    nginx_reload "$d"
    return
  fi
  nginx -p "$d" -c "$d/nginx.conf" -e "$d/logs/error.log" || return 1
  wait_until 10 curl -fsS "http://127.0.0.1:$port/nginx-health"
}

# nginx_reload DIR: reloads the configuration and returns once it is in force. A
# reload is asynchronous: until the old workers have finished their requests and
# exited, new requests may still reach them and their old upstream list.
nginx_reload() {
  local d=$1 master old p
  master=$(cat "$d/nginx.pid")
  old=$(pgrep -P "$master" | tr '\n' ' ')
  nginx -p "$d" -c "$d/nginx.conf" -e "$d/logs/error.log" -s reload || return 1
  for p in $old; do
    wait_until 30 eval "! kill -0 $p" || { stack_log "nginx: old worker $p still running"; return 1; }
  done
}

nginx_stop() {
  local d=$1/nginx
  if pid_alive "$d/nginx.pid"; then
    nginx -p "$d" -c "$d/nginx.conf" -e "$d/logs/error.log" -s quit 2>/dev/null || true
    wait_until 10 eval "! pid_alive '$d/nginx.pid'" || stop_pidfile "$d/nginx.pid" 5
  fi
  return 0
}
