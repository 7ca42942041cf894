#!/usr/bin/env python3
"""The checks that keep the documentation true: README.md, README.zh-CN.md and docs/.

usage: docs_check.py CHECK SRC_DIR [ARG]
  tests    SRC_DIR BUILD_DIR [CTEST]  every test name the docs cite is a test of `ctest -N`
  links    SRC_DIR             every relative link resolves (file, and #anchor in a .md)
  readmes  SRC_DIR             both READMEs carry the same commands, options and numbers
                               (each number as many times)
  options  SRC_DIR STOCKD      every option of `stockd --help` is in docs/operating.md,
                               each with a table row in the group --help puts it in
                               (operator options, or the demonstration switches)
  writer_options SRC_DIR WRITER  every option of `stock-writer --help` has a table row in
                               docs/operating.md's section on the order writer, and no
                               other option has one there
  modes    SRC_DIR STOCKD      each README's table of lock modes has one row per mode of
                               `stockd --list-modes`, and no other; docs/operating.md's
                               row of --lock lists them in its order
  headline SRC_DIR             each README's table of headline ratios is what
                               docs/report/bench.json's medians give, row by row
  scale    SRC_DIR             docs/benchmarks.md's scale-out curve is the table
                               lab/report.py renders from docs/report/scale/scale.json,
                               line for line, with that run's date, commit and
                               command
  names    SRC_DIR BUILD_DIR [CTEST]  every name of `ctest -N` is written out in a file
                               of tests/ (as a word, no hyphen), as grep finds it
  labels   SRC_DIR BUILD_DIR [CTEST]  docs/testing.md's list of labels is
                               `ctest --print-labels`'s

Each prints one line per problem, naming the file and what is wrong, and exits 1 if
there is any; 0 otherwise. No servers.

How a test is recognised: a `code span` that is one word of lower-case letters, digits,
'_' and '-', with at least one '_', optionally with brace forms (a_{b,c}_d, expanded
first) or a trailing '*' (a prefix). Such a word is a test citation unless it is a word
of the code (a function, a metric, a setting: any identifier in the repository's source
outside the docs and the test declarations). So a cited test that does not exist, and
is no word of the code either, fails the check."""
import collections
import glob
import itertools
import json
import os
import re
import statistics
import subprocess
import sys

READMES = ("README.md", "README.zh-CN.md")
THE_TWO_COMMANDS = ("scripts/demo", "scripts/test")
# Runnable things inside the repository, as the READMEs name them.
COMMAND_RE = re.compile(r"(?<![\w/.-])((?:scripts|loadtest|lock/bench|docker/podman|\.ci)/[\w.-]*\w)")
OPTION_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Numbers as the READMEs write them: 2.44, 23300, 2026 (a date is three numbers).
NUMBER_RE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
CODE_SPAN_RE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
TEST_WORD_RE = re.compile(r"^[a-z][a-z0-9_-]*(?:\{[a-z0-9_,-]+\}[a-z0-9_-]*)*\*?$")
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# Where the words of the code come from: everything but the docs and tests/ (which
# declares the tests: a name built there must be found by ctest, not by grep), except
# tests/support and the helpers every test uses, which are code that the docs describe.
CODE_DIRS = ("service", "lock", "db", "writer", "web", "loadtest", "lab", "scripts", "sql", "monitoring",
             "nginx", "packaging", "cmake", "docker", "tests/support", ".ci")
CODE_FILES = ("CMakeLists.txt", "Dockerfile", "docker-compose.yml", "tests/lib.sh",
              "tests/assert.sh", "tests/check.h")


def doc_files(src):
    """The documents a reader reads: both READMEs and docs/ (the generated reports of
    docs/report/ included, for their links)."""
    files = [os.path.join(src, r) for r in READMES]
    files += sorted(glob.glob(os.path.join(src, "docs", "**", "*.md"), recursive=True))
    return files


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def rel(src, path):
    return os.path.relpath(path, src)


