#!/usr/bin/env python3
"""Run the leaf_id benchmark suite against a running cluster and write the
raw results as JSON (bench/bench_report.py turns them into docs/).

Started by bench/bench.sh, which owns the cluster. Every figure is measured
BENCH_REPS times; within each repetition the competitors run one after the
other, and the order rotates from one repetition to the next (rep 1: A B C,
rep 2: B C A, rep 3: C A B, ...), so that neither machine noise nor the
position in the sequence (a cache warmed by the one before, a checkpoint or
a thermal state) favours one competitor. Medians are taken by the report.

Usage: bench_run.py OUT.json   (settings from BENCH_* environment variables)
"""
import bisect
import glob
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import benchlib
from benchlib import BENCH_TIME_FUNCTION, BenchError  # noqa: F401 (BenchError: bench_multinode uses B.BenchError)

# the server bench/bench.sh runs (scripts/pg.sh: PG_MAJOR, PG_CONFIG)
PGBIN = os.environ.get("BENCH_PGBIN") or "/usr/lib/postgresql/15/bin"
PG_MAJOR = int(os.environ.get("BENCH_PG_MAJOR") or "15")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def env_str(name, default):
    v = os.environ.get(name, "")
    return v if v.strip() else default


QUICK = env_str("BENCH_QUICK", "0") not in ("0", "", "no", "false")


def env_int(name, full, quick):
    v = os.environ.get(name, "").replace("_", "").replace(",", "")
    return int(v) if v.strip() else (quick if QUICK else full)


P = {
    "quick": QUICK,
    "port": env_int("BENCH_PORT", 28870, 28870),
    "db": "bench",
    # 1. bulk, one session
    "n": env_int("BENCH_N", 5_000_000, 500_000),
    # pgbench run length (seconds) for sections 2, 3 and 5
    "seconds": env_int("BENCH_SECONDS", 5, 1),
    "reps": env_int("BENCH_REPS", 3, 3),
    # section 1 is short and the most sensitive to the machine's noise: more
    # repetitions for its medians
    "bulk_reps": env_int("BENCH_BULK_REPS", 7, 3),
    # 2. scaling
    "clients": [int(x) for x in env_str("BENCH_CLIENTS", "1 8 16" if QUICK else "1 2 4 8 16").split()],
    "batch": env_int("BENCH_BATCH", 10_000, 10_000),
    # 3. round trips
    "rt_clients": env_int("BENCH_RT_CLIENTS", 8, 8),
    # 4. inserts
    "insert_rows": env_int("BENCH_INSERT_ROWS", 1_000_000, 100_000),
    # 5. refill pressure
    "refill_clients": env_int("BENCH_REFILL_CLIENTS", 8, 8),
    "refill_batch": env_int("BENCH_REFILL_BATCH", 1_000, 1_000),
    "refill_steps": [int(x) for x in env_str("BENCH_REFILL_STEPS", "10 100 1000").split()],
    # 6. IDs per batch measurement, and the size of one call in the many-calls form
    "batch_n": env_int("BENCH_BATCH_N", 1_000_000, 100_000),
    "batch_call": env_int("BENCH_BATCH_CALL", 1000, 1000),
    # step of the tag 't' used everywhere else
    "seg_step": env_int("BENCH_SEG_STEP", 1_000, 1_000),
    # 7. many nodes (Citus): seconds per pgbench run, repetitions, clients per node, first port
    "mn_seconds": env_int("BENCH_MN_SECONDS", 3, 1),
    "mn_reps": env_int("BENCH_MN_REPS", 3, 2),
    "mn_clients": env_int("BENCH_MN_CLIENTS", 2, 2),
    "mn_port": env_int("BENCH_MN_PORT", env_int("BENCH_PORT", 28870, 28870) + 1,
                       env_int("BENCH_PORT", 28870, 28870) + 1),
    # peers: IDs per one-session query, its repetitions (also the tags
    # section's), pgbench clients and IDs per statement
    "peer_n": env_int("BENCH_PEER_N", 1_000_000, 200_000),
    "peer_reps": env_int("BENCH_PEER_REPS", 5, 3),
    "peer_clients": env_int("BENCH_PEER_CLIENTS", 8, 8),
    "peer_batch": env_int("BENCH_PEER_BATCH", 100, 100),
    # tags in turn: IDs per query, numbers of tags
    "tag_n": env_int("BENCH_TAG_N", 5_000_000, 200_000),
    "tag_step": env_int("BENCH_TAG_STEP", 100_000, 100_000),
    "tag_counts": [int(x) for x in env_str("BENCH_TAG_COUNTS", "1 2 64 1000").split()],
    "sections": env_str("BENCH_SECTIONS", "bulk scaling roundtrip insert refill batch peers tags profile multinode").split(),
    "work": env_str("BENCH_WORK", os.path.join(ROOT, "target", "bench-work")),
}
if P["reps"] < 1 or P["bulk_reps"] < 1 or P["peer_reps"] < 1:
    sys.exit("BENCH_REPS, BENCH_BULK_REPS and BENCH_PEER_REPS must be at least 1")

# Competitors that can be drawn in a SELECT: key, label, SQL expression.
GENERATORS = [
    ("segment", "leaf_segment_next('t')", "leaf_segment_next('t')"),
    ("opaque", "leaf_segment_next('t_opq'), opaque", "leaf_segment_next('t_opq')"),
    ("snowflake", "leaf_snowflake_next()", "leaf_snowflake_next()"),
    ("nextval_c1", "nextval, CACHE 1", "nextval('s1')"),
    ("nextval_c1000", "nextval, CACHE 1000", "nextval('s1000')"),
    ("uuid", "gen_random_uuid()", "gen_random_uuid()"),
    ("floor", "floor: count(g)", "g"),
]
# PostgreSQL 18's time-ordered UUID, in the same run
if PG_MAJOR >= 18:
    GENERATORS.insert(5, ("uuidv7", "uuidv7()", "uuidv7()"))
