"""Section 7 of the benchmark suite: many nodes on Citus.

Imported by bench/bench_run.py (run(B) gets that module, for its helpers
and parameters). Starts its own nodes in target/bench-citus (ports
BENCH_MN_PORT, +1, +2), each with shared_preload_libraries =
'citus,leaf_id', and stops them before it returns, whatever happens.

Phases, on one coordinator that later gets two workers:
  0. the coordinator alone, leaf_id's tables still local (a plain server with
     Citus loaded): the worker's refill cycle on a local table;
  1. the same coordinator after create_reference_table() of leaf_alloc and
     leaf_worker, no workers yet ("1 node"): IDs per second, the refill
     cycle, and the worker's statements timed on the reference table and on a
     local copy of it;
  2. two workers added (citus_add_node, replicate_reference_tables), clients
     on all three nodes ("3 nodes"): the same figures, from the coordinator
     and from a worker.

Every node runs with leaf_id.max_step = 1, which pins every tag at its
leaf_alloc.step (the dynamic step cannot grow): tag 't' (step 1,000,000)
refills once per million IDs, tag 'r1' (step 1) on every call, so a session
drawing 'r1' runs at the worker's refill rate.
"""
import os
import signal
import subprocess
import time

NODES = ["coord", "worker1", "worker2"]
T_STEP = 1_000_000

# The competitors of the IDs-per-second runs: key, SQL expression (sequences
# are local to each node).
GENERATORS = [
    ("segment", "leaf_segment_next('t')"),
    ("snowflake", "leaf_snowflake_next()"),
    ("nextval_c1", "nextval('s1')"),
    ("uuid", "gen_random_uuid()"),
]

# The statements the background worker runs, as pgbench scripts on table
# TABLE (leaf_id_catalog's leaf_alloc or leaf_worker, a reference table from
# phase 1 on, or a local copy in public): src/segment/refill.rs reserve() in its transaction (lock the
# row with a write, move max_id on with the guard, read it back, commit), and
# src/snowflake/lease_renew.rs persist() (one UPDATE, autocommit). Constants stand
# in for the worker's parameters.
RESERVE = """BEGIN;
UPDATE TABLE SET update_time = pg_catalog.now() WHERE biz_tag OPERATOR(pg_catalog.=) 'bench_rt' RETURNING max_id AS m, step \\gset
UPDATE TABLE SET update_time = pg_catalog.now(), max_id = CASE WHEN max_id OPERATOR(pg_catalog.=) :m THEN :m + 1 ELSE public.leaf_id_alloc_row_conflict(biz_tag, max_id) END WHERE biz_tag OPERATOR(pg_catalog.=) 'bench_rt' RETURNING max_id;
SELECT max_id FROM TABLE WHERE biz_tag OPERATOR(pg_catalog.=) 'bench_rt';
COMMIT;
"""
PERSIST = """UPDATE TABLE SET last_timestamp = CASE WHEN node_name OPERATOR(pg_catalog.=) 'bench-renewal' AND owner_token OPERATOR(pg_catalog.=) 42 THEN GREATEST(last_timestamp, 4102444800000) ELSE public.leaf_id_worker_row_conflict(worker_id, node_name, owner_token) END, epoch_ms = 1288834974657, heartbeat_at = pg_catalog.now() WHERE worker_id OPERATOR(pg_catalog.=) 1023 RETURNING last_timestamp;
"""
STATEMENTS = [
    ("reserve_ref", RESERVE.replace("TABLE", "leaf_id_catalog.leaf_alloc")),
    ("reserve_local", RESERVE.replace("TABLE", "public.bench_alloc_local")),
    ("persist_ref", PERSIST.replace("TABLE", "leaf_id_catalog.leaf_worker")),
    ("persist_local", PERSIST.replace("TABLE", "public.bench_worker_local")),
]

