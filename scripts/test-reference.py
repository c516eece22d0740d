#!/usr/bin/env python3
"""Keeps docs/reference.md true, against the server LEAF_ID_URL
names (scripts/test-examples.sh starts one), in a fresh database with
leaf_id:
  - every function, table and view of the extension (pg_depend) and every
    leaf_id.* setting (pg_settings) has its entry: a function or relation is
    named in backquotes, a setting is a row of the settings table;
  - every leaf_* name in backquotes exists (a function, a relation, a setting;
    `table.column` names the table);
  - the columns tables of the two status views name exactly their columns;
  - every SQLSTATE that src/ and sql/ raise is in docs/reference.md's errors table
    (names mapped through the server's errcodes.txt, ERRCODES_TXT).
Exits 1 with the list of what is wrong.
"""
import glob
import os
import re
import subprocess
import sys
from urllib.parse import urlparse, urlunparse

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
URL = urlparse(os.environ["LEAF_ID_URL"])
DB = "reference_check"
# the schema of the extension's tables, named as such in the docs
TABLES_SCHEMA = "leaf_id_catalog"
# codes the source names without raising them
NOT_RAISED = {"08000": "a class test (is_connection_exception), not raised"}


def psql(db, sql):
    r = subprocess.run(["psql", "-X", "-qAt", "-v", "ON_ERROR_STOP=1", "-d", urlunparse(URL._replace(path="/" + db))],
                       input=sql, text=True, capture_output=True, timeout=120)
    if r.returncode != 0:
        sys.exit(f"test-reference: psql failed: {r.stderr}")
    return [l for l in r.stdout.splitlines() if l]


def main():
    psql("postgres", f"DROP DATABASE IF EXISTS {DB} WITH (FORCE); CREATE DATABASE {DB};")
    psql(DB, "CREATE EXTENSION leaf_id;")
    def members(catalog, name_col):
        return set(psql(DB, f"SELECT DISTINCT o.{name_col} FROM {catalog} o "
                            f"JOIN pg_depend d ON d.objid = o.oid AND d.classid = '{catalog}'::regclass "
                            "AND d.deptype = 'e' JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leaf_id'"))
    functions = members("pg_proc", "proname")
    relations = members("pg_class", "relname")
    settings = set(psql(DB, "SELECT name FROM pg_settings WHERE name LIKE 'leaf_id.%'"))
    columns = {v: psql(DB, f"SELECT attname FROM pg_attribute WHERE attrelid = '{v}'::regclass "
                           "AND attnum > 0 AND NOT attisdropped ORDER BY attnum")
               for v in ("leaf_segment_status", "leaf_snowflake_status", "leaf_id_worker_status")}
    psql("postgres", f"DROP DATABASE {DB} WITH (FORCE);")

    text = open(os.path.join(ROOT, "docs", "reference.md"), encoding="utf-8").read()
    quoted = set(re.findall(r"`([a-z_][a-z0-9_.]*)`", text))
    setting_rows = set(re.findall(r"^\| `(leaf_id\.[a-z_]+)` \|", text, re.M))
    wrong = []
    for f in sorted(functions):
        if f not in quoted:
            wrong.append(f"function {f} has no entry")
    for r in sorted(relations):
        if r not in quoted:
            wrong.append(f"table or view {r} has no entry")
    for s in sorted(settings):
        if s not in setting_rows:
            wrong.append(f"setting {s} is not a row of the settings table")
    for name in sorted(n for n in quoted if n.startswith("leaf_")):
        # the tables' schema (catalog 0.7.0 on), alone or naming a table
        if name == TABLES_SCHEMA:
            continue
        name = name.removeprefix(TABLES_SCHEMA + ".")
        if name.startswith("leaf_id."):
            if name not in settings:
                wrong.append(f"`{name}` is not a setting")
        elif name.split(".")[0] not in functions | relations:
            wrong.append(f"`{name}` is neither a function nor a table or view of the extension")
    for view, cols in columns.items():
        section = text[text.index(f"### `{view}`"):]
        section = section[: section.index("\n### ")]
        documented = set()
        for row in re.findall(r"^\| (`[^|]+`) \|", section, re.M):
            documented |= set(re.findall(r"`([a-z0-9_]+)`", row))
        for c in cols:
            if c not in documented:
                wrong.append(f"column {view}.{c} is not in its columns table")
        for c in sorted(documented - set(cols)):
            wrong.append(f"{view} has no column {c}, which its columns table names")

    # SQLSTATEs raised against docs/reference.md's errors table
    names = {}
    for line in open(os.environ["ERRCODES_TXT"], encoding="utf-8"):
        m = re.match(r"^([0-9A-Z]{5})\s+[EWS]\s+(ERRCODE_\w+)", line)
        if m:
            names[m.group(2)] = m.group(1)
    raised = {}
    for path in glob.glob(os.path.join(ROOT, "src", "**", "*.rs"), recursive=True):
        if path.endswith("pg_tests.rs"):
            continue
        for name in re.findall(r"\bERRCODE_[A-Z0-9_]+", open(path, encoding="utf-8").read()):
            if name not in names:
                wrong.append(f"{os.path.relpath(path, ROOT)}: {name} is not in errcodes.txt")
            else:
                raised.setdefault(names[name], os.path.relpath(path, ROOT))
    for path in ("sql/finish.sql", "sql/schema.sql"):
        for code in re.findall(r"ERRCODE\s*=\s*'([0-9A-Z]{5})'", open(os.path.join(ROOT, path), encoding="utf-8").read()):
            raised.setdefault(code, path)
    reference = open(os.path.join(ROOT, "docs", "reference.md"), encoding="utf-8").read()
    errors = reference[reference.index("\n## Errors\n"):]
    end = errors.find("\n## ", 1)
    errors = errors if end < 0 else errors[:end]
    listed = set(re.findall(r"`([0-9A-Z]{5})`", errors))
    for code, where in sorted(raised.items()):
        if code not in listed and code not in NOT_RAISED:
            wrong.append(f"SQLSTATE {code} (raised in {where}) is not in docs/reference.md's errors table")

    if wrong:
        print("test-reference: docs/reference.md or the errors table is out of date:")
        for w in wrong:
            print("  " + w)
        return 1
    print(f"test-reference: {len(functions)} functions, {len(relations)} tables and views, {len(settings)} settings, "
          f"{sum(len(c) for c in columns.values())} status columns and {len(raised)} SQLSTATEs are documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
