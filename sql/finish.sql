-- Views and comments, after the functions exist (finalize).

CREATE VIEW leaf_segment_status AS SELECT * FROM leaf_segment_status();
CREATE VIEW leaf_snowflake_status AS SELECT * FROM leaf_snowflake_status();

COMMENT ON FUNCTION leaf_segment_next(text) IS
  'Next ID of a segment-mode tag (a row of leaf_alloc): unique per tag and database, increasing apart from gaps.';
COMMENT ON FUNCTION leaf_segment_status() IS
  'Cached segment-mode tags of this database: both segments, refills, waits, dynamic step.';
COMMENT ON VIEW leaf_segment_status IS
  'Cached segment-mode tags of this database: both segments, refills, waits, dynamic step.';
COMMENT ON FUNCTION leaf_snowflake_next() IS
  'Next snowflake ID: (ms - epoch) << 22 | worker_id << 12 | sequence, as Meituan Leaf.';
COMMENT ON FUNCTION leaf_snowflake_decode(bigint) IS
  'Timestamp, worker id and sequence of a snowflake ID.';
COMMENT ON FUNCTION leaf_snowflake_min_id(timestamptz) IS
  'Smallest snowflake ID of that millisecond, for range predicates and partition bounds.';
COMMENT ON FUNCTION leaf_snowflake_status() IS
  'Snowflake generator of this database: worker id and its source, clock marks, rollback events.';
COMMENT ON VIEW leaf_snowflake_status IS
  'Snowflake generator of this database: worker id and its source, clock marks, rollback events.';
COMMENT ON FUNCTION leaf_id_reset_cache() IS
  'Drops the segments this database has cached in shared memory (their unused IDs become gaps) and re-claims the snowflake worker id. Run by CREATE EXTENSION.';

-- a database that had leaf_id before must not reuse what was cached from the dropped tables
SELECT leaf_id_reset_cache();