# Run on every node once leaf_id is there: objects local to the node (DDL
# propagation off, so that Citus does not create them elsewhere).
NODE_PREP = """
SET citus.enable_ddl_propagation = off;
CREATE SEQUENCE IF NOT EXISTS s1 CACHE 1;
-- one call after the other for `seconds`: with a step-1 tag each call takes
-- a segment of its own, so the calls run at the worker's refill rate
CREATE OR REPLACE FUNCTION bench_drain(tag text, seconds double precision, OUT calls bigint, OUT us double precision)
LANGUAGE plpgsql AS $f$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
  calls := 0;
  LOOP
    PERFORM leaf_segment_next(tag);
    calls := calls + 1;
    EXIT WHEN clock_timestamp() >= t0 + make_interval(secs => seconds);
  END LOOP;
  us := extract(epoch FROM clock_timestamp() - t0) * 1e6;
END $f$;
-- local copies of the shared tables, for the statements timed on both
CREATE TABLE IF NOT EXISTS public.bench_alloc_local (LIKE leaf_id_catalog.leaf_alloc INCLUDING ALL);
CREATE TABLE IF NOT EXISTS public.bench_worker_local (LIKE leaf_id_catalog.leaf_worker INCLUDING ALL);
INSERT INTO public.bench_alloc_local (biz_tag, step) VALUES ('bench_rt', 1) ON CONFLICT DO NOTHING;
INSERT INTO public.bench_worker_local (worker_id, node_name, owner_token, last_timestamp, epoch_ms)
  VALUES (1023, 'bench-renewal', 42, 0, 1288834974657) ON CONFLICT DO NOTHING;
"""


