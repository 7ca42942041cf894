"""Unit tests of the lab library's pure logic: the port layout, the state file, the
nginx template, the configuration files it takes from scripts/stack-lib.sh,
scripts/stack's option errors, and which Galera node a stopped cluster bootstraps from.
No server is started."""

import hashlib
import io
import json
import os
import re
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, SRC)

from lab import LabError, cli, nginx, ports, state  # noqa: E402
from lab import servers as srv  # noqa: E402


def stack_state(**kw):
    st = dict(state.DEFAULTS)
    lay = ports.layout(23300, kw.get("zk_ensemble", False), env={})
    st.update(base=23300, mysql_port=lay["mysql"], zk_port=lay["zk"], redis_port=lay["redis"],
              nginx_port=lay["nginx"], prometheus_port=lay["prometheus"], redlock_port=lay["redlock"],
              redis_replica_port=lay["redis_replica"], sentinel_port=lay["sentinel"], etcd_port=lay["etcd"])
    st.update(kw)
    return st


class PortLayout(unittest.TestCase):
    def test_offsets_from_one_base(self):
        lay = ports.layout(23300, env={})
        self.assertEqual(lay, {"mysql": 23306, "zk": 23381, "redis": 23382, "nginx": 23380,
                               "prometheus": 23392, "redlock": 23393, "redis_replica": 23396,
                               "sentinel": 23397, "etcd": 23379})
        self.assertEqual(ports.stockd_port(23300, 1), 23311)

    def test_ensemble_takes_nine_ports_past_redis(self):
        lay = ports.layout(23300, ensemble=True, env={})
        self.assertEqual(lay["zk"], 23383)
        self.assertEqual(ports.zk_ensemble_ports(23383),
                         [(23383, 23386, 23389), (23384, 23387, 23390), (23385, 23388, 23391)])

    def test_one_port_overridden(self):
        lay = ports.layout(23300, env={"STACK_NGINX_PORT": "23301", "STACK_ZK_PORT": ""})
        self.assertEqual((lay["nginx"], lay["zk"]), (23301, 23381))

    def test_bad_values_name_the_variable(self):
        with self.assertRaisesRegex(LabError, r"STACK_PORT_BASE must be a number in 1024..65400, got '80'"):
            ports.check_base("80")
        with self.assertRaisesRegex(LabError, "not a port: x"):
            ports.layout(23300, env={"STACK_REDIS_PORT": "x"})
        with self.assertRaisesRegex(LabError, "nine ports from 65530"):
            ports.layout(23300, ensemble=True, env={"STACK_ZK_PORT": "65530"})

    def test_overlap_is_refused(self):
        ports.check_distinct(stack_state(instances=64))
        with self.assertRaisesRegex(LabError, "ports overlap: .*stockd-68"):
            ports.check_distinct(stack_state(instances=68, lock="etcd"))

    def test_tool_bases_keep_their_stacks_apart(self):
        # Every tool's stack below the kernel's default ephemeral ports (32768+), where a
        # client's socket could take a port before a server binds it, and no two stacks
        # on one machine meeting: a stack spans its largest offset plus 64 instances,
        # the tests' ports 20 per integration test for room for 300 of them.
        span = max(v for k, v in ports.OFFSETS.items()
                   if k not in ("integration_tests", "integration_test_ports", "container_test"))
        span = max(span, ports.OFFSETS["stockd"] + 64) + 1
        tests = ports.OFFSETS["integration_tests"] + 300 * ports.OFFSETS["integration_test_ports"]
        bases = sorted(ports.BASES.items(), key=lambda kv: kv[1])
        self.assertEqual({"stack", "report", "cpu", "orders", "memory", "nemesis", "tests",
                          "tests_tsan"},
                         set(ports.BASES))
        for (name, base), (after, nxt) in zip(bases, bases[1:] + [("ephemeral", 32768)]):
            room = tests if name.startswith("tests") else span
            self.assertLessEqual(base + room, nxt, "%s's ports (%d + %d) reach %s's (%d)"
                                 % (name, base, room, after, nxt))

    def test_cmake_reads_the_same_offsets(self):
        with open(os.path.join(SRC, "lab", "ports.json")) as f:
            data = json.load(f)
        cmake = ""
        for p in ("CMakeLists.txt", "stack/tests.cmake"):
            with open(os.path.join(SRC, "tests", p)) as f:
                cmake += f.read()
        self.assertIn("lab/ports.json", cmake)
        names = re.findall(r"(?m)^\s*stockd_test_port\(\w+ (\w+)", cmake)
        self.assertIn("mysql", names)
        for name in names:
            self.assertIn(name, data)
        # No port arithmetic of its own: every offset comes from the file.
        self.assertNotRegex(cmake, r"STOCKD_TEST_PORT_BASE\} \+ [0-9]")


