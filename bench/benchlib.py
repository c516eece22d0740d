"""What the benchmark scripts share: SQL through psql, and the function that
times a query inside the server. Imported by bench_run.py (and through it by
bench_multinode.py) and bench_compare.py; bench_standby.py talks to its
servers through psycopg2 instead (it times connections, not queries)."""
import subprocess


class BenchError(Exception):
    pass


def psql_args(pgbin, port, db):
    """psql's command line for a server on 127.0.0.1 (unaligned, tuples
    only, '|' separated, stop at the first error)."""
    return [f"{pgbin}/psql", "-X", "-q", "-At", "-F", "|", "-v", "ON_ERROR_STOP=1",
            "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", db]


def psql(pgbin, port, db, sql, timeout=3600, env=None):
    """Run SQL through psql; its stdout. BenchError when psql fails."""
    r = subprocess.run(psql_args(pgbin, port, db), input=sql, capture_output=True, text=True,
                       timeout=timeout, env=env)
    if r.returncode != 0:
        raise BenchError(f"psql on port {port} exit {r.returncode}: {r.stderr.strip()}\n"
                         f"-- SQL:\n{sql.strip()[:600]}")
    return r.stdout


# A query timed inside the server (no client round trip in the figure).
BENCH_TIME_FUNCTION = """
CREATE FUNCTION bench_time(q text, OUT us double precision, OUT n bigint) LANGUAGE plpgsql AS $f$
DECLARE t0 timestamptz;
BEGIN
  t0 := clock_timestamp();
  EXECUTE q INTO n;
  us := extract(epoch FROM clock_timestamp() - t0) * 1e6;
END $f$;
"""
