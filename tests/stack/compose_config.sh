#!/usr/bin/env bash
# docker-compose.yml, the compose nginx.conf and the Dockerfiles, checked without a
# container engine: Debian's docker-compose resolves the compose file, and the resolved
# config must have the eleven services (zk1..3 a ZooKeeper ensemble that stockd is given
# whole, and Prometheus), each built here from a Dockerfile that starts
# from debian:12 and has a HEALTHCHECK, nginx waiting for healthy stockd instances, no
# host port except nginx's and Prometheus's (loopback only), and the password only from the environment. nginx -t
# checks the compose nginx.conf (rendered from nginx/nginx.conf.in by the image's
# entrypoint) with the service names mapped to loopback.
# tests/stack/containers.sh runs the same files for real. PyYAML comes with
# docker-compose (python3-yaml is its dependency).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../assert.sh"
src=$STOCKD_SRC
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT


command -v docker-compose >/dev/null || fail "docker-compose is not installed (scripts/deps)"
# Debian's python3 (the one docker-compose runs on) has PyYAML; a python3 earlier in
# PATH (pyenv, venv) may not.
py=/usr/bin/python3
"$py" -c 'import yaml' 2>/dev/null || fail "python3-yaml is missing (a docker-compose dependency)"

# Without any one of the passwords the file must not resolve: none has a default.
export STOCKD_MYSQL_PASSWORD=pw-from-env STOCKD_REDIS_PASSWORD=redis-pw-from-env
export STOCKD_ZK_PASSWORD=zk-pw-from-env
for v in STOCKD_MYSQL_PASSWORD STOCKD_REDIS_PASSWORD STOCKD_ZK_PASSWORD; do
  if env -u "$v" docker-compose -f "$src/docker-compose.yml" \
    --project-directory "$src" config >/dev/null 2>"$T/err"; then
    fail "docker-compose config succeeded without $v"
  fi
  grep -q "$v" "$T/err" || fail "unclear error without $v: $(cat "$T/err")"
  echo "ok: the compose file refuses to resolve without $v"
done

STOCKD_LOCK=zk docker-compose -f "$src/docker-compose.yml" \
  --project-directory "$src" config >"$T/config.yml" || fail "docker-compose config failed"
echo "ok: docker-compose config resolves"

"$py" - "$T/config.yml" "$src" <<'PY'
import os, re, sys, yaml

cfg = yaml.safe_load(open(sys.argv[1]))
src = sys.argv[2]
svc = cfg["services"]
errors = []

def check(cond, msg):
    if not cond:
        errors.append(msg)
    else:
        print("ok:", msg)

stockds = ["stockd-1", "stockd-2", "stockd-3"]
zks = ["zk1", "zk2", "zk3"]
check(sorted(svc) == sorted(["mariadb", "redis", "nginx", "prometheus", "writer"] + zks + stockds),
      "eleven services: mariadb, zk1..3, redis, stockd-1..3, nginx, prometheus, writer (got %s)"
      % sorted(svc))

# Every image is built here, from debian:12 only, and carries its health check: the
# compose file has none of its own (podman-compose 1.0.3 mangles the array form).
for name, s in svc.items():
    build = s.get("build") or {}
    check(build.get("context") is not None, "%s is built, not pulled" % name)
    if build.get("context") is None:
        continue
    path = os.path.join(build["context"], build.get("dockerfile") or "Dockerfile")
    text = open(path).read()
    bases = re.findall(r"^FROM\s+(\S+)", text, re.M)
    check(bases and all(b == "debian:12" for b in bases),
          "%s: every stage of %s starts from debian:12 (got %s)"
          % (name, os.path.relpath(path, src), bases))
    last = text[text.rfind("\nFROM "):]
    hc = re.search(r"^HEALTHCHECK\s+.*CMD", last, re.M | re.S)
    check(hc is not None and "NONE" not in hc.group(0),
          "%s: its image has a HEALTHCHECK" % name)
    check(not s.get("healthcheck"), "%s: no compose healthcheck over the image's" % name)

