#!/usr/bin/env python3
"""The side-by-side benchmark's measurements and report (started by
bench/bench-compare.sh, which builds both sides and starts their servers).

Usage: bench_compare.py BASE_PORT CURRENT_PORT REPORT.md START_EPOCH

Every measurement runs on both servers in turn, BENCH_REPS times, in the
order base, current, current, base, base, ... (so that neither side always
runs first or second), and reports the medians and the ratio current / base.
nextval() and the loop floor are measured the same way on both: they run
the same PostgreSQL, so their ratios show how far apart two identical
servers measure in this run (the noise a leaf_id ratio must exceed to mean
something).
"""
import json
import os
import re
import statistics
import subprocess
import sys
import time

import benchlib
from benchlib import BENCH_TIME_FUNCTION

PGBIN = os.environ["BENCH_PGBIN"]
PG_MAJOR = int(os.environ["BENCH_PG_MAJOR"])
N = int(os.environ.get("BENCH_N") or 3_000_000)
REPS = int(os.environ.get("BENCH_REPS") or 5)
SECONDS = int(os.environ.get("BENCH_SECONDS") or 5)
CLIENTS = int(os.environ.get("BENCH_CLIENTS") or 8)
ROWS = int(os.environ.get("BENCH_INSERT_ROWS") or 1_000_000)
BATCH = 10_000
ENV = dict(os.environ)
if os.environ.get("BENCH_LD_LIBRARY_PATH"):
    ENV["LD_LIBRARY_PATH"] = os.environ["BENCH_LD_LIBRARY_PATH"]
SIDES = ["base", "current"]

# one session, N IDs in one query: key, label, expression counted
SINGLE = [
    ("floor", "loop floor: count(g)", "g"),
    ("segment", "leaf_segment_next('t')", "leaf_segment_next('t')"),
    ("opaque", "leaf_segment_next('t_opq'), opaque", "leaf_segment_next('t_opq')"),
    ("snowflake", "leaf_snowflake_next()", "leaf_snowflake_next()"),
    ("nextval_c1000", "nextval, CACHE 1000 (same on both)", "nextval('s1000')"),
]
# inserts of ROWS rows with the key's default: key, label, column definition
INSERTS = [
    ("ins_segment", "INSERT, DEFAULT leaf_segment_next('t')", "id bigint PRIMARY KEY DEFAULT leaf_segment_next('t')"),
    ("ins_identity", "INSERT, identity column (same on both)", "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"),
]
# pgbench, CLIENTS clients, BATCH IDs per transaction: key, label, expression
SCALING = [
    ("pgb_segment", f"{CLIENTS} clients, leaf_segment_next('t')", "leaf_segment_next('t')"),
    ("pgb_nextval", f"{CLIENTS} clients, nextval CACHE 1000 (same on both)", "nextval('s1000')"),
]


def psql(port, sql, db="bench"):
    try:
        return benchlib.psql(PGBIN, port, db, sql, env=ENV)
    except benchlib.BenchError as e:
        sys.exit(f"bench_compare: {e}")


def setup(port):
    psql(port, "DROP DATABASE IF EXISTS bench WITH (FORCE); CREATE DATABASE bench;", db="postgres")
    psql(port, "CREATE EXTENSION leaf_id;")
    # (the tables are in leaf_id_catalog from catalog 0.7.0, in the
    # extension's schema before: the base may be older)
    alloc = psql(port, "SELECT CASE WHEN to_regnamespace('leaf_id_catalog') IS NULL THEN 'leaf_alloc' "
                       "ELSE 'leaf_id_catalog.leaf_alloc' END;").strip()
    opaque = psql(port, "SELECT to_regproc('leaf_opaque_create') IS NOT NULL;").strip() == "t"
    if opaque:
        psql(port, f"""
SELECT leaf_opaque_create('bench_domain');
INSERT INTO {alloc} (biz_tag, step, description, opaque_domain, opaque_grant)
VALUES ('t_opq', 1000, 'benchmark tag, opaque', 'bench_domain', leaf_opaque_grant('bench_domain', 't_opq', 1));
SELECT count(leaf_segment_next('t_opq')) FROM generate_series(1, 100000);
""")
    psql(port, f"""
INSERT INTO {alloc} (biz_tag, step, description) VALUES ('t', 1000, 'benchmark tag');
CREATE SEQUENCE s1000 CACHE 1000;
""" + BENCH_TIME_FUNCTION + """
SELECT count(leaf_segment_next('t')), count(leaf_snowflake_next()) FROM generate_series(1, 100000);
""")
    return psql(port, "SELECT extversion FROM pg_extension WHERE extname = 'leaf_id';").strip(), opaque


