#!/usr/bin/python3
"""What leaf_id.synchronized_standby_slots costs, run by
bench/bench-standby.sh: a primary and one asynchronous standby streaming
through slot s1 on loopback, the rule '*' against '' (off), alternating, in
the same run:
  - refill latency: the first call of a fresh tag waits for its first refill
    (the worker's transaction, and with the rule the standby's flush);
  - 8 clients (pgbench), segment at the default step and snowflake, IDs per
    second; nextval() of a sequence with CACHE 1000 as the reference.
Writes the results between markers in docs/BENCHMARKS.md (replaced on each
run). Environment: PGBIN, PORT (the primary), REPORT, BENCH_COMMAND,
BENCH_HA_REPS, BENCH_HA_SECONDS, BENCH_HA_TAGS.
"""

import os
import re
import statistics
import subprocess
import time

import psycopg2

PGBIN = os.environ["PGBIN"]
PORT = int(os.environ["PORT"])
REPORT = os.environ["REPORT"]
REPS = int(os.environ.get("BENCH_HA_REPS", "5"))
SECONDS = int(os.environ.get("BENCH_HA_SECONDS", "5"))
TAGS = int(os.environ.get("BENCH_HA_TAGS", "100"))
CLIENTS = 8
BATCH = 1000
RULES = {"off": "", "on": "*"}


def connect():
    con = psycopg2.connect(host="127.0.0.1", port=PORT, dbname="postgres", user="postgres")
    con.autocommit = True
    return con


def sql(query, args=None):
    con = connect()
    try:
        with con.cursor() as cur:
            cur.execute(query, args)
            return cur.fetchall() if cur.description else None
    finally:
        con.close()


def set_rule(rule):
    sql("ALTER SYSTEM SET leaf_id.synchronized_standby_slots = %s", (RULES[rule],))
    sql("SELECT pg_reload_conf()")
    # the worker reads the setting at its next loop, after SIGHUP
    time.sleep(1)
    got = sql("SELECT current_setting('leaf_id.synchronized_standby_slots')")[0][0]
    assert got == RULES[rule], (got, rule)


def refill_latency(rule, rep):
    """Milliseconds of the first call of each of TAGS fresh tags."""
    names = [f"lat_{rule}_{rep}_{i}" for i in range(TAGS)]
    con = connect()
    out = []
    try:
        with con.cursor() as cur:
            cur.execute("INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) SELECT unnest(%s::text[]), 1000", (names,))
            for n in names:
                t = time.perf_counter()
                cur.execute("SELECT leaf_segment_next(%s)", (n,))
                cur.fetchall()
                out.append((time.perf_counter() - t) * 1000)
            cur.execute("DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = ANY(%s::text[])", (names,))
    finally:
        con.close()
    return out


def tag_counters():
    """Tag t's waits (calls that found both segments used up), refills and
    dynamic step."""
    r = sql("SELECT waits, refills, dynamic_step FROM leaf_segment_status WHERE tag = 't'")
    return r[0] if r else (0, 0, None)


def pgbench(script):
    path = f"{os.environ['WORK']}/bench.sql"
    with open(path, "w") as f:
        f.write(script + ";\n")
    r = subprocess.run([f"{PGBIN}/pgbench", "-n", "-h", "127.0.0.1", "-p", str(PORT), "-U", "postgres",
                        "-c", str(CLIENTS), "-j", str(CLIENTS), "-T", str(SECONDS), "-f", path, "postgres"],
                       capture_output=True, text=True, timeout=SECONDS + 120)
    if r.returncode != 0:
        raise SystemExit(f"pgbench failed: {r.stderr}")
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", r.stdout)
    return float(m.group(1)) * BATCH


THROUGHPUT = {
    "segment": f"SELECT count(leaf_segment_next('t')) FROM generate_series(1, {BATCH})",
    "snowflake": f"SELECT count(leaf_snowflake_next()) FROM generate_series(1, {BATCH})",
    "nextval": f"SELECT count(nextval('s')) FROM generate_series(1, {BATCH})",
}


