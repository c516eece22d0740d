-- leaf_id snowflake helpers at their edges
\set VERBOSITY terse

-- decode and min_id depend on leaf_id.epoch_ms: STABLE; the forms that take
-- the epoch are IMMUTABLE and may go into indexes and partition bounds
SELECT p.oid::regprocedure AS function, p.provolatile
FROM pg_proc p WHERE p.proname IN ('leaf_snowflake_decode', 'leaf_snowflake_min_id') ORDER BY p.oid::regprocedure::text;
SELECT * FROM leaf_snowflake_decode((123::bigint << 22) | (5 << 12) | 7, 1288834974657);
SELECT leaf_snowflake_min_id('2024-01-01 00:00:00+00', 1288834974657) = leaf_snowflake_min_id('2024-01-01 00:00:00+00');
CREATE TABLE sf_events (id bigint) PARTITION BY RANGE (id);
CREATE TABLE sf_events_2024 PARTITION OF sf_events
  FOR VALUES FROM (leaf_snowflake_min_id('2024-01-01+00', 1288834974657))
  TO (leaf_snowflake_min_id('2025-01-01+00', 1288834974657));
DROP TABLE sf_events;
CREATE TABLE sf_log (at timestamptz);
CREATE INDEX ON sf_log ((leaf_snowflake_min_id(at, 1288834974657)));
SELECT regress_sqlstate($$CREATE INDEX ON sf_log ((leaf_snowflake_min_id(at)))$$) AS stable_in_index;
DROP TABLE sf_log;

-- epoch 0: IDs of the first millisecond decode to 1970-01-01 (no internal error)
SELECT timestamp AT TIME ZONE 'UTC' AS ts, worker_id, sequence FROM leaf_snowflake_decode(4097, 0);
-- epochs outside what a snowflake epoch can be
SELECT regress_sqlstate('SELECT * FROM leaf_snowflake_decode(1, -1)') AS negative_epoch;
SELECT regress_sqlstate('SELECT * FROM leaf_snowflake_decode(1, 9223372036854775807)') AS huge_epoch;
-- far-future timestamps: an error, not an overflow
SELECT regress_sqlstate($$SELECT leaf_snowflake_min_id('294276-12-31 23:59:59+00')$$) AS far_future;
SELECT regress_sqlstate($$SELECT leaf_snowflake_min_id('294276-12-31 23:59:59+00', 0)$$) AS far_future_epoch;
SELECT regress_sqlstate($$SELECT leaf_snowflake_min_id('4713-01-01 00:00:00+00 BC')$$) AS far_past;

-- leaf_id.node_name longer than the 256 bytes shared memory keeps is refused
-- when it is set (22023), so renewals never compare a cut name
SELECT regress_sqlstate(format('SET leaf_id.node_name = %L', repeat('n', 257))) AS node_name_257_bytes;
ALTER SYSTEM SET leaf_id.node_name = 'ééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé';
SELECT set_config('leaf_id.node_name', repeat('n', 256), false) IS NOT NULL AS node_name_256_bytes_set;
SELECT octet_length(current_setting('leaf_id.node_name')) AS node_name_256_bytes_kept;
RESET leaf_id.node_name;
