#!/usr/bin/python3
"""leaf_id under a real HA manager: Patroni 4 with its Raft DCS, three
PostgreSQL nodes on loopback, leaf_id.synchronized_standby_slots = '*'.

An application draws segment and snowflake IDs through whichever node leads
(libpq multi-host, target_session_attrs=read-write) while:
  A. the leader's postmaster is killed (kill -9; Patroni restarts it),
  B. a switchover moves the leader,
  C. the leader's node dies while its standbys lag (its walsenders stopped
     with SIGSTOP, then Patroni, the postmaster and its children killed with
     kill -9): a standby, its clock 45 s behind the leader's, is promoted
     after the leader key's ttl, and refuses snowflake calls with 58000 until
     its clock passes the high-water mark it has,
  D. the dead node's Patroni is started again: it rewinds its data directory
     with pg_rewind and follows the new leader; there both functions refuse
     with 25006.
Checks: no ID of either mode is handed out twice; every scenario ends with
both modes issuing from a leader; in C the old leader stops issuing once its
standbys stop confirming (55P03), and the new leader refuses snowflake calls
with 58000 before its first snowflake ID (its clock is further behind the
mark than its claim waits: see OFFSET_MS). The time without IDs of each mode is
measured per scenario and printed.
C's premises are checked too, or C would pass without testing anything:
  - the standbys lack the old leader's last reservations: each standby's
    pg_last_wal_receive_lsn() is at or before the leader's pg_current_wal_lsn()
    when its walsenders were stopped and behind it at the kill; the leader
    committed refills (leaf_alloc.max_id) or lease renewals
    (leaf_worker.last_timestamp) after the stop; and each standby's max_id
    and mark are below the leader's at the kill (a refill committed just
    before the stop may never have reached it);
  - the clock offset took effect: SHOW leaf_id.test_clock_offset_ms reads
    -45000 (ms) on both standbys; the new leader's first snowflake IDs carry
    a clock 45 s behind the wall clock; with that clock, when the new leader
    was seen leading, it was behind the last millisecond the old leader
    issued snowflake IDs in (it could have reissued them); with the guard,
    its first ID lies above that millisecond (it held snowflake back).

Run by scripts/test-patroni.sh (as the postgres user, PYTHONPATH with
Patroni). Environment: PGBIN, WORK (emptied), LEAF_ID_PATRONI_RULE ('*' by
default). 'off' is the guard-off mode: leaf_id.synchronized_standby_slots
left empty, scenario C alone (with its premise checks), and the run passes
only if C hands out at least one ID twice (segment or snowflake): the proof
that the check "no ID twice" can fail.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import psutil
import psycopg2

PGBIN = os.environ["PGBIN"]
WORK = os.environ["WORK"]
RULE = os.environ.get("LEAF_ID_PATRONI_RULE", "*")
GUARD = RULE != "off"
PY = sys.executable
NODES = ["n1", "n2", "n3"]
T0 = time.monotonic()
# wall clock (Unix ms) of a time.monotonic() value
WALL0 = time.time() - T0
failures = []
# the standbys' clock offset in scenario C (leaf_id.test_clock_offset_ms).
# The promoted standby finds the old leader's row with a lease ahead of its
# clock (the mark it has: the old leader's clock when its walsenders stopped,
# plus lease_ahead, 3 s) and watches the row for at most two heartbeats and
# the worker's 5 s lock timeout (7 s); it then waits for its clock to pass
# the mark only if that is at most 7 s more, else refuses calls with 58000
# (lease_claim.rs, wait_for_floor). So 58000 needs the clock more than 14 s
# behind the mark when the claim starts. The standby is promoted about 20 s
# (the ttl) after the kill, which comes about 10 s after the walsenders
# stopped: with 45 s it is about 45 - 30 + 3 = 18 to 21 s behind (with
# 30 s, a few seconds: its worker waited that out, callers got 55P03).
OFFSET_MS = -45000
# leaf_id.epoch_ms's default (the test leaves it): a snowflake ID's millisecond
EPOCH_MS = 1_288_834_974_657


def wall_ms(t):
    return int((WALL0 + t) * 1000)


def snowflake_ms(i):
    return (i >> 22) + EPOCH_MS


def lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def log(msg):
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", flush=True)


def check(ok, what):
    print(("ok - " if ok else "not ok - ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def free_base():
    """A base port b with b..b+2 (PostgreSQL), b+10.. (REST), b+20.. (Raft)
    free on loopback."""
    for base in range(26100, 31000, 50):
        ports = [base + d + i for d in (0, 10, 20) for i in range(3)]
        try:
            socks = []
            for p in ports:
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            for s in socks:
                s.close()
            return base
        except OSError:
            for s in socks:
                s.close()
    raise SystemExit("no free ports")


BASE = free_base()
PG_PORT = {n: BASE + i for i, n in enumerate(NODES)}
REST_PORT = {n: BASE + 10 + i for i, n in enumerate(NODES)}
RAFT_PORT = {n: BASE + 20 + i for i, n in enumerate(NODES)}
DSN = ("host=" + ",".join("127.0.0.1" for _ in NODES)
       + " port=" + ",".join(str(PG_PORT[n]) for n in NODES)
       + " dbname=postgres user=postgres target_session_attrs=read-write connect_timeout=2")


def config(name):
    # JSON is YAML: Patroni reads it as its configuration file
    leaf = {
        "shared_preload_libraries": "leaf_id",
        "max_worker_processes": 16,
        "wal_log_hints": "on",
        "lc_messages": "C",
        "log_min_messages": "warning",
        "leaf_id.refill_timeout": 3000,
        "leaf_id.standby_confirm_timeout": 3000,
        "leaf_id.max_step": 1000,
        "leaf_id.worker_id": 7,
        "leaf_id.node_name": "leaf_ha",
        "leaf_id.random_sequence_start": "off",
    }
    if GUARD:
        leaf["leaf_id.synchronized_standby_slots"] = RULE
    return {
        "scope": "leaf",
        "name": name,
        "log": {"level": "INFO"},
        "restapi": {"listen": f"127.0.0.1:{REST_PORT[name]}",
                    "connect_address": f"127.0.0.1:{REST_PORT[name]}"},
        "raft": {"data_dir": f"{WORK}/{name}-raft",
                 "self_addr": f"127.0.0.1:{RAFT_PORT[name]}",
                 "partner_addrs": [f"127.0.0.1:{RAFT_PORT[o]}" for o in NODES if o != name]},
        "bootstrap": {
            "dcs": {
                "ttl": 20, "loop_wait": 1, "retry_timeout": 5,
                # a member's slot goes with its member key (the default keeps
                # it 30 minutes, and leaf_id's '*' would wait for it)
                "member_slots_ttl": 0,
                "postgresql": {"use_pg_rewind": True, "use_slots": True,
                               "parameters": leaf},
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{PG_PORT[name]}",
            "connect_address": f"127.0.0.1:{PG_PORT[name]}",
            "data_dir": f"{WORK}/{name}",
            "bin_dir": PGBIN,
            "pgpass": f"{WORK}/{name}.pgpass",
            "authentication": {"superuser": {"username": "postgres"},
                               "replication": {"username": "postgres"},
                               "rewind": {"username": "postgres"}},
            "parameters": {"unix_socket_directories": WORK},
            "pg_hba": ["local all all trust",
                       "host all all 127.0.0.1/32 trust",
                       "host replication all 127.0.0.1/32 trust"],
        },
    }


procs = {}


def start_patroni(name):
    cfg = f"{WORK}/{name}.yml"
    with open(cfg, "w") as f:
        json.dump(config(name), f)
    out = open(f"{WORK}/{name}.log", "a")
    procs[name] = subprocess.Popen([PY, "-m", "patroni", cfg], stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)


def rest(name, path, body=None, timeout=2):
    req = urllib.request.Request(f"http://127.0.0.1:{REST_PORT[name]}{path}",
                                 data=None if body is None else json.dumps(body).encode(),
                                 method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        data = r.read()
    try:
        return json.loads(data)
    except ValueError:
        return data.decode()


def cluster(alive=None):
    for n in alive or NODES:
        try:
            return rest(n, "/cluster")
        except Exception:
            continue
    return None


def wait_for(what, fn, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            v = fn()
            if v:
                return v
        except Exception:
            pass
        time.sleep(0.2)
    raise SystemExit(f"timed out after {timeout} s waiting for {what}")


def leader(alive=None):
    c = cluster(alive)
    if not c:
        return None
    for m in c["members"]:
        if m["role"] == "leader" and m["state"] == "running":
            return m["name"]
    return None


def streaming(names, alive=None):
    c = cluster(alive)
    if not c:
        return False
    state = {m["name"]: m["state"] for m in c["members"]}
    return all(state.get(n) == "streaming" for n in names)


def sql(name, query):
    con = psycopg2.connect(host="127.0.0.1", port=PG_PORT[name], dbname="postgres", user="postgres",
                           connect_timeout=3)
    con.autocommit = True
    try:
        with con.cursor() as cur:
            cur.execute(query)
            return cur.fetchall() if cur.description else None
    finally:
        con.close()


def postmaster_pid(name):
    with open(f"{WORK}/{name}/postmaster.pid") as f:
        return int(f.readline())


# --- the application --------------------------------------------------------
drawn = {"segment": [], "snowflake": []}   # (time, [ids], sqlstate or None, port or None)
stop = threading.Event()
QUERY = {"segment": "SELECT leaf_segment_next('order') FROM generate_series(1, 100)",
         "snowflake": "SELECT leaf_snowflake_next() FROM generate_series(1, 100)"}


def drawer(mode):
    con = None
    while not stop.is_set():
        port = None
        try:
            if con is None:
                con = psycopg2.connect(DSN)
                con.autocommit = True
            port = con.info.port
            with con.cursor() as cur:
                cur.execute("SET statement_timeout = '10s'")
                cur.execute(QUERY[mode])
                ids = [r[0] for r in cur.fetchall()]
            drawn[mode].append((time.monotonic(), ids, None, port))
        except psycopg2.Error as e:
            drawn[mode].append((time.monotonic(), [], e.pgcode or "connection", port))
            try:
                if con is not None:
                    con.close()
            except Exception:
                pass
            con = None
            time.sleep(0.05)
        time.sleep(0.005)


def gap(mode, t_from, t_to):
    """The longest time in [t_from, t_to] without an ID of mode."""
    times = [t_from] + [t for t, ids, _, _ in drawn[mode] if ids and t_from <= t <= t_to] + [t_to]
    return max(b - a for a, b in zip(times, times[1:]))


def issued_after(mode, t, port=None):
    return any(ids for tt, ids, _, p in drawn[mode] if tt > t and port in (None, p))


def wait_issuing(after, timeout=90, port=None):
    """Until both modes issue again after the time after (from the server on
    port when given: a statement the old leader answered just after the time
    does not count)."""
    wait_for("both modes to issue again",
             lambda: issued_after("segment", after, port) and issued_after("snowflake", after, port), timeout)


# --- the cluster ------------------------------------------------------------
figures = []


def main():
    log(f"Patroni 3 nodes, PostgreSQL ports {PG_PORT}, rule {RULE!r}"
        + ("" if GUARD else ": the guard-off mode, scenario C alone, which must issue IDs twice"))
    # Raft needs two of the three for a quorum: all start at once, one bootstraps
    for n in NODES:
        start_patroni(n)
    first = wait_for("a leader", leader, 120)
    others = [n for n in NODES if n != first]
    sql(first, "CREATE EXTENSION leaf_id")
    sql(first, "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('order', 1000)")
    wait_for("the standbys to stream", lambda: streaming(others), 120)
    slots = wait_for("the leader's member slots",
                     lambda: (lambda r: r if len(r) == 2 else None)(
                         sql(first, "SELECT slot_name FROM pg_replication_slots "
                                    "WHERE slot_type = 'physical' AND active ORDER BY 1")), 60)
    log(f"leader {first}, slots {[s[0] for s in slots]}")

    threads = [threading.Thread(target=drawer, args=(m,), daemon=True)
               for m in ("segment", "segment", "snowflake")]
    for t in threads:
        t.start()
    time.sleep(3)

    if GUARD:
        scenario_a()
        scenario_b()
    dead, new = scenario_c()
    if GUARD:
        scenario_d(dead, new)

    stop.set()
    for t_ in threads:
        t_.join(20)

    # the rule: no ID twice (the guard-off mode: at least one ID twice)
    dups = {}
    for mode in drawn:
        ids = [i for _, batch, _, _ in drawn[mode] for i in batch]
        dups[mode] = len(ids) - len(set(ids))
        if GUARD:
            check(len(ids) > 0 and dups[mode] == 0, f"no {mode} ID twice ({len(ids)} drawn, {dups[mode]} twice)")
        else:
            log(f"guard off: {mode}: {len(ids)} drawn, {dups[mode]} twice")
    if not GUARD:
        check(dups["segment"] + dups["snowflake"] > 0,
              f"guard off: scenario C handed out at least one ID twice, so the check 'no ID twice' "
              f"can fail ({dups['segment']} segment, {dups['snowflake']} snowflake IDs twice)")
    worker_ids = {(i >> 12) & 0x3FF for _, batch, _, _ in drawn["snowflake"] for i in batch}
    check(worker_ids == {7}, f"every snowflake ID has worker id 7 ({sorted(worker_ids)})")

    print("\nscenario | leader after | time without segment IDs | without snowflake IDs")
    for key, what, a, b, lead_after in figures:
        print(f"{key}: {what} | {lead_after} | {gap('segment', a, b):.2f} s | {gap('snowflake', a, b):.2f} s")
    errors = {}
    for mode in drawn:
        for _, _, err, _ in drawn[mode]:
            if err:
                errors[(mode, err)] = errors.get((mode, err), 0) + 1
    print(f"refused statements (mode, SQLSTATE): {errors}")


def scenario_a():
    # A. the leader's postmaster killed
    lead = wait_for("a leader", leader, 60)
    t = time.monotonic()
    os.kill(postmaster_pid(lead), signal.SIGKILL)
    log(f"A: killed the postmaster of leader {lead}")
    wait_issuing(t)
    time.sleep(3)
    figures.append(("A", f"postmaster of the leader ({lead}) killed", t, time.monotonic(), wait_for("a leader", leader, 30)))


def scenario_b():
    # B. switchover
    lead = wait_for("a leader", leader, 60)
    cand = [n for n in NODES if n != lead][0]
    wait_for("both standbys streaming", lambda: streaming([n for n in NODES if n != lead]), 60)
    t = time.monotonic()
    rest(lead, "/switchover", {"leader": lead, "candidate": cand}, timeout=60)
    wait_for(f"{cand} to lead", lambda: leader() == cand, 60)
    wait_issuing(t)
    time.sleep(3)
    figures.append(("B", f"switchover {lead} to {cand}", t, time.monotonic(), wait_for("a leader", leader, 30)))


RESERVED = ("SELECT pg_current_wal_lsn()::text, "
            "(SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'order'), "
            "(SELECT last_timestamp FROM leaf_id_catalog.leaf_worker WHERE worker_id = 7)")


def offset_setting(name):
    """leaf_id.test_clock_offset_ms as a new session of name sees it:
    (SHOW's text, pg_settings' unit)."""
    shown = sql(name, "SHOW leaf_id.test_clock_offset_ms")[0][0]
    unit = sql(name, "SELECT unit FROM pg_settings WHERE name = 'leaf_id.test_clock_offset_ms'")[0][0]
    return shown, unit


def scenario_c():
    # C. the leader's node dies while its standbys lag
    lead = wait_for("a leader", leader, 60)
    others = [n for n in NODES if n != lead]
    wait_for("both standbys streaming", lambda: streaming(others), 60)
    # the standbys' clocks 45 s behind the leader's (conf-wide, as the worker
    # reads it): a promoted standby lacking the leader's newest lease would
    # issue snowflake IDs the leader issued in its last seconds
    for n in others:
        sql(n, f"ALTER SYSTEM SET leaf_id.test_clock_offset_ms = {OFFSET_MS}")
        sql(n, "SELECT pg_reload_conf()")
    # premise: the offset took effect on both standbys (a reload is
    # asynchronous: give the postmaster a few seconds)
    for n in others:
        end = time.monotonic() + 10
        while True:
            shown, unit = offset_setting(n)
            if (shown, unit) == (str(OFFSET_MS), "ms") or time.monotonic() > end:
                break
            time.sleep(0.2)
        check((shown, unit) == (str(OFFSET_MS), "ms"),
              f"C: SHOW leaf_id.test_clock_offset_ms reads {OFFSET_MS} (ms) on the standby {n} "
              f"({shown} {unit})")
    pm = psutil.Process(postmaster_pid(lead))
    senders = [p for p in pm.children() if "walsender" in " ".join(p.cmdline())]
    check(len(senders) == 2, f"C: the leader {lead} has 2 walsenders ({len(senders)})")
    t_lag = time.monotonic()
    for p in senders:
        p.send_signal(signal.SIGSTOP)
    # what the leader has written and reserved once its walsenders stopped:
    # the standbys can have received no more than that
    lsn_stop, max_id_stop, mark_stop = sql(lead, RESERVED)[0]
    log(f"C: stopped the walsenders of {lead} (its WAL at {lsn_stop}, max_id {max_id_stop}, "
        f"snowflake mark {mark_stop})")
    # long enough for both modes to run out under load: two segments, then
    # leaf_id.refill_timeout (3 s); the lease (3 s), then the same wait
    time.sleep(9)
    on_old = {m: [d for d in drawn[m] if d[0] > t_lag] for m in drawn}
    refused = {m: any(err == "55P03" for _, _, err, _ in on_old[m]) for m in on_old}
    after_lag = {m: sum(len(ids) for _, ids, _, _ in on_old[m]) for m in on_old}
    last_id_at = {m: max([tt - t_lag for tt, ids, _, _ in on_old[m] if ids], default=0.0) for m in on_old}
    log(f"C: with the standbys stopped the leader issued {after_lag} IDs, the last after "
        f"{last_id_at['segment']:.1f} s (segment) and {last_id_at['snowflake']:.1f} s (snowflake)")
    if GUARD:
        check(refused["segment"] and refused["snowflake"],
              f"C: unconfirmed, the leader refuses both modes with 55P03 ({refused})")
        check(after_lag["segment"] <= 2 * 1000 + 300,
              f"C: the leader issued at most its two segments (and runs in flight) of segment IDs "
              f"unconfirmed ({after_lag['segment']})")
    # premise: the standbys lack the leader's last commits that reserved IDs
    lsn_kill, max_id_kill, mark_kill = sql(lead, RESERVED)[0]
    # a refill may have committed just before the stop and be waiting for
    # its confirmation then (the worker starts no other): what must hold is
    # that the leader went on committing, and (below) that each standby
    # lacks its last reservations of both modes
    check(max_id_kill > max_id_stop or mark_kill > mark_stop,
          f"C: after its walsenders stopped the leader {lead} committed refills or lease renewals "
          f"(max_id {max_id_stop} to {max_id_kill}; snowflake mark {mark_stop} to {mark_kill}), "
          f"its WAL from {lsn_stop} to {lsn_kill}")
    marks = {}
    for n in others:
        recv, max_id_n, mark_n = sql(n, RESERVED.replace("pg_current_wal_lsn()", "pg_last_wal_receive_lsn()"))[0]
        marks[n] = mark_n
        check(recv is not None and lsn(recv) <= lsn(lsn_stop) < lsn(lsn_kill),
              f"C: the standby {n} received WAL up to {recv}: no further than the leader's "
              f"pg_current_wal_lsn() when its walsenders stopped ({lsn_stop}), "
              f"behind it before the kill ({lsn_kill})")
        check(max_id_n < max_id_kill and mark_n < mark_kill,
              f"C: the standby {n} lacks the leader's last reservations (its max_id {max_id_n}, the "
              f"leader's {max_id_kill}; its snowflake mark {mark_n}, the leader's {mark_kill})")
    t = time.monotonic()
    procs[lead].kill()
    for p in [pm] + pm.children():
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    procs[lead].wait()
    dead = lead
    log(f"C: killed Patroni and PostgreSQL of {dead}")
    new = wait_for("a new leader", lambda: (lambda l: l if l and l != dead else None)(leader(others)), 120)
    t_seen = time.monotonic()
    log(f"C: {new} leads")
    wait_issuing(t, port=PG_PORT[new])
    time.sleep(3)
    figures.append(("C", f"node {dead} dead with its standbys lagging, {new} promoted", t,
                    time.monotonic(), new))

    # premise: the new leader's snowflake generator ran on the shifted clock,
    # and that clock was behind the last millisecond the old leader issued
    # IDs in (it could have reissued them). One thread draws snowflake IDs:
    # its list is in time order, and before the new leader's first IDs every
    # ID came from earlier leaders
    sf = drawn["snowflake"]
    k = next((i for i, (tt, ids, _, port) in enumerate(sf)
              if tt > t and ids and port == PG_PORT[new]), None)
    if k is None:
        check(False, f"C: {new} issued snowflake IDs")
        return dead, new
    old_last_ms = max([snowflake_ms(i) for _, ids, _, _ in sf[:k] for i in ids], default=None)
    tt, ids, _, port = sf[k]
    # its clock: the newest millisecond of its first IDs less the wall clock
    # when they came back
    shift = max(snowflake_ms(i) for i in ids) - wall_ms(tt)
    check(OFFSET_MS - 1000 <= shift <= OFFSET_MS + 100,
          f"C: the first snowflake IDs of {new} carry its shifted clock: {shift} ms from the wall "
          f"clock when drawn ({OFFSET_MS} set)")
    behind = None if old_last_ms is None else old_last_ms - (wall_ms(t_seen) + shift)
    check(behind is not None and behind > 0,
          f"C: when {new} was seen leading, its clock ({shift} ms off) was {behind} ms behind the "
          f"last millisecond the old leader issued snowflake IDs in")
    refusals = {}
    first_58000 = None
    for tt2, _, err, port2 in sf[:k]:
        if tt2 > t and err and port2 == PG_PORT[new]:
            refusals[err] = refusals.get(err, 0) + 1
            if err == "58000" and first_58000 is None:
                first_58000 = tt2
    # how far its clock was behind the mark it has (the mark as the standby
    # had it before the promotion) when it was seen leading: 58000 needs more
    # than 14 s (see OFFSET_MS)
    mark_behind = marks[new] - (wall_ms(t_seen) + shift)
    log(f"C: {new} refused snowflake calls before its first ID: {refusals or 'none'}; seen leading "
        f"{t_seen - t:.1f} s after the kill, its clock {mark_behind} ms behind the mark it has; "
        f"first 58000 {'-' if first_58000 is None else f'{first_58000 - t_seen:.1f} s'} and first ID "
        f"{tt - t_seen:.1f} s after that")
    # further behind the mark than its claim waits, the new leader
    # refuses snowflake calls with 58000 before it issues (its worker first
    # watches the old holder's lease, calls time out meanwhile: 55P03)
    check(refusals.get("58000", 0) > 0,
          f"C: {new} refused snowflake calls with 58000 before its first snowflake ID "
          f"(its refusals {refusals or 'none'}; its clock {mark_behind} ms behind the mark it has "
          f"when seen leading)")
    if GUARD:
        first_ms = min(snowflake_ms(i) for i in ids)
        check(old_last_ms is not None and first_ms > old_last_ms,
              f"C: {new} held snowflake back until its clock passed the old leader's last "
              f"millisecond: its first ID is {None if old_last_ms is None else first_ms - old_last_ms} "
              f"ms above it")
    return dead, new


def scenario_d(dead, new):
    # D. the dead node comes back: pg_rewind, then it follows
    t = time.monotonic()
    start_patroni(dead)
    wait_for(f"{dead} to stream from {new}", lambda: streaming([dead]), 180)
    t_joined = time.monotonic()
    log(f"D: {dead} streams again after {t_joined - t:.1f} s")
    time.sleep(3)
    figures.append(("D", f"{dead} rewound and rejoined", t, time.monotonic(), wait_for("a leader", leader, 30)))
    with open(f"{WORK}/{dead}.log") as f:
        rewound = "pg_rewind exit code=0" in f.read()
    check(rewound, f"D: {dead}'s Patroni ran pg_rewind, and it succeeded (its log)")
    for fn, q in (("segment", "SELECT leaf_segment_next('order')"), ("snowflake", "SELECT leaf_snowflake_next()")):
        try:
            sql(dead, q)
            check(False, f"D: {fn} on the rejoined {dead} is refused with 25006 (it returned an ID)")
        except psycopg2.Error as e:
            check(e.pgcode == "25006", f"D: {fn} on the rejoined {dead} is refused with 25006 ({e.pgcode})")


def shutdown():
    for name, p in procs.items():
        if p.poll() is None:
            p.terminate()
    end = time.monotonic() + 30
    for name, p in procs.items():
        try:
            p.wait(max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
    for name in NODES:
        try:
            pid = postmaster_pid(name)
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass


try:
    main()
except SystemExit as e:
    failures.append(str(e))
    print(f"not ok - {e}", flush=True)
finally:
    stop.set()
    shutdown()
if failures:
    print(f"FAILED: {len(failures)} check(s): {failures}")
    sys.exit(1)
print(f"patroni: all checks passed in {time.monotonic() - T0:.0f} s")
