#!/usr/bin/env python3
"""A plain TCP relay: a link that a test can cut by killing this process.

  tcp_relay.py --listen PORT --upstream PORT

Every connection to 127.0.0.1:PORT is relayed byte for byte to 127.0.0.1:UPSTREAM, both
ways. It prints "ready" once it listens. Killing it closes every relayed connection and
refuses new ones: for the Sentinel failover test (tests/service/sentinel_failover.sh), a
replica that replicates through it loses its primary at a moment the test chooses, so
the lock key written after that never reaches the replica."""
import argparse
import socket
import sys
import threading


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--upstream", type=int, required=True)
    a = ap.parse_args()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", a.listen))
    srv.listen(16)
    print("ready", flush=True)
    while True:
        client, _ = srv.accept()
        try:
            up = socket.create_connection(("127.0.0.1", a.upstream), timeout=5)
            up.settimeout(None)
        except OSError:
            client.close()
            continue
        for s, d in ((client, up), (up, client)):
            threading.Thread(target=pump, args=(s, d), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