LABELS = {k: label for k, label, _ in GENERATORS}

# The peers section: leaf_id against what a user would pick instead. key,
# label, SQL expression, peer extension it needs (bench/bench-peers.sh
# built and installed it: BENCH_PEERS_FILE) or None, leaf_id setting to
# reload for its runs or None. Its own keys, so that its medians never mix
# with the other sections'.
PEER_AHEAD = ("leaf_id.max_run_ahead_ms", "1000")
PEERS = [
    ("segment", "leaf_segment_next('t')", "leaf_segment_next('t')", None, None),
    ("nextval_c1000", "nextval, CACHE 1000", "nextval('s1000')", None, None),
    ("snowflake", "leaf_snowflake_next()", "leaf_snowflake_next()", None, None),
    ("snowflake_ahead", "leaf_snowflake_next(), max_run_ahead_ms = 1000", "leaf_snowflake_next()", None, PEER_AHEAD),
    ("pgedge_snowflake", "pgEdge snowflake 2.6.0: snowflake.nextval()", "snowflake.nextval()", "snowflake", None),
    ("pg_uuidv7", "pg_uuidv7 1.6.0: uuid_generate_v7()", "uuid_generate_v7()", "pg_uuidv7", None),
    ("uuid", "gen_random_uuid()", "gen_random_uuid()", None, None),
    ("floor", "floor: count(g)", "g", None, None),
]
LABELS.update({f"peer_{k}": label for k, label, _, _, _ in PEERS})


def peer_status():
    """{name: (version, None when built and installed, else why not)} from
    the file bench/bench-peers.sh wrote (bench/bench.sh: BENCH_PEERS_FILE)."""
    path = os.environ.get("BENCH_PEERS_FILE", "")
    out = {}
    if path and os.path.exists(path):
        with open(path) as fh:
            for line in fh:
                parts = line.rstrip("\n").split(" ", 3)
                if len(parts) >= 3:
                    out[parts[1]] = (parts[2], None if parts[0] == "ok" else (parts[3] if len(parts) > 3 else "skipped"))
    for name in {x for _, _, _, x, _ in PEERS if x}:
        out.setdefault(name, ("?", "bench/bench-peers.sh did not run (run the section through bench/bench.sh)"))
    return out

# One ID per round trip: the floor is SELECT 1.
ROUNDTRIP = [(k, f"SELECT {e}" if k != "floor" else "SELECT 1") for k, _, e in GENERATORS]

# Inserts: key, column definition of id, INSERT statement (NROWS replaced).
INS_DEFAULT = "INSERT INTO bench_ins (v) SELECT g FROM generate_series(1, NROWS) g"
INSERTS = [
    ("segment", "id bigint PRIMARY KEY DEFAULT leaf_segment_next('t')", INS_DEFAULT),
    ("opaque", "id bigint PRIMARY KEY DEFAULT leaf_segment_next('t_opq')", INS_DEFAULT),
    ("snowflake", "id bigint PRIMARY KEY DEFAULT leaf_snowflake_next()", INS_DEFAULT),
    ("identity", "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY", INS_DEFAULT),
    ("nextval_c1", "id bigint PRIMARY KEY DEFAULT nextval('s1')", INS_DEFAULT),
    ("nextval_c1000", "id bigint PRIMARY KEY DEFAULT nextval('s1000')", INS_DEFAULT),
    ("uuid", "id uuid PRIMARY KEY DEFAULT gen_random_uuid()", INS_DEFAULT),
] + ([("uuidv7", "id uuid PRIMARY KEY DEFAULT uuidv7()", INS_DEFAULT)] if PG_MAJOR >= 18 else []) + [
    ("floor", "id bigint PRIMARY KEY",
     "INSERT INTO bench_ins (id, v) SELECT g, g FROM generate_series(1, NROWS) g"),
]

ERRORS = []


def rotated(items, rep):
    """The competitors in the order of repetition rep (0-based): rotated by rep."""
    k = rep % len(items)
    return items[k:] + items[:k]


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def note_error(where, msg):
    msg = msg.strip()
    ERRORS.append({"where": where, "error": msg[-2000:]})
    log(f"ERROR in {where}: {msg[-500:]}")


def conn_args(port=None):
    return ["-h", "127.0.0.1", "-p", str(port or P["port"]), "-U", "postgres"]


def psql(sql, db=None, timeout=3600, port=None):
    """Run SQL through psql (benchlib.psql) on the benchmark cluster, or
    with port on another server (section 7's nodes); stdout."""
    return benchlib.psql(PGBIN, port or P["port"], db or P["db"], sql, timeout=timeout)


def tagged(out, tag):
    """Fields of the output line that starts with 'tag|'."""
    for line in out.splitlines():
        parts = line.split("|")
        if parts[0] == tag:
            return parts[1:]
    raise BenchError(f"no '{tag}' line in psql output:\n{out[:600]}")


def counters_sql(tag="t", op="="):
    """The leaf_id counters of tag (op: "LIKE" for a pattern of tags)."""
    w = f"tag {op} '{tag}'"
    return (f"(SELECT coalesce(sum(waits), 0) FROM leaf_segment_status WHERE {w}), "
            f"(SELECT coalesce(sum(refills), 0) FROM leaf_segment_status WHERE {w}), "
            f"(SELECT coalesce(max(dynamic_step), 0) FROM leaf_segment_status WHERE {w}), "
            "(SELECT sequence_waits FROM leaf_snowflake_status)")