nginx = svc.get("nginx", {})
deps = nginx.get("depends_on", {})
check(isinstance(deps, dict) and all(
    deps.get(n, {}).get("condition") == "service_healthy" for n in stockds),
      "nginx depends on stockd-1..3 being healthy (got %s)" % deps)
for n in stockds:
    d = svc.get(n, {}).get("depends_on", {})
    check(all(d.get(x, {}).get("condition") == "service_healthy"
              for x in ["mariadb", "redis"] + zks),
          "%s waits for healthy mariadb, zk1..3 and redis" % n)

# The ZooKeeper ensemble: one image, each member its own number 1..3 and the same list
# of the three members' quorum and election ports, named by their services.
zk_images = {svc.get(n, {}).get("image") for n in zks}
check(len(zk_images) == 1 and None not in zk_images, "zk1..3 share one image (%s)" % zk_images)
want_servers = ",".join("%s:2888:3888" % n for n in zks)
for i, n in enumerate(zks, 1):
    env = svc.get(n, {}).get("environment") or {}
    check(str(env.get("STOCKD_ZK_MYID")) == str(i) and env.get("STOCKD_ZK_SERVERS") == want_servers,
          "%s is member %d of %s (got %s, %s)"
          % (n, i, want_servers, env.get("STOCKD_ZK_MYID"), env.get("STOCKD_ZK_SERVERS")))
    # Its data on a volume of its own: the fence's ZooKeeper tokens are czxids, which
    # must keep growing across a `down` and `up` (a fresh ensemble starts them again
    # below the fence every product row kept, and every such product is lock_lost).
    vols = [str(v) for v in svc.get(n, {}).get("volumes") or []]
    check(any(v.startswith("%s-data:/var/lib/stockd" % n) for v in vols),
          "%s keeps its data on a volume of its own at /var/lib/stockd (got %s)" % (n, vols))

published = {n: s.get("ports") for n, s in svc.items() if s.get("ports")}
check(sorted(published) == ["nginx", "prometheus"],
      "only nginx and prometheus publish ports (got %s)" % published)
for p in svc.get("prometheus", {}).get("ports", []):
    text = str(p)
    check(text.startswith("127.0.0.1:") and text.split(":")[-1].split("/")[0] == "9090",
          "prometheus publishes its port 9090 on loopback only (%s)" % text)
for p in nginx.get("ports", []):
    text = str(p)
    check(text.startswith("127.0.0.1:") and text.split(":")[-1].split("/")[0] == "80",
          "nginx publishes its port 80 on loopback only (%s)" % text)

# Mode redis-stock's order writer: the stockd image running stock-writer, its secrets from
# the environment, waiting for healthy MariaDB and Redis.
w = svc.get("writer", {})
wenv = w.get("environment") or {}
check(w.get("image") == svc.get("stockd-1", {}).get("image")
      and w.get("entrypoint") in (["stock-writer"], "stock-writer"),
      "writer runs stock-writer from the stockd image (got %s, %s)" % (w.get("image"), w.get("entrypoint")))
check(wenv.get("STOCKD_MYSQL_PASSWORD") == "pw-from-env"
      and wenv.get("STOCKD_REDIS_PASSWORD") == "redis-pw-from-env"
      and wenv.get("STOCKD_REDIS") == "redis:6379",
      "writer: Redis and MariaDB of the services, passwords from the environment")
wd = w.get("depends_on", {})
check(all(wd.get(x, {}).get("condition") == "service_healthy" for x in ["mariadb", "redis"]),
      "writer waits for healthy mariadb and redis")

