#!/usr/bin/python3
"""sql_scan.py: fails if C sources build SQL text at run time instead of sending fixed
statements with bound parameters.

    sql_scan.py DIR_OR_FILE...

Three rules, applied to each .c file with comments removed (string literals are kept,
adjacent literals joined):
  format  a call whose string literals hold a conversion (%s, %d, ...) and an SQL
          statement shape (INSERT INTO t (.. / VALUES, UPDATE t SET c =, WHERE c =,
          DROP TABLE, SET SESSION, ... in any case; SELECT .. FROM t, DELETE FROM t in
          upper case only, as English uses them too): SQL made by printf.
          Error messages pass: "cannot read the stock: %s" has no statement shape, and a
          statement's name passed as an argument ("%s: %s", "UPDATE product") is not in
          the format.
  concat  strcat/strncat/strcpy/strncpy/stpcpy/memcpy with a literal of SQL shape:
          SQL assembled piece by piece.
  sink    mysql_query, mysql_real_query, mysql_send_query and mysql_stmt_prepare must get
          a string literal or a `static const` array of this file (an element of one is
          fine): never a buffer that was filled at run time. stockdb_conn_prepare (which
          prepares a table of statements for stockdb and dblock) is a sink too: its
          callers must hand it such an array, and inside its own definition its SQL
          parameter may go on to mysql_stmt_prepare.
Prints each finding as FILE:LINE: RULE: text, and exits 1 if there is any."""
import os
import re
import sys

# Statement shapes that English text does not take, in any case...
SQL_ANY_CASE = re.compile(
    r"""\binsert\s+into\s+[`\w.]+\s*(\(|values\b|select\b|set\b)
      | \bupdate\s+[`\w.]+\s+set\s+[`\w.]+\s*=
      | \bwhere\s+[`\w.]+\s*(=|<|>|!=|\bin\s*\(|\blike\b|\bis\s+(not\s+)?null\b)
      | \b(drop|create|alter|truncate)\s+(table|database|user|index|view)\b
      | \bgrant\s+[\w, ]+\s+on\s+[`\w.*]+\s+to\b
      | \bset\s+(session|global|names)\b
      | \bcall\s+\w+\s*\(""",
    re.IGNORECASE | re.VERBOSE,
)
# ... and shapes that it does ("select a mode from the list"), so only in SQL's upper case.
SQL_UPPER = re.compile(r"\bSELECT\s.*?\bFROM\s+[`\w.]+|\bDELETE\s+FROM\s+[`\w.]+|\bREPLACE\s+INTO\b")


def sql_shape(text):
    return SQL_ANY_CASE.search(text) or SQL_UPPER.search(text)


CONVERSION = re.compile(r"%[-+ #0]*(\d+|\*)?(\.(\d+|\*))?(hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGaAcspn]")
CONCAT_FUNCS = {"strcat", "strncat", "strcpy", "strncpy", "stpcpy", "stpncpy", "memcpy", "strlcat"}
SINKS = {
    "mysql_query": 1,
    "mysql_real_query": 1,
    "mysql_send_query": 1,
    "mysql_stmt_prepare": 1,
    "stockdb_conn_prepare": 2,
}
# Sinks that are functions of ours, which forward their SQL argument to a sink.
FORWARDING_SINKS = {"stockdb_conn_prepare"}


def forwarding_bodies(src):
    """(name position, start, end, parameter) of each definition of a forwarding sink in
    src: within its body, the parameter that its callers must fill with constants counts
    as constant."""
    spans = []
    for name in FORWARDING_SINKS:
        for m in re.finditer(r"\b" + name + r"\s*\(", src):
            _, params = call_args(src, m.end() - 1)
            brace = re.match(r"\s*\{", src[m.end() - 1 + len(_) + 2 :])
            if not brace or len(params) <= SINKS[name]:
                continue  # a call or a declaration, not the definition
            param = re.search(r"(\w+)\s*$", params[SINKS[name]])
            start = m.end() - 1 + len(_) + 2 + brace.end() - 1
            body, _args = call_args(src, start)
            spans.append((m.start(), start, start + len(body) + 1, param.group(1) if param else None))
    return spans


def strip_comments(src):
    """Removes comments, keeping string and character literals and line numbers."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i : j + 1])
            i = j + 1
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def literals(text):
    """The string literals in text, adjacent ones joined, unescaped loosely."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', text)
    return "".join(parts)


def call_args(src, open_paren):
    """The text between the parenthesis at open_paren and its match, and the split
    top-level arguments."""
    depth, i, args, start = 0, open_paren, [], open_paren + 1
    while i < len(src):
        c = src[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < len(src) and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            i = j
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(src[start:i].strip())
                return src[open_paren + 1 : i], args
        elif c == "," and depth == 1:
            args.append(src[start:i].strip())
            start = i + 1
        i += 1
    return src[open_paren + 1 :], args


def scan(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        src = strip_comments(f.read())
    findings = []
    const_arrays = set(
        re.findall(r"\bstatic\s+const\s+char\s*(?:\*\s*const\s+)?(\w+)\s*\[[^\]]*\]\s*=", src)
    )
    forwarding = forwarding_bodies(src)
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", src):
        name = m.group(1)
        if name in ("if", "while", "for", "switch", "return", "sizeof"):
            continue
        body, args = call_args(src, m.end() - 1)
        line = src.count("\n", 0, m.start()) + 1
        text = literals(body)
        if text and CONVERSION.search(text) and sql_shape(text):
            findings.append((line, "format", f"{name}(... \"{text[:80]}\" ...)"))
        if name in CONCAT_FUNCS and text and sql_shape(text):
            findings.append((line, "concat", f"{name}(... \"{text[:80]}\" ...)"))
        if any(d == m.start() for d, _a, _b, _p in forwarding):
            continue  # the definition of a forwarding sink, not a call
        if name in SINKS and len(args) > SINKS[name]:
            arg = args[SINKS[name]]
            ident = re.match(r"^(\w+)(\s*\[[^\]]*\])?$", arg)
            forwarded = ident and any(
                a <= m.start() < b and ident.group(1) == p for _d, a, b, p in forwarding
            )
            if not (arg.startswith('"') or (ident and ident.group(1) in const_arrays) or forwarded):
                findings.append((line, "sink", f"{name} gets '{arg}', not a constant statement"))
    return findings


def main():
    files = []
    for arg in sys.argv[1:]:
        if os.path.isdir(arg):
            files += sorted(os.path.join(arg, f) for f in os.listdir(arg) if f.endswith(".c"))
        else:
            files.append(arg)
    if not files:
        print("sql_scan: no C files given", file=sys.stderr)
        return 2
    bad = 0
    for path in files:
        for line, rule, text in scan(path):
            print(f"{path}:{line}: {rule}: {text}")
            bad += 1
    print(f"sql_scan: {len(files)} files, {bad} finding(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
