#!/usr/bin/env python3
"""A TCP relay in front of MariaDB that can hold one COMMIT back: a COMMIT that arrives
late, as it does after a pause, a slow network or a slow disk on the client's side.

  mysql_relay.py --listen PORT --upstream PORT [--hold-commit N --hold-s S]
                 [--delay-commit-ms D]

Every connection is relayed byte for byte. The client's side of the stream is cut into
the protocol's packets (3-byte little-endian length, 1-byte sequence, payload) only to
recognise COM_QUERY "COMMIT" (what mysql_commit() sends); the N-th such packet, counted
over all connections, is held for S seconds before it goes on, while every other
connection flows freely. --delay-commit-ms delays EVERY COMMIT by D ms instead: a
commit that takes that long, as on a disk that syncs slowly or a far network. The
relay prints "ready" once it listens, and one line to
stdout when it starts and ends the hold ("holding COMMIT #N", "released COMMIT #N"), so
a test can act while the COMMIT is held. It never changes a byte."""
import argparse
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
                if nth == args.hold_commit:
                    say(f"holding COMMIT #{nth} for {args.hold_s} s")
                    time.sleep(args.hold_s)
                    say(f"released COMMIT #{nth}")
                elif args.delay_commit_ms:
                    time.sleep(args.delay_commit_ms / 1000.0)
            server.sendall(head + payload)
    except OSError:
        pass
    finally:
        shut_both(client, server)


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
