"""The run spec: one grammar for "lock mode + stockd arguments + instances + route".

    SPEC   := HEAD { ":" FIELD }
    HEAD   := PRESET | [LABEL "="] MODE { "," STOCKD-ARG }
    FIELD  := N                  the instances (the first bare number), then the
                                 segments the stock is split over (the second)
            | "route=" ROUTE     round-robin, affinity (nginx) or owner (stockd)
            | "pitfall=" NAME    stockd --pitfall NAME
            | "fence=" on|off    stockd --fence
            | "commit-ms=" D     a fault proxy delays each COMMIT by D ms (the demo)
            | "kill"             kill the product's instance mid-run (the demo)

Examples: "zk", "zk:3", "zk-1:3:route=affinity", "zk-x16=zk,--cross-products,16",
"zk:3:4", "zk:3:pitfall=release-before-commit:fence=off:commit-ms=20",
"local:3:route=affinity:kill". A PRESET is a name for a mode and its usual arguments
(PRESETS below); a name that is no preset is a mode with no arguments, which stockd
itself checks when it starts. loadtest/report, cpu and memory and scripts/demo's --runs
all read specs through parse(). The modes themselves are stockd's: stockd_modes() reads
them from `stockd --list-modes`, and a test checks the presets against them.

Run as a program, it prints each spec as one tab-separated line for shell drivers:
label, title (the label with the instances and fields, for tables), mode, instances
(0 = the caller's default), segments, route ("-" = default), commit-ms, kill (0/1),
then the stockd arguments (--segments included when K > 1).
"""

import re
import subprocess
import sys
from dataclasses import dataclass

from .nginx import ROUTES

# The presets: name -> (mode, stockd arguments).
PRESETS = {
    "none": ("none", ("--batch-max", "1")),
    "local-1": ("local", ("--batch-max", "1")),
    "local": ("local", ()),
    "zk-seed": ("zk", ("--batch-max", "1", "--precheck", "off")),
    "zk-1": ("zk", ("--batch-max", "1")),
    "zk": ("zk", ()),
    "zk-herd-1": ("zk-herd", ("--batch-max", "1")),
    "zk-herd": ("zk-herd", ()),
    "zk-seg4": ("zk", ("--segments", "4")),
    "zk-seg16": ("zk", ("--segments", "16")),
    "redis-1": ("redis", ("--batch-max", "1")),
    "redis": ("redis", ()),
    "redis-renew": ("redis", ("--lease-renew", "on")),
    "redlock-1": ("redlock", ("--batch-max", "1")),
    "redlock": ("redlock", ()),
    "etcd": ("etcd", ()),
    "db-lock": ("db-lock", ()),
    "for-update-1": ("for-update", ("--batch-max", "1")),
    "for-update": ("for-update", ()),
    "atomic": ("atomic", ()),
    "redis-stock": ("redis-stock", ()),
}


_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}\Z")
_ARG = re.compile(r"[A-Za-z0-9_.=-]{1,64}\Z")


class SpecError(ValueError):
    """A spec that does not parse; the message says which part and why."""


@dataclass(frozen=True)
class Spec:
    label: str
    mode: str
    args: tuple = ()  # the stockd arguments of the head (preset or explicit)
    instances: int = None  # None: the tool's own default
    segments: int = 1
    route: str = None  # None: the tool's own default
    pitfall: str = None
    fence: str = None
    commit_ms: int = 0
    kill: bool = False

    def stockd_args(self):
        """Every stockd argument the spec implies, after --lock MODE."""
        out = list(self.args)
        if self.segments > 1 and "--segments" not in out:
            out += ["--segments", str(self.segments)]
        if self.pitfall:
            out += ["--pitfall", self.pitfall]
        if self.fence:
            out += ["--fence", self.fence]
        return out

    def title(self):
        """A label for tables: the label, the instances, the segments and each field."""
        t = self.label if self.instances is None else f"{self.label} x{self.instances}"
        if self.segments > 1:
            t += f" seg{self.segments}"
        for k, v in (("route", self.route), ("pitfall", self.pitfall), ("fence", self.fence),
                     ("commit-ms", self.commit_ms or None)):
            if v is not None:
                t += f" {k}={v}"
        return t + (" kill" if self.kill else "")