class StateFile(unittest.TestCase):
    def test_round_trip_is_json(self):
        with tempfile.TemporaryDirectory() as run:
            st = stack_state(lock="zk", extra=["--think-us", "20000", "a b;$(x)"], rate_limit="2:3")
            state.save(run, st)
            with open(state.path(run)) as f:
                self.assertEqual(json.load(f)["extra"], ["--think-us", "20000", "a b;$(x)"])
            self.assertEqual(state.load(run), st)

    def test_missing_or_broken_file_is_no_state(self):
        with tempfile.TemporaryDirectory() as run:
            self.assertIsNone(state.load(run))
            with open(state.path(run), "w") as f:
                f.write('S_LOCK=zk\n')
            self.assertIsNone(state.load(run))

    def test_older_file_gets_defaults(self):
        with tempfile.TemporaryDirectory() as run:
            with open(state.path(run), "w") as f:
                json.dump({"base": 23300, "lock": "zk", "unknown": 1}, f)
            st = state.load(run)
            self.assertEqual((st["lock"], st["route"], st["extra"]), ("zk", "round-robin", []))
            self.assertNotIn("unknown", st)


class NginxTemplate(unittest.TestCase):
    def test_native_round_robin(self):
        text = nginx.render_native("/r/nginx", 23380, ["127.0.0.1:23311", "127.0.0.1:23312"])
        self.assertIn("pid /r/nginx/nginx.pid;", text)
        self.assertIn("listen 127.0.0.1:23380;", text)
        self.assertIn("        server 127.0.0.1:23312 max_fails=0;\n", text)
        self.assertIn("proxy_temp_path /r/nginx/tmp/proxy;", text)
        # Root's workers read web/ wherever the checkout is (a 0700 parent included).
        if os.geteuid() == 0:
            self.assertIn("user root;", text)
        else:
            self.assertNotIn("user ", text.split("events")[0])
        self.assertNotRegex(text, r"(?m)^\s*#@[A-Z_]+@\s*$")
        self.assertNotIn("@LISTEN@", text)
        # Server-wide, so the deduction's location inherits it with the others.
        self.assertRegex(text, r'(?m)^        proxy_set_header X-Request-Start "t=\$\{msec\}";$')
        self.assertNotIn("hash $arg_id", text)
        self.assertNotIn("limit_req", text.split("location = /_error/429")[0].split("http {")[1]
                         .replace("limit_req_status", ""))

    def test_affinity_and_rate_limit(self):
        text = nginx.render_native("/r", 1, ["127.0.0.1:2"], "affinity", "600r/m:10")
        self.assertIn("        hash $arg_id consistent;\n", text)
        self.assertIn("server 127.0.0.1:2 max_fails=1 fail_timeout=2s;", text)
        self.assertIn("limit_req_zone $arg_id zone=stockd_product:1m rate=600r/m;", text)
        self.assertIn("limit_req zone=stockd_product burst=10 nodelay;", text)
        self.assertIn("rate=5r/s;", nginx.render_native("/r", 1, [], "round-robin", "5"))
        self.assertIn("burst=5 nodelay", nginx.render_native("/r", 1, [], "round-robin", "5"))

    def test_owner_is_round_robin_and_peer_is_never_proxied(self):
        # With owner routing nginx balances round-robin: the instances route among
        # themselves. Under every route, /peer/ gets nginx's own JSON 404.
        owner = nginx.render_native("/r", 1, ["127.0.0.1:2"], "owner")
        self.assertEqual(owner, nginx.render_native("/r", 1, ["127.0.0.1:2"], "round-robin"))
        for route in nginx.ROUTES:
            text = nginx.render_native("/r", 1, ["127.0.0.1:2"], route)
            peer = text.split("location ^~ /peer/ {")[1].split("}")[0]
            self.assertIn("return 404 '{\"result\":\"not_found\"", peer)
            self.assertNotIn("proxy_pass", peer)

    def test_owner_route_args(self):
        from lab import servers
        common = ["--route", "owner", "--announce", "127.0.0.1:5", "--peer-secret-file", "/r/s"]
        self.assertEqual(servers.owner_route_args(5, [5, 6], "/r/s", True), common)
        self.assertEqual(servers.owner_route_args(5, [5, 6], "/r/s", False),
                         common + ["--peers", "127.0.0.1:5,127.0.0.1:6"])

    def test_container_from_the_same_template(self):
        text = nginx.render_container(["stockd-%d:8080" % i for i in (1, 2, 3)])
        self.assertIn("listen 80;", text)
        self.assertIn("worker_processes auto;", text)
        self.assertNotIn("pid ", text)
        self.assertNotIn("_temp_path", text)
        self.assertEqual(len(re.findall(r"(?m)^\s*server stockd-[123]:8080 max_fails=0;$", text)), 3)
        native = nginx.render_native("/r", 1, [])
        # Everything from the error pages on is the same text in both.
        self.assertEqual(text[text.index("error_page"):], native[native.index("error_page"):])

    def test_bad_values_refused(self):
        for limit in ("0", "off", "1r/h", "5:"):
            with self.assertRaises(nginx.RenderError):
                nginx.render_native("/r", 1, [], "round-robin", limit)
        with self.assertRaisesRegex(nginx.RenderError, "not a route: 'hash'"):
            nginx.render_native("/r", 1, [], "hash")
        with self.assertRaisesRegex(nginx.RenderError, "unknown marker #@NOPE@"):
            nginx.render("x\n  #@NOPE@\n", [], [], "80", [])