def counters(tag="t"):
    f = tagged(psql(f"SELECT 'c', {counters_sql(tag)};"), "c")
    return {"seg_waits": int(f[0]), "seg_refills": int(f[1]), "seg_step": int(f[2]), "sf_waits": int(f[3])}


def delta(a, b):
    return {"seg_waits": b["seg_waits"] - a["seg_waits"], "seg_refills": b["seg_refills"] - a["seg_refills"],
            "seg_step_after": b["seg_step"], "sf_waits": b["sf_waits"] - a["sf_waits"]}


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# ---------------------------------------------------------------- machine

def machine_info():
    info = {}
    with open("/proc/cpuinfo") as f:
        m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
    info["cpu"] = m.group(1).strip() if m else "unknown"
    info["cores"] = os.cpu_count()
    with open("/proc/meminfo") as f:
        m = re.search(r"^MemTotal:\s*(\d+) kB", f.read(), re.M)
    info["memory_gib"] = round(int(m.group(1)) / 1024 / 1024, 1) if m else None
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            info["clocksource"] = f.read().strip()
    except OSError:
        info["clocksource"] = "unknown"
    r = subprocess.run([f"{PGBIN}/pg_test_timing", "-d", "1"], capture_output=True, text=True)
    m = re.search(r"Per loop time including overhead:\s*([\d.]+)\s*ns", r.stdout)
    info["clock_read_ns"] = float(m.group(1)) if m else None
    info["kernel"] = os.uname().release
    info["pgbin"] = PGBIN
    info["pg_version"] = psql("SELECT version();").strip()
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    info["commit"] = git("rev-parse", "HEAD")
    info["commit_subject"] = git("log", "-1", "--format=%s")
    dirty = git("status", "--porcelain", "--", "src", "sql", "Cargo.toml", "Cargo.lock", "leaf_id.control")
    info["source_dirty"] = bool(dirty)
    info["leaf_id_version"] = psql("SELECT extversion FROM pg_extension WHERE extname = 'leaf_id';").strip()
    return info


def server_settings():
    names = ["max_connections", "max_worker_processes", "shared_buffers", "work_mem", "fsync",
             "synchronous_commit", "wal_level", "max_wal_size", "checkpoint_timeout", "autovacuum", "jit",
             "max_parallel_workers_per_gather",
             "shared_preload_libraries"]
    rows = psql("SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(ARRAY["
                + ",".join(f"'{n}'" for n in names) + "]) OR name LIKE 'leaf\\_id.%' ORDER BY name;")
    return dict(line.split("|", 1) for line in rows.splitlines())


# ---------------------------------------------------------------- setup


def setup():
    psql(f"DROP DATABASE IF EXISTS {P['db']} WITH (FORCE);", db="postgres")
    psql(f"CREATE DATABASE {P['db']};", db="postgres")
    psql(f"""
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, description) VALUES ('t', {P['seg_step']}, 'benchmark tag');
SELECT leaf_opaque_create('bench_domain');
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, description, opaque_domain, opaque_grant)
VALUES ('t_opq', {P['seg_step']}, 'benchmark tag, opaque', 'bench_domain', leaf_opaque_grant('bench_domain', 't_opq', 1));
CREATE SEQUENCE s1 CACHE 1;
CREATE SEQUENCE s1000 CACHE 1000;
""" + BENCH_TIME_FUNCTION)
    # first use starts the database's worker, claims the snowflake worker id
    # and loads the tag: not part of any measurement.
    out = psql("SELECT 'w', count(leaf_segment_next('t')), count(leaf_snowflake_next()), "
               "count(leaf_segment_next('t_opq')) FROM generate_series(1, 100000);")
    if tagged(out, "w") != ["100000", "100000", "100000"]:
        raise BenchError(f"warm-up returned wrong counts: {out}")


# ---------------------------------------------------------------- 1. bulk

def timed(q, before="", tag="t", op="="):
    """Run query q (a count) timed inside the server, after the SQL in
    before: (microseconds, count, leaf_id counters of tag before, after)."""
    out = psql(before
               + f"SELECT 'pre', {counters_sql(tag, op)};\n"
               + f"SELECT 'time', us, n FROM bench_time($q${q}$q$);\n"
               + f"SELECT 'post', {counters_sql(tag, op)};\n")
    us, cnt = float(tagged(out, "time")[0]), int(tagged(out, "time")[1])
    pre, post = [list(map(int, tagged(out, t))) for t in ("pre", "post")]
    return us, cnt, pre, post


def one_session(where, expr, n):
    """n IDs of expr in one query of one session, timed on the server after
    1,000 warm-up IDs in the same session: a record of section 1's form."""
    q = f"SELECT count({expr}) FROM generate_series(1, {n}) g"
    us, cnt, pre, post = timed(q, f"SELECT 'warm', count({expr}) FROM generate_series(1, 1000) g;\n")
    if cnt != n:
        note_error(where, f"count was {cnt}, expected {n}")
    return {"us": us, "count": cnt, "seg_waits": post[0] - pre[0],
            "seg_refills": post[1] - pre[1], "seg_step_after": post[2], "sf_waits": post[3] - pre[3]}