images = {svc[n].get("image") for n in stockds}
check(len(images) == 1 and None not in images, "stockd-1..3 share one image (%s)" % images)
instances = []
for n in stockds:
    s = svc[n]
    cmd = s.get("command") or []
    env = s.get("environment") or {}
    argv = " ".join(cmd)
    check("pw-from-env" not in argv and "password" not in argv.lower(),
          "%s: no password in the command line" % n)
    check(env.get("STOCKD_MYSQL_PASSWORD") == "pw-from-env",
          "%s: password from the environment" % n)
    check("redis-pw-from-env" not in argv and "zk-pw-from-env" not in argv,
          "%s: no lock service secret in the command line" % n)
    check(env.get("STOCKD_REDIS_USER") == "stockd"
          and env.get("STOCKD_REDIS_PASSWORD") == "redis-pw-from-env",
          "%s: Redis user stockd, its password from the environment" % n)
    check(env.get("STOCKD_ZK_AUTH") == "stockd:zk-pw-from-env",
          "%s: ZooKeeper digest ACL on, its password from the environment" % n)
    check(env.get("STOCKD_LOCK") == "zk", "%s: lock mode from STOCKD_LOCK" % n)
    # Every lock service's address is given, so that any STOCKD_LOCK works.
    check(env.get("STOCKD_ZK") == "zk1:2181,zk2:2181,zk3:2181"
          and env.get("STOCKD_REDIS") == "redis:6379",
          "%s: ZooKeeper (all three members) and Redis addresses are the services' (got %s, %s)"
          % (n, env.get("STOCKD_ZK"), env.get("STOCKD_REDIS")))
    check("ports" not in s, "%s publishes no port" % n)
    check(s.get("build", {}).get("context") is not None, "%s builds from the Dockerfile" % n)
    if "--instance" in cmd:
        instances.append(cmd[cmd.index("--instance") + 1])
check(sorted(instances) == stockds, "distinct --instance names (got %s)" % instances)

redis_env = svc.get("redis", {}).get("environment") or {}
check(redis_env.get("STACK_REDIS_PASSWORD") == "redis-pw-from-env",
      "redis: user stockd's password from the environment (got %s)" % sorted(redis_env))

db = svc.get("mariadb", {})
env = db.get("environment", {})
check(env.get("STOCKD_MYSQL_PASSWORD") == "pw-from-env",
      "mariadb: the service user's password from the environment")
vols = [str(v) for v in db.get("volumes", [])]
check(any(v.endswith(":/var/lib/stockd") or v.endswith(":/var/lib/stockd:rw") for v in vols),
      "mariadb keeps its datadir on a volume at /var/lib/stockd (got %s)" % vols)

if errors:
    for e in errors:
        print("FAIL:", e, file=sys.stderr)
    sys.exit(1)
PY

# Owner routing (docker/route-owner.yml over docker-compose.yml): the file refuses to
# resolve without the peers' secret file; with it every stockd gets --route owner, its
# own service name as the address its peers reach it at, the three as the static list,
# and the secret as a read-only file, never as a value in its environment or argv.
if env -u STOCKD_PEER_SECRET_FILE STOCKD_LOCK=zk docker-compose -f "$src/docker-compose.yml" \
  -f "$src/docker/route-owner.yml" --project-directory "$src" config >/dev/null 2>"$T/err"; then
  fail "docker/route-owner.yml resolved without STOCKD_PEER_SECRET_FILE"
fi
grep -q STOCKD_PEER_SECRET_FILE "$T/err" || fail "unclear error without STOCKD_PEER_SECRET_FILE: $(cat "$T/err")"
echo "ok: docker/route-owner.yml refuses to resolve without STOCKD_PEER_SECRET_FILE"
STOCKD_LOCK=zk STOCKD_PEER_SECRET_FILE=/host/peer.secret docker-compose -f "$src/docker-compose.yml" \
  -f "$src/docker/route-owner.yml" --project-directory "$src" config >"$T/owner.yml" ||
  fail "docker-compose config with docker/route-owner.yml failed"
"$py" - "$T/owner.yml" <<'PY'
import sys, yaml
svc = yaml.safe_load(open(sys.argv[1]))["services"]
bad = []
for n in ("stockd-1", "stockd-2", "stockd-3"):
    env, vols = svc[n].get("environment") or {}, [str(v) for v in svc[n].get("volumes") or []]
    want = {"STOCKD_ROUTE": "owner", "STOCKD_ANNOUNCE": n + ":8080",
            "STOCKD_PEERS": "stockd-1:8080,stockd-2:8080,stockd-3:8080",
            "STOCKD_PEER_SECRET_FILE": "/run/stockd/peer.secret", "STOCKD_LOCK": "zk"}
    got = {k: env.get(k) for k in want}
    if got != want:
        bad.append("%s: %s, want %s" % (n, got, want))
    if not any(v.startswith("/host/peer.secret:/run/stockd/peer.secret") and v.endswith("ro")
               for v in vols):
        bad.append("%s: the secret is not mounted read-only (volumes %s)" % (n, vols))