def main():
    t_start = time.time()
    sql("CREATE EXTENSION IF NOT EXISTS leaf_id")
    sql("INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('t', 1000) ON CONFLICT DO NOTHING")
    sql("CREATE SEQUENCE IF NOT EXISTS s CACHE 1000")
    slot = sql("SELECT slot_name, active FROM pg_replication_slots")
    assert slot == [("s1", True)], slot
    lat = {r: [] for r in RULES}
    waits = {r: 0 for r in RULES}
    refills = {r: 0 for r in RULES}
    steps = {r: [] for r in RULES}
    ids = {(r, k): [] for r in RULES for k in THROUGHPUT}
    for rep in range(REPS):
        order = list(RULES) if rep % 2 == 0 else list(reversed(RULES))
        for rule in order:
            set_rule(rule)
            lat[rule] += refill_latency(rule, rep)
            for key in (list(THROUGHPUT) if rep % 2 == 0 else list(reversed(THROUGHPUT))):
                before = tag_counters()
                ids[(rule, key)].append(pgbench(THROUGHPUT[key]))
                if key == "segment":
                    after = tag_counters()
                    waits[rule] += after[0] - before[0]
                    refills[rule] += after[1] - before[1]
                    steps[rule].append(after[2])
            print(f"rep {rep + 1} rule {rule}: refill median {statistics.median(lat[rule][-TAGS:]):.2f} ms, "
                  + ", ".join(f"{k} {ids[(rule, k)][-1] / 1e6:.2f} M/s" for k in THROUGHPUT), flush=True)
    set_rule("off")
    lag = sql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) FROM pg_replication_slots")[0][0]

    def pct(v, q):
        v = sorted(v)
        return v[min(len(v) - 1, int(q * len(v)))]

    med = {k: statistics.median(v) for k, v in ids.items()}
    version = sql("SELECT version()")[0][0].split(" on ")[0]
    lines = [
        "<!-- standby cost: begin; bench/bench-standby.sh replaces this block -->",
        "## What `leaf_id.synchronized_standby_slots` costs",
        "",
        f"Command: `{os.environ.get('BENCH_COMMAND', 'bash bench/bench-standby.sh')}` ({version}, "
        f"{time.strftime('%Y-%m-%d')}, {int(time.time() - t_start)} s; the machine above). A primary and one "
        "asynchronous standby streaming through slot `s1` on loopback (both on this machine's 2 cores), "
        "`fsync = on`; the setting `'*'` (on) against `''` (off), alternating, "
        f"{REPS} rounds. Refill latency: the first call of each of {TAGS} fresh tags per round, which waits "
        "for the worker's first refill of it (and, on, for the standby to flush its commit). Throughput: "
        f"{CLIENTS} pgbench clients for {SECONDS} s, {BATCH} IDs a statement, at the default step (dynamic, "
        "from 1,000); medians of the rounds.",
        "",
        "| | off | on | on / off |",
        "|---|---:|---:|---:|",
        f"| refill latency, median (ms) | {statistics.median(lat['off']):.2f} | {statistics.median(lat['on']):.2f} "
        f"| {statistics.median(lat['on']) / statistics.median(lat['off']):.2f} |",
        f"| refill latency, 90th percentile (ms) | {pct(lat['off'], 0.9):.2f} | {pct(lat['on'], 0.9):.2f} "
        f"| {pct(lat['on'], 0.9) / pct(lat['off'], 0.9):.2f} |",
    ]
    for k, label in (("segment", "segment, 8 clients (M IDs/s)"), ("snowflake", "snowflake, 8 clients (M IDs/s)"),
                     ("nextval", "nextval CACHE 1000, 8 clients (M IDs/s; reference)")):
        lines.append(f"| {label} | {med[('off', k)] / 1e6:.2f} | {med[('on', k)] / 1e6:.2f} "
                     f"| {med[('on', k)] / med[('off', k)]:.3f} |")
    lines.append(f"| segment: calls that waited for a refill, all rounds | {waits['off']} | {waits['on']} | |")
    lines.append(f"| segment: refills, all rounds | {refills['off']} | {refills['on']} | |")
    lines.append(f"| segment: dynamic step after each round | {', '.join(map(str, steps['off']))} "
                 f"| {', '.join(map(str, steps['on']))} | |")
    seg = med[("on", "segment")] / med[("off", "segment")]
    lines += [
        "",
        f"Goal: at most 5% fewer segment IDs per second with the rule on: "
        f"**{'MET' if seg >= 0.95 else 'MISSED'}** (on: {(seg - 1) * 100:+.1f}% IDs per second; the rounds of segment, off: "
        + ", ".join(f"{v / 1e6:.2f}" for v in ids[("off", "segment")]) + "; on: "
        + ", ".join(f"{v / 1e6:.2f}" for v in ids[("on", "segment")])
        + f" M/s). The slot was {lag} bytes behind at the end. The wait is the worker's, once per segment "
        "(and per lease renewal), in the background: the prefetch at 10% is what keeps it from callers.",
        "<!-- standby cost: end -->",
    ]
    block = "\n".join(lines) + "\n"
    text = open(REPORT).read()
    m = re.search(r"<!-- standby cost: begin.*?<!-- standby cost: end -->\n", text, re.S)
    text = text[:m.start()] + block + text[m.end():] if m else text.rstrip("\n") + "\n\n" + block
    open(REPORT, "w").write(text)
    print(block)


main()