def bench_bulk():
    n = P["n"]
    res = {k: [] for k, _, _ in GENERATORS}
    for rep in range(P["bulk_reps"]):
        for key, _, expr in rotated(GENERATORS, rep):
            try:
                rec = one_session(f"bulk {key} rep {rep + 1}", expr, n)
                us = rec["us"]
                if key == "snowflake":
                    rec.update(snowflake_span(n))
                res[key].append(rec)
                log(f"bulk rep {rep + 1} {key:14s} {us * 1000 / n:8.1f} ns/ID"
                    + (f"  (issued over {rec['span_ms']} ms of their timestamps: {rec['span_ids'] / rec['span_ms']:.0f}"
                       f" per ms, sequence ran out in {rec['span_exhausted']} ms)" if key == "snowflake" else ""))
            except (BenchError, subprocess.TimeoutExpired) as e:
                note_error(f"bulk {key} rep {rep + 1}", str(e))
    return res


def snowflake_span(n):
    """Draw n snowflake IDs in one query (not timed) and measure the rate in
    the IDs' own milliseconds: the wall-clock time of a bulk query also holds
    the loop itself (generate_series materializes its rows before the first
    ID is drawn), the span of the IDs' timestamps only the drawing."""
    out = psql(f"SELECT 'pre', {counters_sql()};\n"
               f"SELECT 'span', count(*), (max(id) >> 22) - (min(id) >> 22) + 1 "
               f"FROM (SELECT leaf_snowflake_next() AS id FROM generate_series(1, {n}) g) s;\n"
               f"SELECT 'post', {counters_sql()};\n")
    cnt, span = map(int, tagged(out, "span"))
    if cnt != n:
        note_error("bulk snowflake span", f"count was {cnt}, expected {n}")
    pre, post = [list(map(int, tagged(out, t))) for t in ("pre", "post")]
    # the same n by wall clock with a loop that streams its rows (a set-
    # returning function in a target list runs per row, ProjectSet, and
    # materializes nothing): does the loop explain the wall-clock gap?
    us, cnt = timed(f"SELECT count(leaf_snowflake_next()) FROM (SELECT generate_series(1, {n}) AS g) s")[:2]
    if cnt != n:
        note_error("bulk snowflake streaming loop", f"count was {cnt}, expected {n}")
    return {"span_ids": n, "span_ms": span, "span_exhausted": post[3] - pre[3], "stream_us": us}


# ---------------------------------------------------------------- pgbench