def timed(port, q):
    out = psql(port, f"SELECT us, n FROM bench_time($q${q}$q$);").strip().split("|")
    return float(out[0]), int(out[1])


def order(rep):
    """base, current | current, base | ...: each side first in half the reps."""
    return SIDES if rep % 2 == 0 else SIDES[::-1]


def pgbench(port, expr, work):
    path = os.path.join(work, "compare.sql")
    with open(path, "w") as f:
        f.write(f"SELECT count({expr}) FROM generate_series(1, {BATCH}) g;\n")
    os.chmod(path, 0o644)
    r = subprocess.run([f"{PGBIN}/pgbench", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-n",
                        "-M", "prepared", "-c", str(CLIENTS), "-j", str(CLIENTS), "-T", str(SECONDS),
                        "-f", path, "bench"], capture_output=True, text=True, timeout=SECONDS * 20 + 300, env=ENV)
    m = re.search(r"^tps = ([\d.]+) \(without initial connection time\)", r.stdout, re.M)
    if r.returncode != 0 or not m:
        sys.exit(f"bench_compare: pgbench on port {port}: {r.stdout[-800:]} {r.stderr[-800:]}")
    return float(m.group(1)) * BATCH


def main():
    base_port, cur_port, report, start = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    ports = {"base": base_port, "current": cur_port}
    set_up = {side: setup(ports[side]) for side in SIDES}
    versions = {side: set_up[side][0] for side in SIDES}
    if not all(set_up[side][1] for side in SIDES):
        # (the base predates opaque tags)
        SINGLE[:] = [m for m in SINGLE if m[0] != "opaque"]
    work = os.path.dirname(os.path.abspath(report))
    work = os.path.join(os.path.dirname(work), "target", "bench-base")
    os.makedirs(work, exist_ok=True)
    res = {}  # key -> side -> [values]

    def add(key, side, value):
        res.setdefault(key, {"base": [], "current": []})[side].append(value)

    for rep in range(REPS):
        for key, _, expr in SINGLE:
            for side in order(rep):
                psql(ports[side], f"SELECT count({expr}) FROM generate_series(1, 1000) g;")
                us, n = timed(ports[side], f"SELECT count({expr}) FROM generate_series(1, {N}) g")
                assert n == N, (key, side, n)
                add(key, side, us * 1000 / N)  # ns per ID, loop included
        print(f"bench_compare: single-session rep {rep + 1}/{REPS} done", flush=True)
    for rep in range(REPS):
        for key, _, col in INSERTS:
            for side in order(rep):
                psql(ports[side], f"DROP TABLE IF EXISTS ins; CREATE TABLE ins ({col}, v int); CHECKPOINT;")
                us, _ = timed(ports[side], f"WITH i AS (INSERT INTO ins (v) SELECT g FROM generate_series(1, {ROWS}) g RETURNING 1) SELECT count(*) FROM i")
                add(key, side, us * 1000 / ROWS)  # ns per row
    print("bench_compare: inserts done", flush=True)
    for rep in range(REPS):
        for key, _, expr in SCALING:
            for side in order(rep):
                add(key, side, pgbench(ports[side], expr, work))  # IDs per second
    print("bench_compare: pgbench done", flush=True)

    med = {k: {s: statistics.median(v[s]) for s in SIDES} for k, v in res.items()}
    spread = {k: {s: (min(v[s]), max(v[s])) for s in SIDES} for k, v in res.items()}
    net = {k: {s: med[k][s] - med["floor"][s] for s in SIDES} for k, _, _ in SINGLE if k != "floor"}

    def fmt(x, digits=1):
        return f"{x:,.{digits}f}"

    lines = []
    lines.append("# Side by side: this build against the previous release\n")
    lines.append("<!-- written by bench/bench-compare.sh; do not edit by hand -->\n")
    lines.append(f"Command: `{os.environ.get('BENCH_COMMAND', 'bash bench/bench-compare.sh')}`; "
                 f"PostgreSQL {PG_MAJOR}, two servers with the same settings on one machine "
                 f"({os.cpu_count()} cores), each measurement alternating between them, {REPS} repetitions, "
                 f"medians; the run took {int(time.time()) - start} s (builds included).\n")
    lines.append(f"- **base**: {os.environ.get('BENCH_BASE_LABEL')}, catalog {versions['base']}")
    lines.append(f"- **current**: {os.environ.get('BENCH_CURRENT_LABEL')}, catalog {versions['current']}\n")
    lines.append("Rows marked *same on both* run the same PostgreSQL code on both servers: their ratio is "
                 "this run's noise between two identical servers; a leaf_id ratio inside it means no change.\n")
    lines.append(f"## One session, {N:,} IDs per query (ns per ID)\n")
    lines.append("| measurement | base | current | current / base | net of the loop: base | current | current / base |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for key, label, _ in SINGLE:
        b, c = med[key]["base"], med[key]["current"]
        row = f"| {label} | {fmt(b)} | {fmt(c)} | {c / b:.3f} |"
        if key in net:
            nb, nc = net[key]["base"], net[key]["current"]
            row += f" {fmt(nb)} | {fmt(nc)} | {nc / nb:.3f} |" if nb > 0 else f" {fmt(nb)} | {fmt(nc)} | - |"
        else:
            row += " | | |"
        lines.append(row)
    lines.append("")
    def ratio_table(title, measurements, digits):
        lines.append(title + "\n")
        lines.append("| measurement | base | current | current / base |")
        lines.append("|---|---:|---:|---:|")
        for key, label, _ in measurements:
            b, c = med[key]["base"], med[key]["current"]
            lines.append(f"| {label} | {fmt(b, digits)} | {fmt(c, digits)} | {c / b:.3f} |")
        lines.append("")

    ratio_table(f"## Inserts of {ROWS:,} rows (ns per row)", INSERTS, 1)
    ratio_table(f"## {CLIENTS} clients, {BATCH:,} IDs per transaction, {SECONDS} s per run (IDs per second)",
                SCALING, 0)
    lines.append("## Against nextval() in the same run (current build)\n")
    seg, nv = net["segment"]["current"], net["nextval_c1000"]["current"]
    lines.append(f"- One session, net of the loop: segment {fmt(seg)} ns against nextval CACHE 1000's "
                 f"{fmt(nv)} ns: **{seg / nv:.2f}** of its time (base: "
                 f"{net['segment']['base'] / net['nextval_c1000']['base']:.2f}).")
    lines.append(f"- {CLIENTS} clients: segment {med['pgb_segment']['current'] / med['pgb_nextval']['current']:.2f}× "
                 f"nextval CACHE 1000's IDs per second (base: "
                 f"{med['pgb_segment']['base'] / med['pgb_nextval']['base']:.2f}×).")
    lines.append(f"- Inserts: segment default {med['ins_segment']['current'] / med['ins_identity']['current']:.2f} "
                 f"of an identity column's time per row (base: "
                 f"{med['ins_segment']['base'] / med['ins_identity']['base']:.2f}).\n")
    lines.append("## Every repetition (min to max)\n")
    lines.append("| measurement | base | current |")
    lines.append("|---|---|---|")
    for key in res:
        b, c = spread[key]["base"], spread[key]["current"]
        d = 0 if key.startswith("pgb_") else 1
        lines.append(f"| {key} | {fmt(b[0], d)} to {fmt(b[1], d)} | {fmt(c[0], d)} to {fmt(c[1], d)} |")
    lines.append("")
    with open(report, "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(work, "compare-results.json"), "w") as f:
        json.dump({"raw": res, "versions": versions}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