class ServerFiles(unittest.TestCase):
    """The files lab/servers.py writes for its servers, the native ones and the container
    images' (lab/container.py): Redis's ACL and a ZooKeeper ensemble member's zoo.cfg."""

    def test_redis_acl_file(self):
        from lab import servers
        with tempfile.TemporaryDirectory() as d:
            path = servers.redis_auth_conf(d, "s3cret", True, 6390)
            self.assertEqual(os.path.join(d, "auth.conf"), path)
            self.assertEqual(0o600, os.stat(path).st_mode & 0o777)
            with open(path) as f:
                lines = f.read().splitlines()
        h = hashlib.sha256(b"s3cret").hexdigest()
        self.assertEqual(["user default off",
                          "user %s reset on #%s ~lock:* ~stockd:* resetchannels &lock:#released:* -@all "
                          "+evalsha +script|load +exists +pttl +time +incr +set +get +del +publish "
                          "+subscribe +unsubscribe +ping +decr +xadd +xgroup|create "
                          "+xinfo|groups +wait +xinfo|consumers +xreadgroup +xack +xautoclaim "
                          "+xpending +xrange +xlen +scan +xtrim +xgroup|delconsumer +eval +hset "
                          "+hget +hmget +hincrby +incrby +expire +zadd +zrem +zrangebyscore"
                          % (servers.redis_user(), h),
                          "user replica reset on #%s resetchannels -@all +psync +replconf +ping" % h],
                         lines[:3])
        self.assertTrue(lines[3].startswith("user sentinel reset on #%s -@all " % h), lines[3])
        self.assertEqual(["masteruser replica", 'masterauth "s3cret"'], lines[4:])

    def test_ensemble_member_config(self):
        from lab import servers
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "data"))
            servers.zk_write_cfg(d, 2181)
            servers.zk_ensemble_cfg(d, 2, ["127.0.0.1:1:4", "127.0.0.1:2:5", "127.0.0.1:3:6"])
            with open(os.path.join(d, "zoo.cfg")) as f:
                cfg = f.read()
            with open(os.path.join(d, "data", "myid")) as f:
                self.assertEqual("2\n", f.read())
        self.assertIn("clientPort=2181\nclientPortAddress=127.0.0.1\n", cfg)
        self.assertTrue(cfg.endswith("server.1=127.0.0.1:1:4\nserver.2=127.0.0.1:2:5\n"
                                     "server.3=127.0.0.1:3:6\n"), cfg)

    def test_a_member_number_outside_the_list_is_a_lab_error(self):
        from lab import servers
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(LabError, "zk: member number '4' is not one of 1..3"):
                servers.zk_ensemble_cfg(d, 4, ["a", "b", "c"])

    def test_a_password_cannot_end_its_sql_literal(self):
        from lab import servers
        self.assertIn("IDENTIFIED BY 'it\\'s a \\\\ test'",
                      servers.service_user_sql("shop", "stockd", "it's a \\ test", "%"))

    def test_every_shell_server_function_is_the_library_s(self):
        from lab import shell
        with open(os.path.join(SRC, "scripts", "stack-lib.sh")) as f:
            text = f.read()
        m = re.search(r"(?ms)^for _f in (.*?); do$", text)
        self.assertIsNotNone(m)
        looped = m.group(1).replace("\\\n", " ").split()
        defined = re.findall(r"(?m)^(\w+)\(\) \{ STACK_LAB_PASSWORD=\$4 stack_lab \1 ", text)
        self.assertEqual(sorted(shell.CALLS), sorted(looped + defined))


GRASTATE = """# GALERA saved state
version: 2.1
uuid:    2b9c6a4e-b4a3-11ef-8a0e-0f0e3d4b1c2a
seqno:   %d
safe_to_bootstrap: %d
"""


