#!/usr/bin/env python3
"""kazoo_hold: takes a product's lock with kazoo's Lock, the Python side of a fleet that
shares stockd's ZooKeeper lock, and holds it until told to let go.

Once connected it writes DIR/ready and waits for DIR/go; once it holds, it writes DIR/held, waits for DIR/release to exist, releases, and writes
DIR/released. kazoo is given extra_lock_patterns=["-lock-"], so it
also waits behind stockd's and Curator's nodes (docs/zookeeper-lock.md)."""
import argparse
import os
import time

from kazoo.client import KazooClient


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("zk")
    ap.add_argument("lock_path")
    ap.add_argument("dir")
    ap.add_argument("--auth", help="USER:PASSWORD: authenticate with this digest identity")
    a = ap.parse_args()
    zk = KazooClient(hosts=a.zk, auth_data=[("digest", a.auth)] if a.auth else None)
    zk.start(timeout=30)
    open(os.path.join(a.dir, "ready"), "w").close()
    while not os.path.exists(os.path.join(a.dir, "go")):
        time.sleep(0.02)
    lock = zk.Lock(a.lock_path, "kazoo_hold", extra_lock_patterns=["-lock-"])
    lock.acquire()
    with open(os.path.join(a.dir, "held"), "w") as f:
        f.write("ok\n")
    while not os.path.exists(os.path.join(a.dir, "release")):
        time.sleep(0.02)
    lock.release()
    zk.stop()
    with open(os.path.join(a.dir, "released"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