nginx_env = svc["nginx"].get("environment") or {}
if nginx_env.get("STOCKD_NGINX_ROUTE") != "round-robin":
    bad.append("nginx is not round-robin under owner routing: %s" % nginx_env)
for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
echo "ok: with docker/route-owner.yml every stockd routes by owner, announced by its service name, the secret a read-only file"

# The Galera cluster (docker/galera.yml over docker-compose.yml, docs/galera.md): the
# file refuses to resolve without the check user's password; with it three nodes of the
# MariaDB image, each its own number, the same three names and a volume of its own, the
# later ones waiting for the one before; HAProxy in front with the same password; every
# stockd and the writer connect through haproxy and wait for it.
if env -u STOCKD_GALERA_CHECK_PASSWORD STOCKD_LOCK=zk docker-compose -f "$src/docker-compose.yml" \
  -f "$src/docker/galera.yml" --project-directory "$src" config >/dev/null 2>"$T/err"; then
  fail "docker/galera.yml resolved without STOCKD_GALERA_CHECK_PASSWORD"
fi
grep -q STOCKD_GALERA_CHECK_PASSWORD "$T/err" || fail "unclear error without STOCKD_GALERA_CHECK_PASSWORD: $(cat "$T/err")"
echo "ok: docker/galera.yml refuses to resolve without STOCKD_GALERA_CHECK_PASSWORD"
STOCKD_LOCK=zk STOCKD_GALERA_CHECK_PASSWORD=check-pw-from-env docker-compose -f "$src/docker-compose.yml" \
  -f "$src/docker/galera.yml" --project-directory "$src" config >"$T/galera.yml" ||
  fail "docker-compose config with docker/galera.yml failed"
"$py" - "$T/galera.yml" <<'PY'
import sys, yaml
svc = yaml.safe_load(open(sys.argv[1]))["services"]
bad = []
for n in (1, 2, 3):
    s = svc.get("galera%d" % n) or {}
    env = s.get("environment") or {}
    want = {"STOCKD_GALERA_NODE": str(n), "STOCKD_GALERA_NODES": "galera1,galera2,galera3",
            "STOCKD_GALERA_CHECK_PASSWORD": "check-pw-from-env"}
    if {k: env.get(k) for k in want} != want:
        bad.append("galera%d: %s, want %s" % (n, env, want))
    if s.get("entrypoint") != ["python3", "-m", "lab.container", "galera"]:
        bad.append("galera%d: entrypoint %s" % (n, s.get("entrypoint")))
    if (s.get("build") or {}).get("dockerfile") != "docker/mariadb/Dockerfile":
        bad.append("galera%d is not the MariaDB image" % n)
    if not any(str(v).startswith("galera%d-data:/var/lib/stockd" % n) for v in s.get("volumes") or []):
        bad.append("galera%d: no volume of its own (%s)" % (n, s.get("volumes")))
    if n > 1 and "galera%d" % (n - 1) not in (s.get("depends_on") or {}):
        bad.append("galera%d does not wait for galera%d" % (n, n - 1))
    if s.get("ports"):
        bad.append("galera%d publishes ports" % n)
hp = svc.get("haproxy") or {}
if (hp.get("environment") or {}).get("STOCKD_GALERA_CHECK_PASSWORD") != "check-pw-from-env":
    bad.append("haproxy: no check password")
if hp.get("ports"):
    bad.append("haproxy publishes ports")
for n in ("stockd-1", "stockd-2", "stockd-3", "writer"):
    env = svc[n].get("environment") or {}
    if env.get("STOCKD_MYSQL") != "mysql://stockd@haproxy:3306/shop":
        bad.append("%s connects to %s" % (n, env.get("STOCKD_MYSQL")))
    if "haproxy" not in (svc[n].get("depends_on") or {}):
        bad.append("%s does not wait for haproxy" % n)
