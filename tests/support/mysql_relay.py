#!/usr/bin/env python3
"""A TCP relay in front of MariaDB that can hold one COMMIT back: a COMMIT that arrives
late, as it does after a pause, a slow network or a slow disk on the client's side.

  mysql_relay.py --listen PORT --upstream PORT [--hold-commit N --hold-s S]
                 [--delay-commit-ms D] [--arm-file PATH]

Every connection is relayed byte for byte. The client's side of the stream is cut into
the protocol's packets (3-byte little-endian length, 1-byte sequence, payload) only to
recognise COM_QUERY "COMMIT" (what mysql_commit() sends); the N-th such packet, counted
over all connections, is held for S seconds before it goes on, while every other
connection flows freely. --delay-commit-ms delays EVERY COMMIT by D ms instead: a
commit that takes that long, as on a disk that syncs slowly or a far network. The
relay prints "ready" once it listens, and one line to stdout when it starts and ends the
hold ("holding COMMIT #N", "released COMMIT #N"), so
a test can act while the COMMIT is held. It never changes a byte.

  --arm-file PATH (for loadtest/nemesis): whenever PATH exists when a COMMIT arrives, the
  relay reads "S [K]" from it. With K 0 (or none) it deletes PATH and holds that COMMIT for
  S seconds, printing the same two lines; otherwise it lets the COMMIT pass and writes
  "S K-1" back. So a caller arms "hold the (K+1)-th next COMMIT for S s" at any time by
  writing "S K" to PATH.tmp and renaming it to PATH."""
import argparse
import os
import socket
import sys
import threading
import time

COM_QUERY = 0x03
lock = threading.Lock()
commits = 0


def say(text):
    print(text, flush=True)


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def shut_both(*socks):
    # Either direction ending ends the relayed connection, as a cut would.
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def client_to_server(client, server, args):
    global commits
    try:
        while True:
            head = read_exact(client, 4)
            if head is None:
                break
            length = int.from_bytes(head[:3], "little")
            payload = read_exact(client, length) if length else b""
            if payload is None:
                break
            if payload[:1] == bytes([COM_QUERY]) and payload[1:].strip().upper() == b"COMMIT":
                with lock:
                    commits += 1
                    nth = commits
                    hold_s = args.hold_s if nth == args.hold_commit else armed_hold(args)
                if hold_s:
                    say(f"holding COMMIT #{nth} for {hold_s} s")
                    time.sleep(hold_s)
                    say(f"released COMMIT #{nth}")
                elif args.delay_commit_ms:
                    time.sleep(args.delay_commit_ms / 1000.0)
            server.sendall(head + payload)
    except OSError:
        pass
    finally:
        shut_both(client, server)


def armed_hold(args):
    """The seconds of the hold armed through --arm-file, taking the arming (0 if none).
    Called under `lock`, so one armed hold goes to one COMMIT."""
    if not args.arm_file:
        return 0
    try:
        with open(args.arm_file, encoding="ascii") as f:
            words = f.read().split()
        hold_s, skip = float(words[0]), int(words[1]) if len(words) > 1 else 0
        if skip > 0:
            with open(args.arm_file, "w", encoding="ascii") as f:
                f.write(f"{hold_s} {skip - 1}\n")
            return 0
        os.unlink(args.arm_file)
    except (OSError, ValueError, IndexError):
        return 0
    return max(0.0, hold_s)


def server_to_client(server, client):
    try:
        while True:
            data = server.recv(65536)
            if not data:
                break
            client.sendall(data)
    except OSError:
        pass
    finally:
        shut_both(client, server)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--upstream", type=int, required=True)
    ap.add_argument("--hold-commit", type=int, default=0)
    ap.add_argument("--hold-s", type=float, default=0)
    ap.add_argument("--delay-commit-ms", type=float, default=0)
    ap.add_argument("--arm-file", default="")
    args = ap.parse_args()
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.listen))
    ls.listen(64)
    say("ready")
    while True:
        client, _ = ls.accept()
        try:
            server = socket.create_connection(("127.0.0.1", args.upstream))
        except OSError as e:
            sys.stderr.write(f"upstream: {e}\n")
            client.close()
            continue
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=client_to_server, args=(client, server, args), daemon=True).start()
        threading.Thread(target=server_to_client, args=(server, client), daemon=True).start()


if __name__ == "__main__":
    main()
