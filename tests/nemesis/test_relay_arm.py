#!/usr/bin/env python3
"""fault-proxy --arm-file (tests/support/fault-proxy, the built binary given as the first
argument), as loadtest/nemesis uses it, against a stand-in upstream that only records when
each packet arrives (no MariaDB needed): "S K" written to the arm file lets K COMMITs pass
and holds the next one for S seconds; every other packet, and every COMMIT once the arming
is used up, goes through at once; the relay changes no byte."""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

RELAY = None  # the fault-proxy binary, from the command line


def packet(sql):
    payload = b"\x03" + sql
    return len(payload).to_bytes(3, "little") + b"\x00" + payload


class Upstream:
    """Accepts one connection and records (time, bytes) of what arrives."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.got = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        conn, _ = self.sock.accept()
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                self.got.append((time.monotonic(), data))

    def wait_bytes(self, n, limit=5):
        deadline = time.monotonic() + limit
        while sum(len(d) for _, d in self.got) < n and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.got[-1][0] if self.got else None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class RelayArmTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.arm = os.path.join(self.dir.name, "arm")
        self.up = Upstream()
        self.port = free_port()
        self.relay = subprocess.Popen(
            [RELAY, "--listen", str(self.port), "--upstream",
             str(self.up.port), "--arm-file", self.arm], stdout=subprocess.PIPE, text=True)
        self.assertEqual("ready", self.relay.stdout.readline().strip())
        self.client = socket.create_connection(("127.0.0.1", self.port))
        self.sent = 0

    def tearDown(self):
        self.client.close()
        self.relay.kill()
        self.relay.wait()
        self.relay.stdout.close()
        self.up.sock.close()
        self.dir.cleanup()

    def send(self, sql):
        """Sends one COM_QUERY; returns how long it took to reach the upstream."""
        p = packet(sql)
        t0 = time.monotonic()
        self.client.sendall(p)
        self.sent += len(p)
        arrived = self.up.wait_bytes(self.sent)
        self.assertIsNotNone(arrived, f"{sql!r} never reached the upstream")
        return arrived - t0

    def test_armed_hold_skips_k_commits_then_holds_one(self):
        self.assertLess(self.send(b"COMMIT"), 0.3)  # not armed: at once
        with open(self.arm + ".tmp", "w") as f:
            f.write("0.8 1\n")
        os.rename(self.arm + ".tmp", self.arm)
        self.assertLess(self.send(b"SELECT 1"), 0.3)  # not a COMMIT
        self.assertLess(self.send(b"COMMIT"), 0.3)  # the one K lets pass
        self.assertTrue(os.path.exists(self.arm), "the arming must stay for the next COMMIT")
        held = self.send(b"commit")
        self.assertGreaterEqual(held, 0.75, "the armed COMMIT was not held")
        self.assertFalse(os.path.exists(self.arm), "a used arming must be removed")
        self.assertLess(self.send(b"COMMIT"), 0.3)  # used up: at once again
        self.assertIn("holding COMMIT #3 for 0.8 s", self.relay.stdout.readline())
        self.assertIn("released COMMIT #3", self.relay.stdout.readline())
        sent = b"".join(packet(s) for s in (b"COMMIT", b"SELECT 1", b"COMMIT", b"commit",
                                            b"COMMIT"))
        self.assertEqual(sent, b"".join(d for _, d in self.up.got), "the relay changed bytes")

    def test_a_malformed_arming_holds_nothing(self):
        with open(self.arm, "w") as f:
            f.write("soon\n")
        self.assertLess(self.send(b"COMMIT"), 0.3)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_relay_arm.py FAULT-PROXY-BINARY")
    RELAY = sys.argv.pop(1)
    unittest.main(verbosity=2)