class GaleraBootstrap(unittest.TestCase):
    """`scripts/stack up --galera 3` with no node running starts the cluster from the
    most advanced node, read from fake grastate.dat files (a node that crashed says
    seqno -1; without a port, recover_seqno cannot run mariadbd and reads -1 too)."""

    def choose(self, nodes):
        """NODES: {n: (seqno, safe)} written as RUN/galeraN/data/grastate.dat, or None for
        a node without data; the node GaleraCluster.start would bootstrap."""
        with tempfile.TemporaryDirectory() as run:
            for n, st in nodes.items():
                if st is None:
                    continue
                os.makedirs(os.path.join(run, "galera%d" % n, "data"))
                with open(os.path.join(run, "galera%d" % n, "data", "grastate.dat"), "w") as f:
                    f.write(GRASTATE % (st[0], st[1]))
            return srv.bootstrap_choice(srv.GaleraCluster(run, None).positions())

    def test_clean_stop_bootstraps_the_node_marked_safe(self):
        self.assertEqual(self.choose({1: (41, 1), 2: (40, 0), 3: (39, 0)}), 1)

    def test_node_ahead_wins_over_node_1(self):
        # Node 1 was killed earlier and stopped at 12; 3 left last, cleanly, at 57.
        self.assertEqual(self.choose({1: (12, 0), 2: (50, 0), 3: (57, 1)}), 3)
        self.assertEqual(self.choose({1: (12, 0), 2: (57, 0), 3: (50, 0)}), 2)

    def test_tie_prefers_safe_then_lowest(self):
        self.assertEqual(self.choose({1: (57, 0), 2: (57, 1), 3: (57, 0)}), 2)
        self.assertEqual(self.choose({1: (57, 0), 2: (57, 0), 3: (57, 0)}), 1)

    def test_crashed_node_does_not_outrank_a_known_position(self):
        self.assertEqual(self.choose({1: (-1, 0), 2: (30, 0), 3: (-1, 0)}), 2)

    def test_fresh_cluster_has_no_choice(self):
        self.assertIsNone(self.choose({1: None, 2: None, 3: None}))
        self.assertEqual(self.choose({1: None, 2: (3, 0), 3: None}), 2)

    def test_grastate_and_recovery_log_parse(self):
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, "grastate.dat")
            with open(f, "w") as fh:
                fh.write(GRASTATE % (-1, 0))
            self.assertEqual(srv.grastate(f), srv.Grastate(
                "2b9c6a4e-b4a3-11ef-8a0e-0f0e3d4b1c2a", -1, False))
            self.assertIsNone(srv.grastate(os.path.join(d, "none")))
        log = ("2026-12-07 20:00:00 0 [Note] WSREP: Recovered position: "
               "2b9c6a4e-b4a3-11ef-8a0e-0f0e3d4b1c2a:1234\n")
        self.assertEqual(srv.recovered_seqno(log), 1234)
        self.assertEqual(srv.recovered_seqno("nothing here"), -1)


class CommandLine(unittest.TestCase):
    def run_cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = cli.main(list(argv))
        return rc, out.getvalue() + err.getvalue()

    def test_usage_errors_name_real_options(self):
        cases = [
            (("up", "--instances", "0"), "--instances must be a number in 1..64, got '0' (see: stack up --help)"),
            (("up", "--instances"), "--instances needs a value"),
            (("restart-stockd", "--rate-limit"), "--rate-limit needs a value"),
            (("up", "--rate-limit", "off"), "--rate-limit wants RATE[:BURST]"),
            (("up", "--verbose"), "unknown argument '--verbose'"),
            (("restart-stockd", "--zk-ensemble"), "unknown argument '--zk-ensemble'"),
            (("down", "now"), "unexpected argument 'now'"),
            (("kill-stockd",), "which instance? (1..N)"),
            (("kill-stockd", "x"), "unexpected argument 'x'"),
            (("start",), "unknown command 'start'"),
        ]
        for argv, text in cases:
            rc, out = self.run_cli(*argv)
            self.assertEqual(rc, 2, argv)
            self.assertIn(text, out, argv)
            # Every option a message names is one the command has.
            for opt in re.findall(r"--[a-z-]+", out.split("(see:")[0]):
                if argv[0] in ("up", "restart-stockd") and opt not in ("--verbose", "--zk-ensemble"):
                    self.assertIn(opt, cli.parser_for(argv[0]).format_help(), (argv, opt))

    def test_stockd_args_after_double_dash(self):
        ns, extra = cli.parse("up", ["--lock", "zk", "--", "--think-us", "5", "--instances", "9"])
        self.assertEqual((ns.lock, ns.instances, extra), ("zk", None, ["--think-us", "5", "--instances", "9"]))
        ns, extra = cli.parse("restart-stockd", ["--affinity", "--rate-limit", "off"])
        self.assertEqual((ns.route, ns.rate_limit, extra), ("affinity", "off", None))


if __name__ == "__main__":
    unittest.main()
