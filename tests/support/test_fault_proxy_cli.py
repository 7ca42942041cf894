#!/usr/bin/env python3
"""fault-proxy's --control file (the binary given as the first argument), against a stand-in
echo upstream on loopback, as loadtest/nemesis drives it: each command written as FILE.tmp
and renamed to FILE is applied, echoed as "control: ...", and the file deleted;
`blackhole on` passes nothing either way (and a connection made meanwhile gets nothing)
until `blackhole off`, when what was sent arrives; `delay MS` delays each way of a round
trip; `cut` closes every connection; `heal` lifts both. No byte is changed."""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

PROXY = None  # the fault-proxy binary, from the command line


class Echo:
    """Echoes every connection; counts connections and bytes."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns = 0
        self.bytes = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self.echo, args=(conn,), daemon=True).start()

    def echo(self, conn):
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                self.bytes += len(data)
                conn.sendall(data)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def recv_exact(sock, n, limit):
    sock.settimeout(limit)
    got = b""
    try:
        while len(got) < n:
            chunk = sock.recv(n - len(got))
            if not chunk:
                break
            got += chunk
    except socket.timeout:
        pass
    return got


class ControlTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.control = os.path.join(self.dir.name, "control")
        self.up = Echo()
        self.port = free_port()
        self.proxy = subprocess.Popen(
            [PROXY, "--listen", str(self.port), "--upstream", f"127.0.0.1:{self.up.port}",
             "--control", self.control], stdout=subprocess.PIPE, text=True)
        self.assertEqual("ready", self.proxy.stdout.readline().strip())

    def tearDown(self):
        self.proxy.kill()
        self.proxy.wait()
        self.proxy.stdout.close()
        self.up.sock.close()
        self.dir.cleanup()

    def command(self, *lines):
        with open(self.control + ".tmp", "w") as f:
            f.write("".join(line + "\n" for line in lines))
        os.rename(self.control + ".tmp", self.control)
        for line in lines:
            self.assertEqual(f"control: {line}", self.proxy.stdout.readline().strip())
        self.assertFalse(os.path.exists(self.control), "an applied control file is deleted")

    def dial(self):
        return socket.create_connection(("127.0.0.1", self.port))

    def round_trip(self, sock, data):
        t0 = time.monotonic()
        sock.sendall(data)
        self.assertEqual(data, recv_exact(sock, len(data), 5))
        return time.monotonic() - t0

    def test_blackhole_passes_nothing_until_off(self):
        a = self.dial()
        self.round_trip(a, b"before")
        self.command("blackhole on")
        conns, sent = self.up.conns, self.up.bytes
        a.sendall(b"during")
        b = self.dial()
        b.sendall(b"new")
        self.assertEqual(b"", recv_exact(a, 6, 0.5))
        self.assertEqual(b"", recv_exact(b, 3, 0.1))
        self.assertEqual((conns, sent), (self.up.conns, self.up.bytes))
        self.command("blackhole off")
        self.assertEqual(b"during", recv_exact(a, 6, 5))
        self.assertEqual(b"new", recv_exact(b, 3, 5))
        a.close()
        b.close()

    def test_delay_then_heal(self):
        a = self.dial()
        self.round_trip(a, b"x")
        self.command("delay 150")
        self.assertGreaterEqual(self.round_trip(a, b"slow"), 0.29)  # 150 ms each way
        self.command("heal")
        self.round_trip(a, b"healed")  # how fast is the machine's business, not a check
        a.close()

    def test_cut_closes_every_connection(self):
        a, b = self.dial(), self.dial()
        self.round_trip(a, b"a")
        self.round_trip(b, b"b")
        self.command("cut")
        self.assertEqual(b"", recv_exact(a, 1, 5))  # end of file, not a timeout
        self.assertEqual(b"", recv_exact(b, 1, 5))
        c = self.dial()
        self.round_trip(c, b"again")
        a.close()
        b.close()
        c.close()

    def test_two_commands_in_one_file(self):
        self.command("blackhole on", "heal")
        a = self.dial()
        self.round_trip(a, b"healed")
        a.close()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_fault_proxy_cli.py FAULT-PROXY-BINARY")
    PROXY = sys.argv.pop(1)
    unittest.main(verbosity=2)