for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
echo "ok: with docker/galera.yml three Galera nodes behind haproxy, every stockd and the writer through it"
# The container's HAProxy configuration is the stack's (lab/servers.py's HAProxy, the
# nodes by name): haproxy -c accepts it with the names mapped to loopback, and it checks
# each node with lab/galera_check.sh, nodes 2 and 3 as backups.
mkdir -p "$T/hp"
(cd "$src" && "$py" -c 'import sys; from lab import servers as s
s.HAProxy(sys.argv[1], 3306, ["galera1:3306", "galera2:3306", "galera3:3306"], "pw",
          bind="0.0.0.0").write_config()' "$T/hp") || fail "HAProxy.write_config failed"
cfg=$T/hp/haproxy/haproxy.cfg
grep -q "server node1 galera1:3306 check$" "$cfg" && grep -q "server node3 galera3:3306 check backup" "$cfg" &&
  grep -q "bind 0.0.0.0:3306" "$cfg" || fail "the container's haproxy.cfg: $(cat "$cfg")"
grep -q "galera_check.sh" "$T/hp/haproxy/check" || fail "the check wrapper does not run lab/galera_check.sh"
sed 's/galera[123]:3306/127.0.0.1:3306/' "$cfg" >"$cfg.t"
haproxy -c -q -f "$cfg.t" >"$T/haproxy-c.log" 2>&1 || fail "haproxy -c rejects the container's config: $(cat "$T/haproxy-c.log")"
grep -q 'lab/galera_check.sh' "$src/docker/haproxy/Dockerfile" ||
  fail "docker/haproxy/Dockerfile does not copy lab/galera_check.sh"
echo "ok: the container's haproxy.cfg is the stack's, by node name, and haproxy -c accepts it"

# The MariaDB, ZooKeeper and Redis images start their servers with lab/servers.py's code
# (python3 -m lab.container), as the native stack does: the same install, settings,
# schema, user, zoo.cfg, Redis settings (no persistence) and ACL.
for img in mariadb zookeeper redis; do
  grep -q "^ENTRYPOINT \[\"python3\", \"-m\", \"lab.container\", \"$img\"\]" "$src/docker/$img/Dockerfile" ||
    fail "docker/$img/Dockerfile does not start its server with python3 -m lab.container $img"
  grep -q '^COPY lab/.*lab/servers.py' "$src/docker/$img/Dockerfile" ||
    fail "docker/$img/Dockerfile does not copy lab/servers.py into the image"
done
echo "ok: the MariaDB, ZooKeeper and Redis images start their servers with lab/container.py"
# Redis keeps protected mode on and takes the native ACL (issue 16 #12).
grep -q "\"--protected-mode\", \"yes\"" "$src/lab/container.py" &&
  ! grep -q "\"--protected-mode\", \"no\"" "$src/lab/container.py" ||
  fail "lab/container.py's redis must keep protected mode on"
grep -q 'redis_auth_conf' "$src/lab/container.py" ||
  fail "lab/container.py's redis does not use lab/servers.py's redis_auth_conf"
echo "ok: the Redis image keeps protected mode on and uses the ACL of redis_auth_conf"

# The compose nginx.conf: the image's entrypoint renders nginx/nginx.conf.in (the
# native stack's template) with lab/nginx.py; tested with the real nginx, stockd-N
# resolved to loopback ports and the error log moved, everything else as rendered.
# render VAR=VALUE...: the entrypoint's rendering alone, into $T/$STOCKD_NGINX_CONF.
render() {
  env STOCKD_NGINX_TEMPLATE="$src/nginx/nginx.conf.in" STOCKD_NGINX_LAB="$src" STOCKD_NGINX_RENDER_ONLY=1 \
    PATH="/usr/bin:$PATH" "$@" bash "$src/docker/nginx/entrypoint.sh" 2>"$T/render.err"
}
# nginx_t CONF: nginx -t on CONF with the upstream names mapped to loopback.
nginx_t() {
  sed -e 's|server stockd-\([0-9]\):8080|server 127.0.0.1:1808\1|' \
    -e 's|error_log /dev/stderr|error_log '"$T"'/error.log|' "$1" >"$1.t"
  nginx -t -q -p "$T" -c "$1.t" -g "pid $T/nginx.pid;" 2>"$T/nginx-t.log"
}
render STOCKD_NGINX_CONF="$T/nginx.conf" || fail "the nginx entrypoint did not render: $(cat "$T/render.err")"
nginx_t "$T/nginx.conf" || fail "nginx -t rejects the compose nginx.conf: $(cat "$T/nginx-t.log")"
echo "ok: the compose nginx.conf, rendered from nginx/nginx.conf.in, passes nginx -t"

# The compose Prometheus's configuration, checked by promtool with the rules file where
# the image puts it (here: the repository's), and scraping the three stockd services.
sed "s|/etc/stockd/stockd-rules.yml|$src/monitoring/stockd-rules.yml|" \
  "$src/docker/prometheus/prometheus.yml" >"$T/prometheus.yml"
promtool check config "$T/prometheus.yml" >"$T/promtool.log" 2>&1 ||
  fail "promtool check config rejects docker/prometheus/prometheus.yml: $(cat "$T/promtool.log")"
for n in 1 2 3; do
  grep -q "stockd-$n:8080" "$src/docker/prometheus/prometheus.yml" ||
    fail "docker/prometheus/prometheus.yml does not scrape stockd-$n:8080"
done
grep -q '^COPY monitoring/stockd-rules.yml /etc/stockd/stockd-rules.yml' \
  "$src/docker/prometheus/Dockerfile" || fail "docker/prometheus/Dockerfile does not copy the rules"
echo "ok: docker/prometheus/prometheus.yml passes promtool check config and scrapes stockd-1..3"
n=$(grep -c '^[[:space:]]*server stockd-[0-9]:8080' "$T/nginx.conf")
[[ $n == 3 ]] || fail "the compose nginx.conf: expected 3 upstream servers, got $n"
awk '/location \/stock\/reduce/ { inloc = 1 } inloc && /proxy_next_upstream off;/ { ok = 1 }
     inloc && /}/ { inloc = 0 } END { exit !ok }' "$T/nginx.conf" ||
  fail "the compose nginx.conf: /stock/reduce lacks proxy_next_upstream off"
