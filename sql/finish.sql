-- Views and comments, after the functions exist (finalize).

CREATE VIEW leaf_segment_status AS SELECT * FROM leaf_segment_status();
CREATE VIEW leaf_snowflake_status AS SELECT * FROM leaf_snowflake_status();

COMMENT ON FUNCTION leaf_segment_next(text) IS
  'Next ID of a segment-mode tag (a row of leaf_alloc): unique per tag and database, increasing apart from gaps.';
COMMENT ON FUNCTION leaf_segment_next(text, integer) IS
  'n IDs of a segment-mode tag in one call (a set); n IDs that fit in the current segment cost one atomic step.';
COMMENT ON FUNCTION leaf_segment_status() IS
  'Cached segment-mode tags of this database: both segments, refills, waits, dynamic step.';
COMMENT ON VIEW leaf_segment_status IS
  'Cached segment-mode tags of this database: both segments, refills, waits, dynamic step.';
COMMENT ON FUNCTION leaf_snowflake_next() IS
  'Next snowflake ID: (ms - epoch) << 22 | worker_id << 12 | sequence, as Meituan Leaf.';
COMMENT ON FUNCTION leaf_snowflake_next(integer) IS
  'n snowflake IDs in one call (a set, increasing); one compare-and-swap per millisecond run of up to 4096.';
COMMENT ON FUNCTION leaf_snowflake_decode(bigint) IS
  'Timestamp, worker id and sequence of a snowflake ID, with leaf_id.epoch_ms (STABLE: use the form with the epoch in indexes).';
COMMENT ON FUNCTION leaf_snowflake_decode(bigint, bigint) IS
  'Timestamp, worker id and sequence of a snowflake ID under the given epoch (Unix ms); IMMUTABLE.';
COMMENT ON FUNCTION leaf_snowflake_min_id(timestamptz) IS
  'Smallest snowflake ID of that millisecond with leaf_id.epoch_ms, for range predicates (STABLE: use the form with the epoch for partition bounds and indexes).';
COMMENT ON FUNCTION leaf_snowflake_min_id(timestamptz, bigint) IS
  'Smallest snowflake ID of that millisecond under the given epoch (Unix ms); IMMUTABLE, for partition bounds and indexes.';
COMMENT ON FUNCTION leaf_snowflake_status() IS
  'Snowflake generator of this database: worker id and its source, clock marks, rollback events.';
COMMENT ON VIEW leaf_snowflake_status IS
  'Snowflake generator of this database: worker id and its source, clock marks, rollback events.';
COMMENT ON FUNCTION leaf_id_worker_row_conflict(integer, text, bigint) IS
  'Internal: raises an error; the worker''s guarded updates of leaf_worker call it on a copy whose row is not as expected.';
COMMENT ON FUNCTION leaf_id_alloc_row_conflict(text, bigint) IS
  'Internal: raises an error; the worker''s guarded refills call it on a copy of leaf_alloc whose max_id differs.';
COMMENT ON FUNCTION leaf_id_reset_cache() IS
  'Drops the segments this database has cached in shared memory (their unused IDs become gaps) and re-claims the snowflake worker id. Run by CREATE EXTENSION.';

-- Privileges (README, "Privileges"). Drawing IDs is open to PUBLIC, as a
-- column default needs (REVOKE EXECUTE ... FROM PUBLIC to restrict it). The
-- tables are the superuser's: PUBLIC has no privilege on them. What shows tag
-- names, ranges and the worker registry is for pg_monitor, as pg_stat_*
-- details; what changes state is for superusers only.
REVOKE ALL ON leaf_segment_status, leaf_snowflake_status FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION leaf_segment_status(), leaf_snowflake_status() FROM PUBLIC;
GRANT SELECT ON leaf_segment_status, leaf_snowflake_status TO pg_monitor;
GRANT EXECUTE ON FUNCTION leaf_segment_status(), leaf_snowflake_status() TO pg_monitor;
REVOKE EXECUTE ON FUNCTION leaf_id_reset_cache() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION leaf_id_worker_row_conflict(integer, text, bigint),
  leaf_id_alloc_row_conflict(text, bigint) FROM PUBLIC;
REVOKE ALL ON leaf_alloc, leaf_worker FROM PUBLIC;

-- a database that had leaf_id before must not reuse what was cached from the dropped tables
SELECT leaf_id_reset_cache();
