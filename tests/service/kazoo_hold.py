#!/usr/bin/env python3
"""kazoo_hold: takes a product's lock with kazoo, the Python side of a fleet that shares
stockd's ZooKeeper lock, and holds it until told to let go.

Once connected it writes DIR/ready and waits for DIR/go; once it holds, it writes
DIR/held, waits for DIR/release to exist, releases, and writes DIR/released.
--recipe chooses how it queues:
  kazoo     kazoo's Lock, given extra_lock_patterns=["-lock-"], so it also waits behind
            stockd's and Curator's nodes (docs/zookeeper-lock.md);
  zoo_lock  the recipe of ZooKeeper's own C client (zoo_lock.c in ZooKeeper's source),
            redone here: its node is "x-<session id, 16 hex digits>-<seq>", children
            are ordered by the text after their last '-', and it watches the child just
            before its own until it is first;
  enqueue   one node as kazoo's Lock names it, made without waiting ("held" once made):
            a contender that queues, whatever its place (the sequence limit's test)."""
import argparse
import os
import threading
import time
import uuid

from kazoo.client import KazooClient


def zoo_lock_acquire(zk, path):
    """zoo_lock.c's zkr_lock_lock on kazoo; returns our node's path."""
    zk.ensure_path(path)
    mine = zk.create("%s/x-%016x-" % (path, zk.client_id[0]), b"", ephemeral=True,
                     sequence=True).rsplit("/", 1)[1]
    while True:
        kids = sorted(zk.get_children(path), key=lambda k: k.rsplit("-", 1)[-1])
        at = kids.index(mine)
        if at == 0:
            return "%s/%s" % (path, mine)
        gone = threading.Event()
        if zk.exists("%s/%s" % (path, kids[at - 1]), watch=lambda _event: gone.set()):
            gone.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("zk")
    ap.add_argument("lock_path")
    ap.add_argument("dir")
    ap.add_argument("--auth", help="USER:PASSWORD: authenticate with this digest identity")
    ap.add_argument("--recipe", choices=["kazoo", "zoo_lock", "enqueue"], default="kazoo")
    a = ap.parse_args()
    zk = KazooClient(hosts=a.zk, auth_data=[("digest", a.auth)] if a.auth else None)
    zk.start(timeout=30)
    open(os.path.join(a.dir, "ready"), "w").close()
    while not os.path.exists(os.path.join(a.dir, "go")):
        time.sleep(0.02)
    node = None
    if a.recipe == "kazoo":
        lock = zk.Lock(a.lock_path, "kazoo_hold", extra_lock_patterns=["-lock-"])
        lock.acquire()
    elif a.recipe == "zoo_lock":
        node = zoo_lock_acquire(zk, a.lock_path)
    else:
        node = zk.create("%s/%s__lock__" % (a.lock_path, uuid.uuid4().hex), b"",
                         ephemeral=True, sequence=True, makepath=True)
    with open(os.path.join(a.dir, "held"), "w") as f:
        f.write("ok\n")
    while not os.path.exists(os.path.join(a.dir, "release")):
        time.sleep(0.02)
    if node:
        zk.delete(node)
    else:
        lock.release()
    zk.stop()
    with open(os.path.join(a.dir, "released"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