class Nodes:
    """The three servers: init, start, stop (through scripts/cluster.sh)."""

    def __init__(self, B):
        self.B = B
        self.base = os.path.join(B.ROOT, "target", "bench-citus")
        self.port = {n: B.P["mn_port"] + i for i, n in enumerate(NODES)}
        self.started = set()

    def sh(self, script, *args):
        r = subprocess.run(["bash", "-c", f'. scripts/cluster.sh; {script}', "_", *args], cwd=self.B.ROOT,
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise self.B.BenchError(f"{script} {' '.join(args)}: {r.stderr.strip()[-800:]}")

    def dir(self, name):
        return os.path.join(self.base, name)

    def init(self, name):
        d = self.dir(name)
        self.sh('cluster_stop "$1" immediate; cluster_init "$1" "$2"', d, str(self.port[name]))
        with open(os.path.join(d, "postgresql.conf"), "a") as f:
            f.write(f"""
# benchmark section 7 (read back into docs/BENCHMARKS.md)
shared_preload_libraries = 'citus,leaf_id'
max_worker_processes = 32
shared_buffers = 256MB
max_wal_size = 8GB
checkpoint_timeout = 30min
autovacuum = off
jit = off
max_parallel_workers_per_gather = 0
citus.log_remote_commands = off
leaf_id.node_name = '{name}'
# every tag keeps its leaf_alloc.step (see bench/bench_multinode.py)
leaf_id.max_step = 1
""")

    def start(self, name):
        self.started.add(name)
        self.sh('cluster_start "$1"', self.dir(name))

    def stop_all(self):
        for name in NODES:
            try:
                self.sh('cluster_stop "$1" fast || cluster_stop "$1" immediate', self.dir(name))
            except Exception as e:  # noqa: BLE001 - report and go on stopping the others
                self.B.note_error(f"multinode stop {name}", str(e))

    def psql(self, name, sql, timeout=600):
        return self.B.psql(sql, db="postgres", port=self.port[name], timeout=timeout)


def citus_missing():
    """Why Citus cannot run here, or None."""
    if os.environ.get("BENCH_CITUS_SKIP"):
        return os.environ["BENCH_CITUS_SKIP"]
    r = subprocess.run(["/usr/lib/postgresql/15/bin/pg_config", "--pkglibdir", "--sharedir"],
                       capture_output=True, text=True)
    lib, share = r.stdout.split("\n")[:2]
    missing = [p for p in (os.path.join(lib, "citus.so"), os.path.join(share, "extension", "citus.control"))
               if not os.path.exists(p)]
    if missing:
        return ("Citus is not installed for PostgreSQL 15 (missing " + ", ".join(missing) + "); "
                "set LEAF_ID_CITUS_TARBALL to a Citus 13.x source tarball, or install Citus")
    return None


def run(B):
    P = B.P
    reason = citus_missing()
    if reason:
        B.log("#" * 78)
        B.log(f"# SKIP: section 7 (many nodes, Citus) NOT RUN: {reason}")
        B.log("#" * 78)
        return {"skipped": reason}
    nodes = Nodes(B)
    res = {"params": {"seconds": P["mn_seconds"], "reps": P["mn_reps"], "clients_per_node": P["mn_clients"],
                      "batch": P["batch"], "ports": nodes.port, "t_step": T_STEP},
           "phase_seconds": {}}

    def on_term(signum, frame):
        raise SystemExit(f"signal {signum}")
    old = signal.signal(signal.SIGTERM, on_term)
    try:
        for n in NODES:
            nodes.init(n)
        t0 = time.time()
        phase0(B, nodes, res)
        res["phase_seconds"]["0"] = round(time.time() - t0, 1)
        t0 = time.time()
        phase1(B, nodes, res)
        res["phase_seconds"]["1"] = round(time.time() - t0, 1)
        t0 = time.time()
        phase2(B, nodes, res)
        res["phase_seconds"]["2"] = round(time.time() - t0, 1)
    except (B.BenchError, subprocess.TimeoutExpired) as e:
        B.note_error("multinode", str(e))
    finally:
        nodes.stop_all()
        signal.signal(signal.SIGTERM, old)
    return res


# ---------------------------------------------------------------- phases

def phase0(B, nodes, res):
    """The coordinator with leaf_id's tables local."""
    B.log("multinode phase 0: the coordinator alone, leaf_id's tables local")
    nodes.start("coord")
    nodes.psql("coord", f"""
CREATE EXTENSION citus;
CREATE EXTENSION leaf_id;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, description) VALUES
  ('t', {T_STEP}, 'benchmark: IDs per second'),
  ('r1', 1, 'benchmark: a refill per call'),
  ('bench_rt', 1, 'benchmark: the worker''s refill statements run by pgbench');
-- the row pgbench renews like a worker's lease (worker id 1023 stays unused by the nodes)
INSERT INTO leaf_id_catalog.leaf_worker (worker_id, node_name, owner_token, last_timestamp, epoch_ms)
  VALUES (1023, 'bench-renewal', 42, 0, 1288834974657);
""")
    nodes.psql("coord", NODE_PREP)
    warm(B, nodes, "coord")
    v = nodes.psql("coord", "SELECT extversion FROM pg_extension WHERE extname = 'citus';").strip()
    res["citus_version"] = v
    res["settings"] = dict(line.split("|", 1) for line in nodes.psql("coord", """
SELECT name, current_setting(name) FROM pg_settings WHERE name IN
 ('shared_preload_libraries', 'shared_buffers', 'synchronous_commit', 'fsync', 'leaf_id.max_step',
  'citus.max_adaptive_executor_pool_size', 'citus.max_cached_conns_per_worker', 'max_connections')
ORDER BY name;""").splitlines())
    res["refill_local"] = drains(B, nodes, [("coord", ["coord"])])


def phase1(B, nodes, res):
    """The coordinator alone, leaf_id's tables reference tables."""
    B.log("multinode phase 1: the coordinator alone, leaf_alloc and leaf_worker reference tables")
    nodes.psql("coord", f"""
SELECT citus_set_coordinator_host('127.0.0.1', {nodes.port['coord']});
SELECT create_reference_table('leaf_id_catalog.leaf_opaque_domain'), create_reference_table('leaf_id_catalog.leaf_alloc'), create_reference_table('leaf_id_catalog.leaf_alloc_encoding'), create_reference_table('leaf_id_catalog.leaf_worker');
""")
    warm(B, nodes, "coord")
    res["throughput_1"] = throughput(B, nodes, ["coord"])
    res["refill_ref_1"] = drains(B, nodes, [("coord", ["coord"])])
    res["statements_1"] = {"coord": statements(B, nodes, "coord")}


def phase2(B, nodes, res):
    """Two workers added: three nodes."""
    B.log("multinode phase 2: coordinator + 2 workers")
    for w in NODES[1:]:
        nodes.start(w)
        nodes.psql(w, "CREATE EXTENSION citus;")
        nodes.psql("coord", f"SELECT citus_add_node('127.0.0.1', {nodes.port[w]});")
    nodes.psql("coord", "SELECT replicate_reference_tables('block_writes');")
    placements = nodes.psql("coord", """
SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_shard s USING (shardid)
WHERE s.logicalrelid IN ('leaf_id_catalog.leaf_alloc'::regclass, 'leaf_id_catalog.leaf_worker'::regclass);""").strip()
    res["placements"] = int(placements)
    for w in NODES[1:]:
        nodes.psql(w, NODE_PREP)
    ids = {}
    for n in NODES:
        warm(B, nodes, n)
        ids[n] = int(nodes.psql(n, "SELECT (leaf_snowflake_decode(leaf_snowflake_next())).worker_id;").strip())
    res["worker_ids"] = ids
    B.log(f"multinode: {placements} placements of the two shared tables; snowflake worker ids {ids}")
    if len(set(ids.values())) != len(NODES):
        B.note_error("multinode worker ids", f"the nodes share a snowflake worker id: {ids}")
    res["throughput_3"] = throughput(B, nodes, NODES)
    res["refill_ref_3"] = drains(B, nodes, [("coord", ["coord"]), ("worker1", ["worker1"]), ("all", NODES)])
    res["statements_3"] = {n: statements(B, nodes, n) for n in ("coord", "worker1")}


# ---------------------------------------------------------------- measurements

def warm(B, nodes, n):
    """First use on the node (starts its worker, claims the snowflake worker id,
    loads the tags): not measured."""
    out = nodes.psql(n, "SELECT 'w', count(leaf_segment_next('t')), count(leaf_snowflake_next()), "
                        "count(nextval('s1')) FROM generate_series(1, 10000);"
                        "SELECT 'r', count(leaf_segment_next('r1')) FROM generate_series(1, 10);")
    if B.tagged(out, "w") != ["10000", "10000", "10000"]:
        raise B.BenchError(f"warm-up on {n} returned wrong counts: {out}")


def seg_counters(B, nodes, n, tag):
    f = B.tagged(nodes.psql(n, f"SELECT 'c', coalesce(sum(waits), 0), coalesce(sum(refills), 0) "
                               f"FROM leaf_segment_status WHERE tag = '{tag}';"), "c")
    return int(f[0]), int(f[1])


def throughput(B, nodes, where):
    """IDs per second on each node of `where`, pgbench on all of them at once,
    BENCH_MN_CLIENTS clients each, BENCH_BATCH IDs per transaction."""
    P, b, c = B.P, B.P["batch"], B.P["mn_clients"]
    res = {k: [] for k, _ in GENERATORS}
    for rep in range(P["mn_reps"]):
        for key, expr in B.rotated(GENERATORS, rep):
            try:
                pre = {n: seg_counters(B, nodes, n, "t") for n in where}
                procs = {n: B.pgbench_start(f"mn_{key}_{n}", f"SELECT count({expr}) FROM generate_series(1, {b}) g",
                                            c, port=nodes.port[n], db="postgres", seconds=P["mn_seconds"])
                         for n in where}
                per = {}
                for n, proc in procs.items():
                    r = B.pgbench_finish(proc)
                    w, rf = seg_counters(B, nodes, n, "t")
                    per[n] = {"ids_per_s": r["tps"] * b, "transactions": r["transactions"],
                              "seg_waits": w - pre[n][0], "seg_refills": rf - pre[n][1]}
                res[key].append(per)
                B.log(f"multinode {len(where)} node(s) rep {rep + 1} {key:11s} "
                      + "  ".join(f"{n} {v['ids_per_s'] / 1e6:6.3f}" for n, v in per.items()) + " M IDs/s")
            except (B.BenchError, subprocess.TimeoutExpired) as e:
                B.note_error(f"multinode throughput {len(where)} nodes {key} rep {rep + 1}", str(e))
    return res


def drains(B, nodes, cases):
    """The refill cycle: one session per node of each case draws tag 'r1'
    (step 1, so one refill per call) for BENCH_MN_SECONDS; the worker's
    refills per second and the microseconds per refill, per node."""
    P = B.P
    res = {name: [] for name, _ in cases}
    for rep in range(P["mn_reps"]):
        for name, where in B.rotated(cases, rep):
            try:
                pre = {n: seg_counters(B, nodes, n, "r1") for n in where}
                procs = {}
                for n in where:
                    procs[n] = subprocess.Popen(
                        [f"{B.PGBIN}/psql", "-X", "-q", "-At", "-F", "|", "-v", "ON_ERROR_STOP=1",
                         *B.conn_args(nodes.port[n]), "-d", "postgres", "-c",
                         f"SELECT 'd', calls, us FROM bench_drain('r1', {P['mn_seconds']});"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                per = {}
                for n, proc in procs.items():
                    out, err = proc.communicate(timeout=P["mn_seconds"] * 20 + 120)
                    if proc.returncode != 0:
                        raise B.BenchError(f"bench_drain on {n}: {err.strip()[-800:]}")
                    calls, us = B.tagged(out, "d")
                    w, rf = seg_counters(B, nodes, n, "r1")
                    per[n] = {"calls": int(calls), "us": float(us), "waits": w - pre[n][0],
                              "refills": rf - pre[n][1]}
                res[name].append(per)
                B.log(f"multinode refill rep {rep + 1} {name:8s} "
                      + "  ".join(f"{n}: {v['refills']} refills, {v['us'] / max(v['refills'], 1):7.0f} us each "
                                  f"({v['waits']} of {v['calls']} calls waited)" for n, v in per.items()))
            except (B.BenchError, subprocess.TimeoutExpired) as e:
                B.note_error(f"multinode refill {name} rep {rep + 1}", str(e))
    return res


def copy_by_copy_renewal(B, nodes, n):
    """The lease renewal as the worker runs it on Citus (src/citus/copies.rs):
    node n's own copy of leaf_worker (the reference table's shard) in the
    transaction, every other copy through master_run_on_worker, each in a
    transaction of its own on a new connection. Checked once: every copy
    must take it."""
    shard = nodes.psql(n, "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'leaf_id_catalog.leaf_worker'::regclass;").strip()
    others = [line.split("|") for line in nodes.psql(n, """
SELECT d.nodename, d.nodeport FROM pg_dist_placement p JOIN pg_dist_shard s USING (shardid)
JOIN pg_dist_node d ON d.groupid = p.groupid
WHERE s.logicalrelid = 'leaf_id_catalog.leaf_worker'::regclass AND d.groupid <> (SELECT groupid FROM pg_dist_local_group)
ORDER BY 1, 2;""").split()]
    update = PERSIST.strip().replace("TABLE", f"leaf_id_catalog.leaf_worker_{shard}").replace(" RETURNING last_timestamp;", "")
    lines = ["BEGIN;",
             "SELECT pg_catalog.set_config('citus.enable_manual_changes_to_shards', 'on', true);",
             update + ";"]
    if others:
        do = ("DO $leaf_id$ BEGIN PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true); "
              "PERFORM pg_catalog.set_config('lock_timeout', '1000', true); "
              "PERFORM pg_catalog.set_config('citus.enable_manual_changes_to_shards', 'on', true); "
              f"{update}; IF NOT FOUND THEN RAISE EXCEPTION 'no row 1023'; END IF; END $leaf_id$")
        lit = "'" + do.replace("'", "''") + "'"
        hosts = ", ".join(f"'{h}'" for h, _ in others)
        ports = ", ".join(p for _, p in others)
        lines += ["SELECT pg_catalog.set_config('citus.node_connection_timeout', '1000', true);",
                  f"SELECT count(*) FILTER (WHERE success) FROM pg_catalog.master_run_on_worker("
                  f"ARRAY[{hosts}]::text[], ARRAY[{ports}]::int[], ARRAY[{', '.join([lit] * len(others))}]::text[], true);"]
    lines.append("COMMIT;")
    script = "\n".join(lines) + "\n"
    acks = nodes.psql(n, script).split()
    if others and acks[-1:] != [str(len(others))]:
        raise B.BenchError(f"the copy-by-copy renewal on {n} reached {acks} of {len(others)} other copies")
    return script


def statements(B, nodes, n):
    """The worker's statements (RESERVE, PERSIST) from pgbench, one client, on
    the shared table and on its local copy, on node n; and the renewal copy
    by copy, as the worker runs it on Citus."""
    P = B.P
    scripts = list(STATEMENTS)
    try:
        scripts.append(("persist_quorum", copy_by_copy_renewal(B, nodes, n)))
    except (B.BenchError, subprocess.TimeoutExpired) as e:
        B.note_error(f"multinode statement persist_quorum on {n}", str(e))
    res = {k: [] for k, _ in scripts}
    for rep in range(P["mn_reps"]):
        for key, script in B.rotated(scripts, rep):
            prefix = os.path.join(P["work"], f"mn_{key}_{n}_{rep + 1}")
            try:
                r = B.pgbench(f"mn_{key}_{n}", script, 1, log_prefix=prefix, port=nodes.port[n], db="postgres",
                              seconds=P["mn_seconds"], raw=True)
                lat, _ = B.read_latency_log(prefix)
                r.update({"mean_us": 1e6 / r["tps"], "p50_us": B.percentile(lat, 0.5),
                          "p99_us": B.percentile(lat, 0.99)})
                res[key].append(r)
                B.log(f"multinode statement rep {rep + 1} {n:7s} {key:14s} {r['mean_us']:8.0f} us mean, "
                      f"p99 {r['p99_us']} us")
            except (B.BenchError, subprocess.TimeoutExpired) as e:
                B.note_error(f"multinode statement {key} on {n} rep {rep + 1}", str(e))
    return res
