# shellcheck shell=bash
# The stack's servers for shell scripts: the integration tests' helpers and the load
# tools source this file. The servers are lab/servers.py's objects; the functions below
# of lab/shell.py's CALLS (mysql_start RUN PORT, zk_ensemble_start RUN FIRST,
# redis_start RUN PORT [NAME [MASTER_PORT]], zk_leader FIRST, mysql_set_stock RUN DB ID
# STOCK [SEGMENTS], ...: that table gives each one's arguments) start, stop and ask
# them, with the same code as scripts/stack. What stays shell is what a test needs as a
# child of its own shell: stockd_start, whose instance the test can wait for, and the
# few process helpers it needs, and the mariadb client (mysql_cli).
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

# One function per entry of lab/shell.py's CALLS, of the same name.
for _f in mysql_start mysql_stop zk_start zk_stop zk_ensemble_start zk_ensemble_start_one \
  zk_ensemble_stop redis_start redis_stop sentinel_start sentinel_stop etcd_start etcd_stop \
  prometheus_start prometheus_stop prometheus_targets stockd_stop_all nginx_start nginx_stop \
  etcd_cluster_start etcd_cluster_stop etcd_cluster_hosts etcd_cluster_leader zk_ensemble_hosts \
  zk_ensemble_mode zk_leader mysql_set_stock galera_start galera_stop; do
  eval "$_f() { stack_lab $_f \"\$@\"; }"
done
unset _f
# mysql_create_db RUN DB USER PASS: DB made again with the schema and the seed, and the
# service user (mysql_grant_service_user RUN DB USER PASS: that user alone); the password
# reaches the library in the environment, never argv.
mysql_create_db() { STACK_LAB_PASSWORD=$4 stack_lab mysql_create_db "$1" "$2" "$3"; }
mysql_grant_service_user() { STACK_LAB_PASSWORD=$4 stack_lab mysql_grant_service_user "$1" "$2" "$3"; }

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

# mysql_cli RUN [ARGS...]: the mariadb client as root over the private socket; under a
# Galera cluster's RUN (galera_start), on the first node that runs, its reads waiting
# for the cluster (mysql_cli_node RUN N: on node N).
mysql_cli() {
  local run=$1 n
  shift
  if [[ -d $run/galera1 ]]; then
    for n in 1 2 3; do
      if pid_alive "$run/galera$n/pid"; then mysql_cli_node "$run" "$n" "$@"; return; fi
    done
  fi
  mariadb --no-defaults -uroot -S "$run/mysql/sock" "$@"
}
mysql_cli_node() {
  local run=$1 n=$2
  shift 2
  mariadb --no-defaults -uroot -S "$run/galera$n/sock" --init-command="SET SESSION wsrep_sync_wait=1" "$@"
}

# ---------------------------------------------------------------- ZooKeeper

zk_classpath() {
  printf '%s' "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/*"
}

# zk_4lw PORT WORD: prints the server's answer to a four-letter word.
zk_4lw() {
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf '%s' "$2" >&3
  timeout 5 cat <&3
  exec 3<&-
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
