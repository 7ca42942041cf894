"""The tools' way to the stack: scripts/stack as a subprocess, with the run directory
and port base given explicitly (so a STACK_RUN exported for another stack is never the
one a tool starts, measures and stops), and its `env` read as data."""

import os
import shlex
import subprocess

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class StackError(RuntimeError):
    """scripts/stack failed; the message carries the tail of its output."""


class Stack:
    def __init__(self, run, port_base, log):
        self.run, self.port_base, self.log = run, port_base, log
        self.environ = dict(os.environ, STACK_RUN=run, STACK_PORT_BASE=str(port_base))

    def __call__(self, *args):
        """Runs scripts/stack ARGS..., its output appended to the log."""
        with open(self.log, "a", encoding="utf-8") as log:
            r = subprocess.run([os.path.join(SRC, "scripts", "stack"), *args], env=self.environ,
                               stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                tail = "".join(f.readlines()[-20:])
            raise StackError(f"scripts/stack {args[0]} failed (exit {r.returncode}):\n{tail}")

    def env(self):
        """`scripts/stack env` as a dict (NGINX_URL, MYSQL_URL, STOCKD_PORTS, ...)."""
        out = subprocess.run([os.path.join(SRC, "scripts", "stack"), "env"], env=self.environ,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if out.returncode != 0:
            raise StackError(f"scripts/stack env failed: {out.stderr.strip()}")
        env = {}
        for line in out.stdout.splitlines():
            words = shlex.split(line)
            if len(words) == 2 and words[0] == "export" and "=" in words[1]:
                k, v = words[1].split("=", 1)
                env[k] = v
        return env