def expand(word):
    """a_{b,c}_d -> [a_b_d, a_c_d]; several brace forms multiply."""
    parts = re.split(r"(\{[^}]*\})", word)
    choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def code_words(src):
    words = set()
    paths = [os.path.join(src, f) for f in CODE_FILES]
    for d in CODE_DIRS:
        for root, _, names in os.walk(os.path.join(src, d)):
            paths += [os.path.join(root, n) for n in names]
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                words.update(re.findall(r"[A-Za-z0-9_-]+", f.read()))
        except OSError:
            continue
    return words


def check_tests(src, build, ctest):
    tests = set(ctest_names(build, ctest))
    if len(tests) < 50:
        return [f"ctest -N in {build} listed only {len(tests)} tests"]
    words = code_words(src)
    # A file of CODE_FILES that is gone would drop its words silently.
    problems = [f"docs_check.py's CODE_FILES names {f}, which is gone" for f in CODE_FILES
                if not os.path.isfile(os.path.join(src, f))]
    cited = 0
    for path in doc_files(src):
        if os.sep + "report" + os.sep in path:
            continue  # generated, and names no tests
        for n, line in enumerate(read(path).splitlines(), 1):
            for span in CODE_SPAN_RE.findall(line):
                if "_" not in span or not TEST_WORD_RE.match(span):
                    continue
                for name in expand(span):
                    if name.endswith("*"):
                        if any(t.startswith(name[:-1]) for t in tests):
                            cited += 1
                        else:
                            problems.append(f"{rel(src, path)}:{n}: `{span}`: no test starts "
                                            f"with {name[:-1]}")
                    elif name in tests:
                        cited += 1
                    elif name not in words or "{" in span:
                        # A brace form is always a test citation: every name it makes
                        # must be a test.
                        problems.append(f"{rel(src, path)}:{n}: `{span}`: {name} is no test "
                                        "of ctest -N (and no word of the code)")
    if cited < 50:
        problems.append(f"the docs cite only {cited} tests; the guarantees table alone cites more")
    return problems


def ctest_names(build, ctest):
    out = subprocess.run([ctest, "-N"], cwd=build, capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"^\s*Test\s+#\d+:\s+(\S+)", out, re.M)