echo "ok: 3 upstreams, no retry of /stock/reduce on another instance"
grep -q '^COPY nginx/nginx.conf.in ' "$src/docker/nginx/Dockerfile" ||
  fail "docker/nginx/Dockerfile does not copy the one template nginx/nginx.conf.in"
[[ ! -e $src/docker/nginx/nginx.conf ]] || fail "a second nginx configuration: docker/nginx/nginx.conf"

# The route and the rate limit of the compose nginx: the entrypoint renders them from
# STOCKD_NGINX_ROUTE / STOCKD_NGINX_RATE_LIMIT (compose passes both), and the result
# passes nginx -t; a bad value stops the container with a message.
for v in STOCKD_NGINX_ROUTE STOCKD_NGINX_RATE_LIMIT; do
  grep -q "^[[:space:]]*$v: \${$v:-" "$src/docker-compose.yml" || fail "docker-compose.yml does not pass $v to nginx"
done
render STOCKD_NGINX_CONF="$T/nginx-aff.conf" STOCKD_NGINX_ROUTE=affinity STOCKD_NGINX_RATE_LIMIT=200:50 ||
  fail "the nginx entrypoint did not render affinity with a rate limit: $(cat "$T/render.err")"
nginx_t "$T/nginx-aff.conf" ||
  fail "nginx -t rejects the affinity + rate limit configuration: $(cat "$T/nginx-t.log")"
grep -q '^[[:space:]]*hash $arg_id consistent;' "$T/nginx-aff.conf" || fail "affinity: no hash balancer"
grep -q 'limit_req zone=stockd_product burst=50 nodelay' "$T/nginx-aff.conf" || fail "no limit_req"
grep -q 'rate=200r/s' "$T/nginx-aff.conf" || fail "no limit_req_zone at 200r/s"
if render STOCKD_NGINX_CONF="$T/x.conf" STOCKD_NGINX_ROUTE=random; then
  fail "the nginx entrypoint accepted STOCKD_NGINX_ROUTE=random"