def pgbench_start(name, script, clients, log_prefix=None, port=None, db=None, seconds=None, raw=False):
    """Start pgbench (returns the process; pgbench_finish reads it). port, db
    and seconds default to the benchmark cluster's and BENCH_SECONDS; raw:
    the script is written as given (several statements, meta-commands)."""
    os.makedirs(P["work"], exist_ok=True)
    path = os.path.join(P["work"], f"{name}.sql")
    with open(path, "w") as f:
        f.write(script if raw else script.rstrip(";\n") + ";\n")
    seconds = seconds or P["seconds"]
    cmd = [f"{PGBIN}/pgbench", *conn_args(port), "-n", "-M", "prepared", "-c", str(clients), "-j", str(clients),
           "-T", str(seconds), "-f", path]
    if log_prefix:
        cmd += ["-l", f"--log-prefix={log_prefix}"]
    cmd.append(db or P["db"])
    proc = subprocess.Popen(cmd, cwd=P["work"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.bench_name, proc.bench_timeout = name, seconds * 20 + 300
    return proc


def pgbench_finish(proc):
    try:
        stdout, stderr = proc.communicate(timeout=proc.bench_timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    out = stdout + stderr
    m_tps = re.search(r"^tps = ([\d.]+) \(without initial connection time\)", out, re.M)
    m_n = re.search(r"^number of transactions actually processed: (\d+)", out, re.M)
    m_fail = re.search(r"^number of failed transactions: (\d+)", out, re.M)
    failed = int(m_fail.group(1)) if m_fail else 0
    if proc.returncode != 0 or not m_tps or failed:
        raise BenchError(f"pgbench {proc.bench_name} (exit {proc.returncode}, failed {failed}): "
                         + "\n".join(l for l in out.splitlines() if not l.startswith("progress"))[-1500:])
    return {"tps": float(m_tps.group(1)), "transactions": int(m_n.group(1)) if m_n else None}


def pgbench(name, script, clients, log_prefix=None, **kw):
    return pgbench_finish(pgbench_start(name, script, clients, log_prefix, **kw))


# ---------------------------------------------------------------- 2. scaling

def bench_scaling():
    b = P["batch"]
    res = {k: {str(c): [] for c in P["clients"]} for k, _, _ in GENERATORS}
    for rep in range(P["reps"]):
        for c in P["clients"]:
            for key, _, expr in rotated(GENERATORS, rep):
                try:
                    pre = counters()
                    r = pgbench(f"scale_{key}", f"SELECT count({expr}) FROM generate_series(1, {b}) g", c)
                    r.update(delta(pre, counters()))
                    r["ids_per_s"] = r["tps"] * b
                    res[key][str(c)].append(r)
                    log(f"scaling rep {rep + 1} c={c:2d} {key:14s} {r['ids_per_s'] / 1e6:8.3f} M IDs/s")
                except (BenchError, subprocess.TimeoutExpired) as e:
                    note_error(f"scaling {key} {c} clients rep {rep + 1}", str(e))
    return res


# ---------------------------------------------------------------- 3. round trips

def percentile(sorted_vals, q):
    """Nearest-rank percentile."""
    if not sorted_vals:
        return None
    k = max(1, math.ceil(q * len(sorted_vals)))
    return sorted_vals[min(k, len(sorted_vals)) - 1]


def read_latency_log(prefix):
    """pgbench -l files of one run -> (logged latencies, cycles), both sorted, in µs.

    A line is: client_id transaction_no latency_us script_no epoch_s epoch_us.
    The logged latency reads 0 whenever the result was already there when
    pgbench first looked (it reads the clock lazily). The cycle is the time
    between a client's consecutive completions: the per-call time a client
    doing one call after another sees, independent of that effect.
    """
    lat, cycles, last_end = [], [], {}
    for fn in sorted(glob.glob(prefix + ".*")):
        with open(fn) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 6:
                    continue
                client, latency = int(parts[0]), int(parts[2])
                end = int(parts[4]) * 1_000_000 + int(parts[5])
                lat.append(latency)
                if client in last_end:
                    cycles.append(end - last_end[client])
                last_end[client] = end
        os.remove(fn)
    lat.sort()
    cycles.sort()
    return lat, cycles


def bench_roundtrip():
    c = P["rt_clients"]
    res = {k: [] for k, _ in ROUNDTRIP}
    for rep in range(P["reps"]):
        for key, stmt in rotated(ROUNDTRIP, rep):
            prefix = os.path.join(P["work"], f"rt_{key}_{rep + 1}")
            for fn in glob.glob(prefix + ".*"):
                os.remove(fn)
            try:
                pre = counters()
                r = pgbench(f"rt_{key}", stmt, c, log_prefix=prefix)
                r.update(delta(pre, counters()))
                lat, cyc = read_latency_log(prefix)
                r.update({"logged": len(lat), "lat_mean_us": sum(lat) / len(lat) if lat else None,
                          "p50_us": percentile(lat, 0.50), "p99_us": percentile(lat, 0.99),
                          "p999_us": percentile(lat, 0.999), "max_us": lat[-1] if lat else None,
                          "zero_share": bisect.bisect_right(lat, 0) / len(lat) if lat else None,
                          "cycle_mean_us": sum(cyc) / len(cyc) if cyc else None,
                          "cycle_p50_us": percentile(cyc, 0.50), "cycle_p99_us": percentile(cyc, 0.99),
                          "cycle_p999_us": percentile(cyc, 0.999), "cycle_max_us": cyc[-1] if cyc else None})
                if r["transactions"] and len(lat) < r["transactions"]:
                    note_error(f"roundtrip {key} rep {rep + 1}",
                               f"pgbench logged {len(lat)} transactions but reported {r['transactions']}")
                res[key].append(r)
                log(f"roundtrip rep {rep + 1} {key:14s} {r['tps']:9.0f} TPS  cycle p99 {r['cycle_p99_us']} us  "
                    f"p99.9 {r['cycle_p999_us']} us; logged p99 {r['p99_us']} p99.9 {r['p999_us']} us")
            except (BenchError, subprocess.TimeoutExpired) as e:
                note_error(f"roundtrip {key} rep {rep + 1}", str(e))
    return res


# ---------------------------------------------------------------- 4. inserts

def bench_insert():
    n = P["insert_rows"]
    res = {k: [] for k, _, _ in INSERTS}
    for rep in range(P["reps"]):
        for key, coldef, ins in rotated(INSERTS, rep):
            ins = ins.replace("NROWS", str(n))
            warm = {"segment": "leaf_segment_next('t')", "opaque": "leaf_segment_next('t_opq')", "snowflake": "leaf_snowflake_next()",
                    "nextval_c1": "nextval('s1')", "nextval_c1000": "nextval('s1000')",
                    "uuid": "gen_random_uuid()", "uuidv7": "uuidv7()"}.get(key, "1")
            try:
                psql(f"DROP TABLE IF EXISTS bench_ins; CREATE TABLE bench_ins ({coldef}, v integer NOT NULL);"
                     " CHECKPOINT;")
                pre = counters()
                # WAL: the LSN moved by the insert (its commit, the worker's
                # refills meanwhile and any other writer of the cluster included)
                out = psql(f"SELECT 'warm', {warm};\nSELECT pg_current_wal_lsn() AS lsn0 \\gset\n"
                           f"\\timing on\n{ins};\n\\timing off\n"
                           "SELECT 'size', pg_relation_size('bench_ins_pkey'), pg_relation_size('bench_ins'), "
                           "count(*), pg_wal_lsn_diff(pg_current_wal_lsn(), :'lsn0')::bigint FROM bench_ins;\n")
                post = counters()
                m = re.search(r"^Time: ([\d.]+) ms", out, re.M)
                if not m:
                    raise BenchError(f"no timing in output: {out[:400]}")
                idx, heap, cnt, wal = map(int, tagged(out, "size"))
                if cnt != n:  # the primary key has already refused any duplicate id
                    note_error(f"insert {key} rep {rep + 1}", f"{cnt} rows, expected {n}")
                r = {"ms": float(m.group(1)), "index_bytes": idx, "heap_bytes": heap, "rows": cnt,
                     "wal_bytes": wal}
                r.update(delta(pre, post))
                res[key].append(r)
                log(f"insert rep {rep + 1} {key:14s} {r['ms']:9.1f} ms  pkey {idx / 1048576:6.1f} MiB"
                    f"  WAL {wal / cnt if cnt else 0:6.1f} B/row")
            except (BenchError, subprocess.TimeoutExpired) as e:
                note_error(f"insert {key} rep {rep + 1}", str(e))
    try:
        psql("DROP TABLE IF EXISTS bench_ins; CHECKPOINT;")
    except BenchError as e:
        note_error("insert cleanup", str(e))
    return res


# ---------------------------------------------------------------- 5. refill pressure

PROBES = [0]


def set_max_step(value, step):
    """Set leaf_id.max_step (None: reset), reload, and wait until the
    database's background worker applies it: a fresh probe tag of table step
    `step` gets its second refill of `step` IDs when max_step is `step` (its
    segment cannot double), of 2 * step when the default max_step is back.
    A probe refilled before the worker reloaded is replaced by a new one
    (half a second later); after 60 s the run fails."""
    if value is None:
        psql("ALTER SYSTEM RESET leaf_id.max_step; SELECT pg_reload_conf();")
        want = 2 * step
    else:
        psql(f"ALTER SYSTEM SET leaf_id.max_step = {int(value)}; SELECT pg_reload_conf();")
        want = int(value)
    deadline = time.time() + 60
    first = PROBES[0] + 1
    while True:
        PROBES[0] += 1
        tag = f"probe_{PROBES[0]}"
        psql(f"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, description) VALUES ('{tag}', {step}, 'benchmark: reload probe');"
             # the first refill, then past 10% of it: the worker prefetches the second
             f"SELECT count(leaf_segment_next('{tag}')) FROM generate_series(1, {step // 2 + 1});")
        while True:
            refills, got = map(int, tagged(psql(f"SELECT 'p', refills, dynamic_step FROM leaf_segment_status "
                                                f"WHERE tag = '{tag}';"), "p"))
            if refills >= 2 or time.time() > deadline:
                break
            time.sleep(0.01)
        psql(f"DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = '{tag}';")
        if refills >= 2 and got == want:
            if first != PROBES[0]:
                log(f"the worker applied leaf_id.max_step = {value} at probe {PROBES[0] - first + 1}")
            return
        if time.time() > deadline:
            raise BenchError(f"the worker did not apply leaf_id.max_step = {value} within 60 s "
                             f"(probe {tag}: {refills} refills, step {got}, expected {want})")
        # a deleted probe keeps its tag slot until the worker's resync: at most
        # two probes a second
        time.sleep(0.5)


def bench_refill():
    b, c = P["refill_batch"], P["refill_clients"]
    cases = [(mode, step) for mode in ("dynamic", "pinned") for step in P["refill_steps"]]
    res = {"tags": {f"{m}_{s}": [] for m, s in cases}, "refs": {k: [] for k, _, _ in GENERATORS}}
    for rep in range(P["reps"]):
        for mode, step in rotated(cases, rep):
            tag = f"r{step}_{mode}_{rep + 1}"
            try:
                psql(f"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, description) "
                     f"VALUES ('{tag}', {step}, 'benchmark: refill pressure');")
                try:
                    if mode == "pinned":
                        set_max_step(step, step)
                    psql(f"SELECT leaf_segment_next('{tag}');")  # first load, not measured
                    pre = counters(tag)
                    r = pgbench(f"refill_{mode}_{step}",
                                f"SELECT count(leaf_segment_next('{tag}')) FROM generate_series(1, {b}) g", c)
                    r.update(delta(pre, counters(tag)))
                finally:
                    if mode == "pinned":
                        set_max_step(None, step)
                r["ids_per_s"] = r["tps"] * b
                r["calls"] = (r["transactions"] or 0) * b
                r["tag"] = tag
                res["tags"][f"{mode}_{step}"].append(r)
                log(f"refill rep {rep + 1} {mode:7s} step {step:5d} {r['ids_per_s'] / 1e6:8.3f} M IDs/s  "
                    f"waits {r['seg_waits']}  refills {r['seg_refills']}  step now {r['seg_step_after']}")
            except (BenchError, subprocess.TimeoutExpired) as e:
                note_error(f"refill {mode} step {step} rep {rep + 1}", str(e))
        for key, _, expr in rotated(GENERATORS, rep):
            try:
                pre = counters()
                r = pgbench(f"refill_ref_{key}", f"SELECT count({expr}) FROM generate_series(1, {b}) g", c)
                r.update(delta(pre, counters()))
                r["ids_per_s"] = r["tps"] * b
                r["calls"] = (r["transactions"] or 0) * b
                res["refs"][key].append(r)
                log(f"refill rep {rep + 1} {key:15s} {r['ids_per_s'] / 1e6:8.3f} M IDs/s")
            except (BenchError, subprocess.TimeoutExpired) as e:
                note_error(f"refill reference {key} rep {rep + 1}", str(e))
    return res


# ---------------------------------------------------------------- main

# ---------------------------------------------------------------- 6. batch

def batch_forms():
    n, k = P["batch_n"], P["batch_call"]
    return [
        ("floor", f"SELECT count(*) FROM generate_series(1, {n}) g"),
        ("segment_single", f"SELECT count(leaf_segment_next('t')) FROM generate_series(1, {n}) g"),
        ("segment_one_call", f"SELECT count(*) FROM leaf_segment_next('t', {n})"),
        ("segment_calls", f"SELECT count(*) FROM generate_series(1, {n // k}) g, LATERAL leaf_segment_next('t', {k}) i"),
        ("snowflake_one_call", f"SELECT count(*) FROM leaf_snowflake_next({n})"),
        ("snowflake_single", f"SELECT count(leaf_snowflake_next()) FROM generate_series(1, {n}) g"),
    ]


def bench_batch():
    n = P["batch_n"]
    forms = batch_forms()
    res = {k: [] for k, _ in forms}
    for rep in range(P["reps"]):
        for key, q in rotated(forms, rep):
            try:
                us, cnt, pre, post = timed(q)
                if cnt != n:
                    note_error(f"batch {key} rep {rep + 1}", f"count was {cnt}, expected {n}")
                res[key].append({"us": us, "count": cnt, "seg_waits": post[0] - pre[0]})
                log(f"batch rep {rep + 1} {key:20s} {us * 1000 / n:8.1f} ns/ID")
            except (BenchError, subprocess.TimeoutExpired) as e:
                note_error(f"batch {key} rep {rep + 1}", str(e))
    return res


# ---------------------------------------------------------------- peers

def reload_setting(name, value):
    """ALTER SYSTEM SET name = value (None: RESET), reload, and wait until a
    new session reads the new value (the postmaster applies a reload
    asynchronously); after 30 s the run fails."""
    if value is None:
        psql(f"ALTER SYSTEM RESET {name}; SELECT pg_reload_conf();")
        want = psql(f"SELECT boot_val FROM pg_settings WHERE name = '{name}';").strip()
    else:
        psql(f"ALTER SYSTEM SET {name} = {value}; SELECT pg_reload_conf();")
        want = str(value)
    deadline = time.time() + 30
    while True:
        got = psql(f"SELECT setting FROM pg_settings WHERE name = '{name}';").strip()
        if got == want:
            return
        if time.time() > deadline:
            raise BenchError(f"{name} is still {got} 30 s after the reload (expected {want})")
        time.sleep(0.05)


def bench_peers():
    """leaf_id against what a user would pick instead, in the same run: one
    session (ns per ID, net of the same loop without a call: the floor) and
    peer_clients pgbench clients drawing peer_batch IDs per statement. A peer
    extension that bench/bench-peers.sh could not build is skipped, and the
    results say why."""
    status = peer_status()
    skipped = {name: {"version": v, "reason": why} for name, (v, why) in status.items() if why}
    for name, (v, why) in sorted(status.items()):
        if why is None:
            try:
                psql(f"CREATE EXTENSION IF NOT EXISTS {name};")
            except BenchError as e:
                skipped[name] = {"version": v, "reason": f"CREATE EXTENSION {name} failed: {str(e).splitlines()[0]}"}
    for name, sk in sorted(skipped.items()):
        log(f"== SKIP: peer {name} {sk['version']}: {sk['reason']}")
    peers = [x for x in PEERS if x[3] is None or x[3] not in skipped]
    n, b, c = P["peer_n"], P["peer_batch"], P["peer_clients"]
    res = {"one": {k: [] for k, *_ in peers}, "clients": {k: [] for k, *_ in peers}, "skipped": skipped,
           "versions": {name: v for name, (v, why) in status.items()}}

    def with_setting(setting, run):
        if setting:
            reload_setting(*setting)
        try:
            return run()
        finally:
            if setting:
                reload_setting(setting[0], None)

    for rep in range(P["peer_reps"]):
        for key, _, expr, _, setting in rotated(peers, rep):
            try:
                rec = with_setting(setting, lambda: one_session(f"peers {key} rep {rep + 1}", expr, n))
                res["one"][key].append(rec)
                log(f"peers rep {rep + 1} one session {key:17s} {rec['us'] * 1000 / n:8.1f} ns/ID")
            except (BenchError, subprocess.TimeoutExpired) as e:
                note_error(f"peers one session {key} rep {rep + 1}", str(e))
    for rep in range(P["reps"]):
        for key, _, expr, _, setting in rotated(peers, rep):
            try:
                pre = counters()
                r = with_setting(setting, lambda: pgbench(
                    f"peer_{key}", f"SELECT count({expr}) FROM generate_series(1, {b}) g", c))
                r.update(delta(pre, counters()))
                r["ids_per_s"] = r["tps"] * b
                res["clients"][key].append(r)
                log(f"peers rep {rep + 1} {c} clients {key:17s} {r['ids_per_s'] / 1e6:8.3f} M IDs/s")
            except (BenchError, subprocess.TimeoutExpired) as e:
                note_error(f"peers {c} clients {key} rep {rep + 1}", str(e))
    return res


# ---------------------------------------------------------------- tags in turn

TAG_PREFIX = "tg"


def ensure_tags(k):
    """Tags tg0 .. tg{k-1} in leaf_alloc (step BENCH_TAG_STEP: large, so
    that the worker's refills, which share the two cores, hardly run during
    a measurement), each loaded once (its first refill): not part of any
    measurement."""
    psql(f"INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, description) "
         f"SELECT '{TAG_PREFIX}' || i, {P['tag_step']}, 'benchmark: tags in turn' FROM generate_series(0, {k - 1}) i "
         "ON CONFLICT DO NOTHING;\n"
         f"SELECT count({tags_call(k)}) FROM generate_series(1, {k}) g;")


def tags_call(k):
    """One ID of the tags tg0 .. tg{k-1} in turn, the tag computed per row."""
    return f"leaf_segment_next('{TAG_PREFIX}' || (g % {k}))"


def bench_tags():
    """One session drawing IDs from k tags in turn (the tag computed in the
    query), for each k of tag_counts: ns per ID, net of the same query
    computing the tag name without the call."""
    n = P["tag_n"]
    res = {str(k): {"call": [], "floor": []} for k in P["tag_counts"]}
    ready = []
    for k in P["tag_counts"]:
        try:
            ensure_tags(k)
            ready.append(k)
        except BenchError as e:
            note_error(f"tags {k}: creating and loading the tags", str(e))
    cases = [(k, form) for k in ready for form in ("call", "floor")]
    for rep in range(P["peer_reps"]):
        for k, form in rotated(cases, rep):
            expr = tags_call(k) if form == "call" else f"'{TAG_PREFIX}' || (g % {k})"
            # a warm pass: every tag once
            warm = f"SELECT 'warm', count({expr}) FROM generate_series(1, {max(k, 1000)}) g;\n"
            try:
                us, cnt, pre, post = timed(f"SELECT count({expr}) FROM generate_series(1, {n}) g", warm,
                                           tag=f"{TAG_PREFIX}%", op="LIKE")
                if cnt != n:
                    note_error(f"tags {k} {form} rep {rep + 1}", f"count was {cnt}, expected {n}")
                res[str(k)][form].append({"us": us, "count": cnt, "seg_waits": post[0] - pre[0],
                                          "seg_refills": post[1] - pre[1]})
                log(f"tags rep {rep + 1} {k:5d} tags {form:5s} {us * 1000 / n:8.1f} ns/ID"
                    f"  waits {post[0] - pre[0]}  refills {post[1] - pre[1]}")
            except (BenchError, subprocess.TimeoutExpired) as e:
                note_error(f"tags {k} {form} rep {rep + 1}", str(e))
    return res


# ---------------------------------------------------------------- 7. many nodes

def bench_multinode():
    """Section 7 starts and stops its own Citus nodes: bench/bench_multinode.py."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_multinode
    return bench_multinode.run(sys.modules[__name__])


def perf_profile(perf, name, expr, n):
    """perf samples (the cpu-clock event, 5 kHz) of one backend drawing n
    IDs of expr in one query, by library and by symbol."""
    data = os.path.join(P["work"], re.sub(r"\W+", "_", name) + ".data")
    s = subprocess.Popen([f"{PGBIN}/psql", "-X", "-q", "-At", *conn_args(), "-d", P["db"]],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    query = f"SELECT count({expr}) FROM generate_series(1, {n}) g"
    try:
        s.stdin.write("SELECT pg_backend_pid();\n")
        s.stdin.flush()
        pid = int(s.stdout.readline())
        s.stdin.write(f"SELECT count({expr}) FROM generate_series(1, 1000) g;\n")
        s.stdin.flush()
        s.stdout.readline()
        rec = subprocess.Popen([perf, "record", "-F", "5000", "-o", data, "-p", str(pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        s.stdin.write(query + ";\n")
        s.stdin.flush()
        got = s.stdout.readline().strip()
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
        if got != str(n):
            note_error(name, f"count was {got!r}, expected {n}")
        if rec.returncode not in (0, -signal.SIGINT) or not os.path.exists(data):
            note_error(name, f"perf record failed (exit {rec.returncode}): {err.strip()[-400:]}")
            return {}
    finally:
        s.stdin.close()
        s.wait(timeout=60)

    def report(sort):
        out = subprocess.run([perf, "report", "-i", data, "--no-children", "--sort", sort, "--stdio", "-g", "none",
                              "--percent-limit", "0.3"], capture_output=True, text=True, timeout=300).stdout
        rows = []
        for line in out.splitlines():
            m = re.match(r"^\s+([\d.]+)%\s+(.*\S)\s*$", line)
            if m:
                rows.append([float(m.group(1)), re.sub(r"\s{2,}", "  ", m.group(2))])
        return rows
    return {"n": n, "query": query, "by_library": report("dso"), "by_symbol": report("dso,sym")[:30],
            "perf_version": subprocess.run([perf, "--version"], capture_output=True, text=True).stdout.strip()}


# the tag counts the profile section samples too: a few tables' tags, and
# as many as a session's table of tags holds in the benchmark's tags section
PROFILE_TAG_COUNTS = (64, 1000)


def bench_profile():
    """What one session's leaf_segment_next('t') is made of, and the same
    with 64 and 1,000 tags in turn (the keys "tags64", "tags1000"): perf samples of one backend
    drawing n IDs in one query, by library and by symbol. Without perf
    (Debian's linux-perf) or its permission, an error note says so."""
    perf = shutil.which("perf")
    if not perf:
        note_error("profile", "perf is not installed (Debian: linux-perf)")
        return {}
    res = perf_profile(perf, "profile", "leaf_segment_next('t')", P["n"])
    for k in PROFILE_TAG_COUNTS:
        try:
            ensure_tags(k)
            tags = perf_profile(perf, f"profile {k} tags", tags_call(k), P["n"])
            if tags:
                res[f"tags{k}"] = tags
        except BenchError as e:
            note_error(f"profile {k} tags", str(e))
    return res


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_path = sys.argv[1]
    os.makedirs(P["work"], exist_ok=True)
    t0 = time.time()
    log(f"parameters: {json.dumps({k: v for k, v in P.items() if k != 'work'})}")
    setup()
    results = {"params": P, "labels": LABELS, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
               "machine": machine_info(), "settings": server_settings(), "sections": {}, "load": {}}
    sections = {"bulk": bench_bulk, "scaling": bench_scaling, "roundtrip": bench_roundtrip,
                "insert": bench_insert, "refill": bench_refill, "batch": bench_batch,
                "peers": bench_peers, "tags": bench_tags, "profile": bench_profile,
                "multinode": bench_multinode}
    for name in P["sections"]:
        if name not in sections:
            sys.exit(f"unknown section {name}")
        log(f"== {name} (load average {loadavg()})")
        s0 = time.time()
        load_before = loadavg()
        results["sections"][name] = sections[name]()
        results["load"][name] = {"before": load_before, "after": loadavg(), "seconds": round(time.time() - s0, 1)}
    try:
        results["final_status"] = psql("SELECT tag, dynamic_step, table_step, refills, waits "
                                       "FROM leaf_segment_status WHERE tag = 't';").strip()
    except BenchError as e:
        note_error("final status", str(e))
    results["errors"] = ERRORS
    results["seconds"] = round(time.time() - t0, 1)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    log(f"done in {results['seconds']} s, {len(ERRORS)} error(s); results in {out_path}")


if __name__ == "__main__":
    main()
