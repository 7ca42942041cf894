"""Processes of the stack: starting one in its own process group, pid files, waiting
on a state (never a fixed sleep), stopping with SIGTERM then SIGKILL, and whether a
process really owns a listening port.

A server is started without checking its port first: the server's own bind is the
check (a check before it would leave a window in which another process takes the
port). Readiness then asks both whether the server answers and whether the process we
started is the one listening, so that another server on a taken port is never taken
for ours.
"""

import os
import signal
import subprocess
import time

from . import LabError


def pid_runs(pid):
    """True if process PID runs. A zombie does not (a server killed while its starter
    has exited may wait seconds for init to reap it), unless other threads of it still
    run."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("State:"):
                    if line.split()[1] != "Z":
                        return True
                    break
        return len(os.listdir("/proc/%d/task" % pid)) > 1
    except OSError:
        return False


def read_pid(pidfile):
    """The pid in PIDFILE, or None if it is missing or not a number."""
    try:
        with open(pidfile) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def pid_alive(pidfile):
    pid = read_pid(pidfile)
    return pid is not None and pid_runs(pid)


def write_pid(pidfile, pid):
    tmp = pidfile + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % pid)
    os.replace(tmp, pidfile)


def wait_until(seconds, pred, interval=0.1):
    """Calls PRED until it returns true or SECONDS pass; returns its last value. An
    exception from PRED counts as false."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            ok = pred()
        except Exception:  # a server that is not up yet refuses in many ways
            ok = False
        if ok or time.monotonic() >= deadline:
            return ok
        time.sleep(interval)


def spawn(argv, log, env=None, pidfile=None):
    """Starts ARGV in a new session (its own process group), stdin from /dev/null,
    stdout and stderr to the file LOG (or discarded with None); writes its pid to
    PIDFILE. Returns the pid. The process is not waited for: it outlives us."""
    out = open(log, "ab") if log else subprocess.DEVNULL
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             env=env, start_new_session=True, close_fds=True)
    except FileNotFoundError:
        raise LabError("%s is not installed (scripts/deps full installs it)" % argv[0])
    finally:
        if log:
            out.close()
    if pidfile:
        write_pid(pidfile, p.pid)
    return p.pid


def _signal(pid, sig):
    """Signals PID's process group when PID leads one (spawn's processes do), else PID."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_pid(pid, seconds=20):
    """SIGTERM, up to SECONDS for it to end, then SIGKILL. True if it ended."""
    if not pid_runs(pid):
        return True
    _signal(pid, signal.SIGTERM)
    if wait_until(seconds, lambda: not pid_runs(pid), 0.05):
        return True
    _signal(pid, signal.SIGKILL)
    return wait_until(5, lambda: not pid_runs(pid), 0.05)


def stop_pidfile(pidfile, seconds=20):
    """Stops the process of PIDFILE (if it runs) and removes the file."""
    pid = read_pid(pidfile)
    if pid is not None:
        stop_pid(pid, seconds)
    try:
        os.unlink(pidfile)
    except FileNotFoundError:
        pass


def _children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _socket_inodes(pid):
    inodes = set()
    for p in [pid] + _children(pid):
        try:
            fds = os.listdir("/proc/%d/fd" % p)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink("/proc/%d/fd/%s" % (p, fd))
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


def listening_inodes(port):
    """The inodes of the TCP sockets listening on PORT (any address, IPv4 or IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        found.add(cols[9])
        except OSError:
            continue
    return found


def listens(pid, port):
    """True if process PID (or a child of it) holds a socket listening on PORT."""
    return bool(_socket_inodes(pid) & listening_inodes(port))


def tail(path, lines=15):
    """The last LINES lines of the file PATH ('' if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            data = f.read()[-16384:]
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def signal_ours(pid, sig, marker):
    """Sends SIG to PID only if that process is still ours: its command line holds the
    bytes MARKER. A pid file can outlive its process, and on a machine whose pid_max is
    32768 the pid is soon another process's, which must never get a SIGSTOP or SIGKILL
    meant for one of our servers. True if the signal was sent."""
    if not pid:
        return False
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if marker not in f.read():
                return False
        os.kill(pid, sig)
    except OSError:
        return False
    return True


def pause_pidfile(pidfile, marker):
    """SIGSTOP of the process of PIDFILE (if it is ours, see signal_ours)."""
    return signal_ours(read_pid(pidfile), signal.SIGSTOP, marker)


def resume_pidfile(pidfile, marker):
    """SIGCONT of the process of PIDFILE (if it is ours)."""
    return signal_ours(read_pid(pidfile), signal.SIGCONT, marker)


def kill_pidfile(pidfile, marker, seconds=15):
    """kill -9 of the process of PIDFILE (if it is ours): a crash. Returns once it is gone
    (or a zombie, whose sockets are closed), at most SECONDS, and removes the pid file, so
    that a start function, which leaves a server whose pid runs alone, starts it again."""
    pid = read_pid(pidfile)
    if signal_ours(pid, signal.SIGKILL, marker):
        wait_until(seconds, lambda: not pid_runs(pid), 0.05)
    try:
        os.unlink(pidfile)
    except FileNotFoundError:
        pass