@dataclass(frozen=True)
class StockdMode:
    """One row of stockd's table of --lock modes (service/modes.c), as --list-modes prints it."""
    name: str
    kind: str  # the lock kind (lock/lock_kinds.c)
    service: str  # the kind's lock service ("zookeeper", "redis", ...), None: none


def stockd_modes(stockd):
    """The --lock modes of the stockd binary at path stockd, by name, in its table's
    order. Raises SpecError when it cannot be run or prints no table."""
    try:
        # An empty environment, so that a STOCKD_* variable of the caller cannot fail it.
        out = subprocess.run([stockd, "--list-modes"], env={}, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        raise SpecError(f"cannot read the modes of {stockd}: {e}") from None
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    if out.returncode != 0 or not rows or any(len(r) != 3 for r in rows):
        raise SpecError(f"{stockd} --list-modes printed no table of modes (exit "
                        f"{out.returncode}): {(out.stderr or out.stdout).strip()[:200]}")
    return {r[0]: StockdMode(r[0], r[1], None if r[2] == "-" else r[2]) for r in rows}


def _number(text, what, lo, hi):
    if not re.fullmatch(r"[0-9]{1,6}", text) or not lo <= int(text) <= hi:
        raise SpecError(f"{what} must be a number {lo}..{hi}, got '{text}'")
    return int(text)


def parse(text):
    """Parses one spec; raises SpecError with the reason."""
    if not text:
        raise SpecError("an empty spec")
    head, *fields = text.split(":")
    label = None
    if "=" in head.split(",")[0]:
        label, head = head.split("=", 1)
        if not _NAME.match(label):
            raise SpecError(f"label '{label}': lower-case letters, digits and '-', 1..32")
    mode, *args = head.split(",")
    if not args and mode in PRESETS:
        label = label or mode
        mode, args = PRESETS[mode]
    if not _NAME.match(mode):
        raise SpecError(f"mode '{mode}': lower-case letters, digits and '-', 1..32")
    for a in args:
        if not _ARG.match(a):
            raise SpecError(f"stockd argument '{a}': letters, digits and _.=- only")
    kw = {}
    numbers = 0
    for f in fields:
        key, eq, value = f.partition("=")
        if not eq:
            if f == "kill":
                kw["kill"] = True
            elif numbers == 0:
                kw["instances"] = _number(f, "the instances", 1, 99)
                numbers = 1
            elif numbers == 1:
                kw["segments"] = _number(f, "the segments", 1, 999)
                numbers = 2
            else:
                raise SpecError(f"'{f}': a third number (MODE:INSTANCES:SEGMENTS)")
        elif key == "route":
            if value not in ROUTES:
                raise SpecError(f"route '{value}': one of {', '.join(ROUTES)}")
            kw["route"] = value
        elif key == "pitfall":
            if not _NAME.match(value):
                raise SpecError(f"pitfall '{value}': lower-case letters, digits and '-'")
            kw["pitfall"] = value
        elif key == "fence":
            if value not in ("on", "off"):
                raise SpecError(f"fence '{value}': on or off")
            kw["fence"] = value
        elif key == "commit-ms":
            kw["commit_ms"] = _number(value, "commit-ms", 1, 9999)
        else:
            raise SpecError(f"'{f}': no such field (route=, pitfall=, fence=, commit-ms=, kill)")
    if "--segments" in args:
        i = args.index("--segments")
        if i + 1 < len(args) and "segments" not in kw:
            kw["segments"] = _number(args[i + 1], "--segments", 1, 999)
    return Spec(label=label or mode, mode=mode, args=tuple(args), **kw)


def parse_list(text):
    """Parses a space-separated list of specs (an option's value)."""
    return [parse(w) for w in text.split()]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    try:
        specs = [s for a in argv for s in parse_list(a)]
    except SpecError as e:
        print(f"run spec: {e}", file=sys.stderr)
        return 2
    for s in specs:
        print("\t".join([s.label, s.title(), s.mode, str(s.instances or 0), str(s.segments),
                         s.route or "-", str(s.commit_ms), "1" if s.kill else "0",
                         *s.stockd_args()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