def check_names(src, build, ctest):
    """A name a failure prints is found with grep -r in tests/: each is written out, as
    a word, in some file there (its tests.cmake row)."""
    names = ctest_names(build, ctest)
    if len(names) < 50:
        return [f"ctest -N in {build} listed only {len(names)} tests"]
    text = []
    for root, dirs, files in os.walk(os.path.join(src, "tests")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for n in files:
            with open(os.path.join(root, n), encoding="utf-8", errors="replace") as f:
                text.append(f.read())
    words = set(re.findall(r"[A-Za-z0-9_]+", "\n".join(text)))
    problems = []
    for name in names:
        if "-" in name:
            problems.append(f"test {name}: a hyphen in its name")
        elif name not in words:
            problems.append(f"test {name}: written nowhere in tests/ (a name made by a loop "
                            "or from parts?)")
    return problems


def check_labels(src, build, ctest):
    """docs/testing.md's paragraph "Labels (`ctest --print-labels`): `a`, `b`, ... ."
    names every label of the build, and no other."""
    out = subprocess.run([ctest, "--print-labels"], cwd=build, capture_output=True,
                         text=True, check=True).stdout
    have = set(re.findall(r"^\s+(\S+)\s*$", out.split("All Labels:", 1)[-1], re.M))
    doc = read(os.path.join(src, "docs", "testing.md"))
    m = re.search(r"^Labels \(`ctest --print-labels`\):((?:[^.`]|`[^`]*`)*)\.", doc, re.M)
    if not m:
        return ["docs/testing.md: no paragraph \"Labels (`ctest --print-labels`): ... .\""]
    listed = CODE_SPAN_RE.findall(m.group(1))
    problems = [f"docs/testing.md lists the label {lab} twice"
                for lab, k in collections.Counter(listed).items() if k > 1]
    problems += [f"docs/testing.md lists the label {lab}, which no test has"
                 for lab in sorted(set(listed) - have)]
    problems += [f"docs/testing.md does not list the label {lab}"
                 for lab in sorted(have - set(listed))]
    return problems


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation gone, spaces to '-'."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    seen, result = {}, set()
    in_code = False
    for line in read(path).splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m and not in_code:
            base = slug(m.group(1))
            k = seen.get(base, 0)
            seen[base] = k + 1
            result.add(base if k == 0 else f"{base}-{k}")
    return result


def check_links(src):
    problems, checked = [], 0
    for path in doc_files(src):
        for n, line in enumerate(read(path).splitlines(), 1):
            for target in LINK_RE.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition("#")
                dest = path if not file_part else os.path.normpath(
                    os.path.join(os.path.dirname(path), file_part))
                checked += 1
                if not os.path.exists(dest):
                    problems.append(f"{rel(src, path)}:{n}: link {target}: "
                                    f"{rel(src, dest)} does not exist")
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    problems.append(f"{rel(src, path)}:{n}: link {target}: no heading "
                                    f"#{anchor} in {rel(src, dest)}")
    if checked < 20:
        problems.append(f"only {checked} relative links found: the READMEs index docs/")
    return problems


def check_readmes(src):
    text = {r: read(os.path.join(src, r)) for r in READMES}
    problems = []
    for name in READMES:
        other = READMES[1 - READMES.index(name)]
        if other not in text[name]:
            problems.append(f"{name} does not link to {other}")
        for cmd in THE_TWO_COMMANDS:
            if cmd not in text[name]:
                problems.append(f"{name} does not name {cmd}, one of the two commands")
    # Commands and options: the same set. Numbers: the same multiset, so that a number
    # changed in one README is caught even when it appears elsewhere in the other.
    kinds = (("command", COMMAND_RE, set), ("option", OPTION_RE, set),
             ("number", NUMBER_RE, collections.Counter))
    for kind, regex, collect in kinds:
        found = {r: collect(regex.findall(text[r])) for r in READMES}
        for name in READMES:
            other = READMES[1 - READMES.index(name)]
            for item in sorted(found[other] - found[name]):
                times = ""
                if collect is collections.Counter:
                    times = f" ({found[other][item]} times there, {found[name][item]} here)"
                problems.append(f"{name} lacks the {kind} {item} that {other} carries{times}")
    return problems


DEMO_HEADING_HELP = "demonstration switches"  # --help's heading of the demo group
DEMO_HEADING_DOC = "### Demonstration switches"  # operating.md's section for it
ROW_OPTION_RE = re.compile(r"^\|\s*`(--[a-z][a-z0-9-]*)")


def help_groups(help_text):
    """The options --help defines (a line that starts with one), split into the operator
    options and the demonstration switches by the demo group's heading."""
    groups, current = {"operator": [], "demo": []}, "operator"
    for line in help_text.splitlines():
        if line.lower().startswith(DEMO_HEADING_HELP):
            current = "demo"
        m = re.match(r"^  (--[a-z][a-z0-9-]*)", line)
        if m and m.group(1) not in ("--help", "--version"):
            groups[current].append(m.group(1))
    return groups


def option_rows(text):
    """The options that begin a table row of operating.md's "## Options", split into those
    of its demonstration section and the rest."""
    rows, current, in_options = {"operator": set(), "demo": set()}, "operator", False
    for line in text.splitlines():
        if line.startswith("## "):
            in_options = line.strip() == "## Options"
            current = "operator"
        elif line.startswith("### "):
            current = "demo" if line.strip() == DEMO_HEADING_DOC else "other"
        m = ROW_OPTION_RE.match(line)
        if in_options and m and current in rows:
            rows[current].add(m.group(1))
    return rows


def check_options(src, stockd):
    # An empty environment, so that a STOCKD_* variable of the caller cannot fail --help.
    help_text = subprocess.run([stockd, "--help"], env={}, capture_output=True, text=True,
                               check=True).stdout
    options = sorted(set(OPTION_RE.findall(help_text)))
    if len(options) < 20:
        return [f"stockd --help named only {len(options)} options: {options}"]
    doc = os.path.join(src, "docs", "operating.md")
    text = read(doc)
    problems = [f"{rel(src, doc)} does not document {opt} (stockd --help lists it)"
                for opt in options
                if not re.search(r"(?<![\w-])" + re.escape(opt) + r"(?![\w-])", text)]
    groups, rows = help_groups(help_text), option_rows(text)
    if not groups["demo"]:
        problems.append(f"stockd --help has no '{DEMO_HEADING_HELP}' group")
    where = {"operator": "an operator option's table of ## Options",
             "demo": f"the tables under {DEMO_HEADING_DOC}"}
    for group, opts in groups.items():
        for opt in opts:
            if opt not in rows[group]:
                problems.append(f"{rel(src, doc)}: {opt} has no row in {where[group]} "
                                f"(stockd --help lists it as a {group} option)")
    return problems


WRITER_HEADING_DOC = "## The order writer (`stock-writer`)"


def check_writer_options(src, writer):
    help_text = subprocess.run([writer, "--help"], env={}, capture_output=True, text=True,
                               check=True).stdout
    options = set(OPTION_RE.findall(help_text)) - {"--help", "--version"}
    doc = os.path.join(src, "docs", "operating.md")
    rows, inside = set(), False
    for line in read(doc).splitlines():
        if line.startswith("## "):
            inside = line.strip() == WRITER_HEADING_DOC
        m = ROW_OPTION_RE.match(line)
        if inside and m:
            rows.add(m.group(1))
    if len(options) < 5:
        return [f"stock-writer --help named only {len(options)} options: {sorted(options)}"]
    return ([f"{rel(src, doc)}: {o} has no row under {WRITER_HEADING_DOC} (stock-writer --help "
             f"lists it)" for o in sorted(options - rows)]
            + [f"{rel(src, doc)}: {o} has a row under {WRITER_HEADING_DOC} but stock-writer "
               f"--help does not list it" for o in sorted(rows - options)])


MODE_ROW_RE = re.compile(r"^\|\s*`([a-z][a-z0-9-]*)`\s*\|")


def check_modes(src, stockd):
    listing = subprocess.run([stockd, "--list-modes"], env={}, capture_output=True, text=True,
                             check=True).stdout
    modes = [line.split("\t")[0] for line in listing.splitlines() if line]
    if len(modes) < 5:
        return [f"stockd --list-modes listed only {modes}"]
    problems = []
    for name in READMES:
        rows = [m.group(1) for m in map(MODE_ROW_RE.match, read(os.path.join(src, name)).splitlines())
                if m]
        for mode in modes:
            if rows.count(mode) != 1:
                problems.append(f"{name}: the mode {mode} has {rows.count(mode)} rows in the "
                                f"table of modes (stockd --list-modes lists it)")
        for row in sorted(set(rows) - set(modes)):
            problems.append(f"{name}: a row of the table of modes names {row}, which "
                            f"stockd --list-modes does not list")
    # The options table's row of --lock names the modes in the same order.
    rows = [line for line in read(os.path.join(src, "docs", "operating.md")).splitlines()
            if line.startswith("| `--lock MODE` |")]
    listed = [w.strip() for w in rows[0].split("|")[3].split("(")[0].split(",")] if rows else []
    if listed != modes:
        problems.append(f"docs/operating.md: the row of --lock MODE lists {listed}; "
                        f"stockd --list-modes lists {modes}")
    return problems


HEADLINE_ROW_RE = re.compile(
    r"^\|\s*(hot|spread|热点|分散)\s*\|\s*(round-robin|affinity)\s*\|\s*(\w+)\s*\|"
    r"\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|")
HEADLINE_LOAD = {"hot": "hot", "热点": "hot", "spread": "spread", "分散": "spread"}
HEADLINE_PAIRS = (("zk", "atomic"), ("zk", "for-update"), ("zk-x16", "atomic"),
                  ("zk-x16", "for-update"))


def check_headline(src):
    """The READMEs' ratios are quotients of the medians in bench.json (each cell the
    median of its runs, as bench.md prints them), rounded to two places."""
    bench = json.loads(read(os.path.join(src, "docs", "report", "bench.json")))["bench"]
    runs = collections.defaultdict(list)
    for r in bench["rows"]:
        if r["row"] != "ceiling" and not r.get("ensemble"):
            runs[(r["spec"], r["route"], r["kind"], r["client"])].append(r["rps"])
    median = {k: statistics.median(v) for k, v in runs.items()}
    problems = []
    for name in READMES:
        rows = [m for m in map(HEADLINE_ROW_RE.match, read(os.path.join(src, name)).splitlines())
                if m]
        if len(rows) != 8:
            problems.append(f"{name}: {len(rows)} rows in the headline table, expected 8")
        for m in rows:
            load, route, client = HEADLINE_LOAD[m.group(1)], m.group(2), m.group(3)
            for (a, b), cell in zip(HEADLINE_PAIRS, m.groups()[3:]):
                try:
                    want = "%.2f" % (median[(a, route, load, client)] /
                                     median[(b, route, load, client)])
                except KeyError:
                    want = "no such cell in bench.json"
                if cell != want:
                    problems.append(f"{name}: {load} {route} {client} {a} / {b} says {cell}, "
                                    f"bench.json gives {want}")
    return problems


SCALE_ROW_RE = re.compile(r"^\| (hot \(ab\)|spread \(wrk\)) \|")


# The sweeps docs/benchmarks.md publishes: the scale-out curve, and owner routing's
# (its own run, with route owner beside round-robin and affinity).
SCALE_RUNS = ("scale", "scale-owner")


def check_scale(src):
    """The curve lines of docs/benchmarks.md are scale_curve_lines() of the published
    sweeps' scale.json (no line missing, none of another run), and the page names each
    run's date and command, so the numbers in the docs are the ones the command wrote."""
    sys.path.insert(0, src)
    from lab import report  # noqa: E402 - the renderer of the repository checked
    text = read(os.path.join(src, "docs", "benchmarks.md"))
    lines = text.splitlines()
    problems, every = [], set()
    for run in SCALE_RUNS:
        path = os.path.join("docs", "report", run, "scale.json")
        if run != "scale" and not os.path.exists(os.path.join(src, path)):
            continue
        doc = json.loads(read(os.path.join(src, path)))
        want = report.scale_curve_lines(doc)
        every.update(want)
        problems += [f"docs/benchmarks.md: no line '{l}' ({path} gives it)" for l in want
                     if l not in lines]
        facts = [("date", doc["date"][:10]), ("command", doc["command"])]
        facts += [("commit", doc["source"]["commit"])] if doc.get("source") else []
        for what, fact in facts:
            if fact not in text:
                problems.append(f"docs/benchmarks.md: does not give the {what} of {path}: {fact}")
    problems += [f"docs/benchmarks.md: the curve line '{l}' is not of a published sweep "
                 f"({', '.join(SCALE_RUNS)})" for l in lines if SCALE_ROW_RE.match(l) and l not in every]
    return problems


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    check, src = sys.argv[1], sys.argv[2]
    if check == "tests":
        problems = check_tests(src, sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "ctest")
    elif check == "links":
        problems = check_links(src)
    elif check == "readmes":
        problems = check_readmes(src)
    elif check == "options":
        problems = check_options(src, sys.argv[3])
    elif check == "writer_options":
        problems = check_writer_options(src, sys.argv[3])
    elif check == "modes":
        problems = check_modes(src, sys.argv[3])
    elif check == "headline":
        problems = check_headline(src)
    elif check == "scale":
        problems = check_scale(src)
    elif check in ("names", "labels"):
        run = check_names if check == "names" else check_labels
        problems = run(src, sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "ctest")
    else:
        print(__doc__)
        return 2
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        print(f"docs_check {check}: {len(problems)} problem(s)")
        return 1
    print(f"ok: docs_check {check}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
