#!/usr/bin/env python3
"""No bare comparison operator in what leaf_id's install and update scripts
run with their own search_path (docs/privileges.md; tests/tap/079).

An extension script runs with search_path = the extension's schema, which a
database owner may own (public, from PostgreSQL 15 on). pg_catalog is
searched first, so an operator whose two sides have one type is always
pg_catalog's; but one comparing two types (oid = integer, oid = regclass)
has no exact match there, and an exact one planted in the schema wins over
pg_catalog's through an implicit cast, run as the installing superuser.
Nor does one whose two sides have one type without an operator of its own
(regclass, regtype, varchar: they go through oid's and text's operators).
Rather than telling types apart, every comparison the scripts run (top
level, DO blocks, SQL-standard and SQL bodies, views) must be written
OPERATOR(pg_catalog.=) (lists: OPERATOR(pg_catalog.=) ANY (ARRAY[...]::T[])),
the constructs that compare implicitly (IN, BETWEEN, CASE x WHEN, NULLIF,
LIKE, ILIKE, SIMILAR TO, JOIN ... USING, NATURAL JOIN) and the other bare
operators (||, ~, @>, <@, &&) are refused, and IS [NOT] DISTINCT FROM must
cast both sides to one pg_catalog type that has its own operators (oid,
int4, int8, text, bool). Exempt: function bodies whose header sets
`search_path = pg_catalog, pg_temp` and nothing more (resolved when they
run, under that path), CHECK constraints (their types match pg_catalog's
operators exactly), and the `=` of SET, USING and named options.

Prints each bare operator with its file and line, exits 1 if there is any.
Usage: scripts/check-sql-operators.py [FILE...]   (default: sql/*.sql)
"""
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def blank(text):
    """The text with comments and string literals blanked (offsets kept)."""
    out = list(text)
    i, n = 0, len(text)

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif text.startswith("--", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text[i] == "'":
            j = i + 1
            while j < n:
                if text[j] == "'" and j + 1 < n and text[j + 1] == "'":
                    j += 2
                    continue
                if text[j] == "'":
                    break
                j += 1
            wipe(i + 1, j)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def safe_bodies(s):
    """Spans of function bodies that run under their own pg_catalog path: the
    header of the body (from its CREATE FUNCTION, none in between) sets
    exactly `search_path = pg_catalog, pg_temp`."""
    spans = []
    for m in re.finditer(r"(\$[a-z_]*\$)(.*?)\1", s, re.S):
        if not re.search(r"\bAS\s*$", s[:m.start()]):
            continue
        start = s.rfind("CREATE ", 0, m.start())
        header = s[start:m.start()]
        if (re.match(r"CREATE (?:OR REPLACE )?FUNCTION", header)
                and ";" not in header
                and re.search(r"SET search_path = pg_catalog, pg_temp(?!\s*,)", header)):
            spans.append((m.start(2), m.end(2)))
    return spans


def check(path):
    text = open(path, encoding="utf-8").read()
    s = blank(text)
    spans = safe_bodies(s)
    found = []

    def report(pos, what):
        if any(a <= pos < b for a, b in spans):
            return
        line_no = text.count("\n", 0, pos) + 1
        line = text.splitlines()[line_no - 1]
        # (a table's CHECK constraint, read with comments blanked)
        if re.search(r"\bCHECK \(", s.splitlines()[line_no - 1]):
            return
        found.append(f"{os.path.relpath(path, ROOT)}:{line_no}: {what}: {line.strip()[:120]}")

    for m in re.finditer(r"(?<![<>=!:~|&#@*+\-/%^])(=|<>|!=|<=|>=|<|>)(?![=>~*])", s):
        before = s[max(0, m.start() - 60):m.start()]
        if re.search(r"OPERATOR\(pg_catalog\.$", before):
            continue
        # assignments and options, not operators
        if re.search(r"(?i)\b(SET\s+[\w.]+|USING\s+\w+|,\s*(HINT|DETAIL|MESSAGE|ERRCODE))\s*$", before):
            continue
        report(m.start(), f"bare {m.group(1)}")
    for m in re.finditer(r"(?i)\bIS\s+(NOT\s+)?DISTINCT\s+FROM\b", s):
        before = s[max(0, m.start() - 200):m.start()]
        after = s[m.end():m.end() + 200]
        left = re.search(r"::pg_catalog\.(oid|int4|int8|text|bool)\s*$", before)
        right = re.match(r"\s*\S+?::pg_catalog\.(oid|int4|int8|text|bool)\b", after)
        if not (left and right and left.group(1) == right.group(1)):
            report(m.start(), "IS DISTINCT FROM without both sides cast to one pg_catalog type with operators")
    implicit = (r"(?i)\b(?:NOT\s+)?IN\s*\(|\bBETWEEN\b|\bCASE\s+(?!WHEN\b)\S|\bNULLIF\s*\(|\b(?:LIKE|ILIKE)\b"
                r"|\bSIMILAR\s+TO\b|\bUSING\s*\(|\bNATURAL\b")
    for m in re.finditer(implicit, s):
        report(m.start(), f"{m.group(0).strip()} compares implicitly")
    for m in re.finditer(r"(?<![\w(.])(\|\||~|@>|<@|&&)(?![\w)])", s):
        if re.search(r"OPERATOR\(pg_catalog\.$", s[max(0, m.start() - 30):m.start()]):
            continue
        report(m.start(), f"bare {m.group(1)}")
    return found


def main():
    files = sys.argv[1:] or sorted(glob.glob(os.path.join(ROOT, "sql", "*.sql")))
    found = [f for path in files for f in check(path)]
    for f in found:
        print(f)
    if found:
        print(f"check-sql-operators: {len(found)} bare operator(s): write OPERATOR(pg_catalog.<op>)", file=sys.stderr)
        return 1
    print(f"check-sql-operators: {len(files)} scripts, no bare comparison operator outside pg_catalog-path bodies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
