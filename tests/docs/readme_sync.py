#!/usr/bin/env python3
"""README.md and README.zh-CN.md must not drift apart: both name the two commands,
every command of scripts/ and loadtest/ (and any other repository command either
README names), and every --option of `stockd --help`; and each links to the other.

usage: readme_sync.py SRC_DIR STOCKD_BINARY
Prints one line per thing missing, naming the README that lacks it and where it was
found, and exits 1 if anything is; 0 otherwise. No servers."""
import os
import re
import subprocess
import sys

READMES = ("README.md", "README.zh-CN.md")
THE_TWO_COMMANDS = ("scripts/demo", "scripts/test")
# Paths of runnable things inside the repository, as a README names them.
COMMAND_RE = re.compile(r"(?<![\w/.-])((?:scripts|loadtest|lock/bench|docker/podman|\.ci)/[\w.-]*\w)")


def option_re(opt):
    # A whole option: --lock must not match inside --lock-timeout-ms.
    return re.compile(r"(?<![\w-])" + re.escape(opt) + r"(?![\w-])")


def main():
    src, stockd = sys.argv[1], sys.argv[2]
    text = {}
    for name in READMES:
        path = os.path.join(src, name)
        if not os.path.exists(path):
            print(f"FAIL: {name} does not exist")
            return 1
        with open(path, encoding="utf-8") as f:
            text[name] = f.read()

    # stockd's options, from the binary itself, with an empty environment so that a
    # STOCKD_* variable of the caller cannot make --help fail.
    help_text = subprocess.run([stockd, "--help"], env={}, capture_output=True, text=True,
                               check=True).stdout
    options = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", help_text)))
    if len(options) < 20:
        print(f"FAIL: stockd --help named only {len(options)} options: {options}")
        return 1

    # The commands: the two, every executable of scripts/ and loadtest/, and whatever
    # repository command either README names.
    commands = set(THE_TWO_COMMANDS)
    for folder in ("scripts", "loadtest"):
        for entry in os.listdir(os.path.join(src, folder)):
            path = os.path.join(src, folder, entry)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                commands.add(f"{folder}/{entry}")
    named_in = {}
    for name in READMES:
        for cmd in COMMAND_RE.findall(text[name]):
            named_in.setdefault(cmd, []).append(name)
            commands.add(cmd)

    problems = []
    for name in READMES:
        other = READMES[1 - READMES.index(name)]
        if other not in text[name]:
            problems.append(f"{name} does not link to {other}")
        for cmd in sorted(commands):
            if not option_re(cmd).search(text[name]):
                if cmd in THE_TWO_COMMANDS:
                    why = "one of the two commands"
                elif cmd in named_in:
                    why = f"named in {', '.join(sorted(set(named_in[cmd])))}"
                else:
                    why = "an executable in the repository, named in neither README"
                problems.append(f"{name} does not name the command {cmd} ({why})")
        for opt in options:
            if not option_re(opt).search(text[name]):
                has = other if option_re(opt).search(text[other]) else "neither README"
                problems.append(f"{name} does not name the stockd option {opt} "
                                f"(stockd --help lists it; {has} names it)")
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        print(f"readme_sync: {len(problems)} problem(s): keep {READMES[0]} and {READMES[1]} "
              "naming the same commands and stockd options")
        return 1
    print(f"ok: both READMEs link to each other and name the same {len(commands)} commands "
          f"and all {len(options)} options of stockd --help")
    return 0


if __name__ == "__main__":
    sys.exit(main())