fi
grep -q "not a route: 'random'" "$T/render.err" || fail "unclear refusal of a bad route: $(cat "$T/render.err")"
# Under every route nginx answers /peer/ itself (a JSON 404) and never proxies it.
awk '/location \^~ \/peer\/ \{/ { inloc = 1 } inloc && /proxy_pass/ { bad = 1 }
     inloc && /return 404/ { ok = 1 } inloc && /}/ { inloc = 0 } END { exit bad || !ok }' "$T/nginx.conf" ||
  fail "the compose nginx.conf passes /peer/ on or does not refuse it"
echo "ok: the compose nginx refuses /peer/ with its own 404"
echo "ok: compose nginx with STOCKD_NGINX_ROUTE=affinity STOCKD_NGINX_RATE_LIMIT=200:50 passes nginx -t"
# podman-compose 1.0.3 passes an empty default, `${VAR:-}`, to the container unexpanded
# (the nginx container then refused "${STOCKD_NGINX_RATE_LIMIT:-}" and restarted for
# ever), so no default may be empty; the rate limit's is "off", which renders no limit.
if grep -v '^[[:space:]]*#' "$src/docker-compose.yml" | grep -n '\${[A-Z_]*:-}'; then
  fail "docker-compose.yml has an empty \${VAR:-} default, which podman-compose does not expand"
fi
render STOCKD_NGINX_CONF="$T/nginx-off.conf" STOCKD_NGINX_RATE_LIMIT=off ||
  fail "the nginx entrypoint refused STOCKD_NGINX_RATE_LIMIT=off (compose's default)"
if grep -q 'limit_req zone=' "$T/nginx-off.conf"; then fail "STOCKD_NGINX_RATE_LIMIT=off rendered a limit"; fi
echo "ok: compose's rate-limit default (off) renders no limit; no empty defaults in docker-compose.yml"

# The Dockerfile: a build stage and a runtime stage with the runtime libraries only,
# a non-root user, and stockd bound to all interfaces inside the container.
df=$src/Dockerfile
runtime=$(awk '/^FROM / { n++ } n == 2' "$df")
[[ $(grep -c '^FROM ' "$df") == 2 ]] || fail "Dockerfile: expected two stages"
for p in libmicrohttpd12 libzookeeper-mt2 libmariadb3 libcjson1 libcurl4; do
  grep -qw -- "$p" <<<"$runtime" || fail "Dockerfile runtime stage lacks $p"
done
if grep -Eq -- '-dev\b|build-essential|cmake' <<<"$runtime"; then
  fail "Dockerfile runtime stage installs build tools or -dev packages"
fi
user=$(grep -E '^USER ' <<<"$runtime" | tail -n 1 | awk '{print $2}')
[[ -n $user && $user != root && $user != 0 ]] || fail "Dockerfile: runtime user is '$user'"
grep -Eq '^ENTRYPOINT \["stockd", "--bind", "0.0.0.0"\]' <<<"$runtime" ||
  fail "Dockerfile: ENTRYPOINT must run stockd with --bind 0.0.0.0"
grep -Eq '^EXPOSE 8080' <<<"$runtime" || fail "Dockerfile: EXPOSE 8080 missing"
grep -Eq '^HEALTHCHECK ' <<<"$runtime" || fail "Dockerfile: HEALTHCHECK missing"
echo "ok: Dockerfile runtime stage: runtime libs only, user $user, stockd --bind 0.0.0.0"

# .dockerignore lets in only listed folders: each module the top CMakeLists.txt adds
# (tests excepted, the image does not build them) must be one of them, or the image
# build fails on a missing directory.
while read -r d; do
  [[ $d == tests ]] && continue
  grep -qx "!$d/" "$src/.dockerignore" || fail ".dockerignore keeps $d/ out of the image build"
done < <(sed -n 's/^[[:space:]]*add_subdirectory(\([^ )]*\).*/\1/p' "$src/CMakeLists.txt")
for f in CMakeLists.txt cmake/ lab/container.py lab/servers.py sql/ docker/; do
  grep -qx "!$f" "$src/.dockerignore" || fail ".dockerignore keeps $f out of the image build"
done
echo "ok: .dockerignore lets in every folder the build reads"
