-- many IDs in one call
\set VERBOSITY terse

INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('batch', 10, 1000);
-- n IDs, consecutive where the segment has room
SELECT leaf_segment_next('batch', 5);
-- n = 0: no rows; NULL and negative n, NULL tag: errors
SELECT count(*) AS zero FROM leaf_segment_next('batch', 0);
SELECT regress_sqlstate($$SELECT leaf_segment_next('batch', NULL)$$) AS null_n;
SELECT regress_sqlstate($$SELECT leaf_segment_next('batch', -1)$$) AS negative_n;
SELECT regress_sqlstate($$SELECT leaf_segment_next(NULL, 3)$$) AS null_tag;
SELECT regress_sqlstate($$SELECT leaf_segment_next('never inserted', 3)$$) AS unknown_tag;
-- n larger than a segment (step 10) and than one fetch_add (65536): many
-- segments, every ID distinct, none issued before, all below max_id
CREATE TEMP TABLE batch_ids AS SELECT id FROM leaf_segment_next('batch', 200000) AS id;
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids, min(id) > 1004 AS after_the_five,
       max(id) < (SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'batch') AS reserved
FROM batch_ids;
-- single calls go on above the batch
SELECT leaf_segment_next('batch') > 1004 + 200000 - 1 AS single_after_batch;

-- snowflake: n increasing IDs
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids,
       bool_and(id > prev) AS increasing
FROM (SELECT id, lag(id, 1, 0::bigint) OVER (ORDER BY ord) AS prev
      FROM leaf_snowflake_next(10000) WITH ORDINALITY AS t(id, ord)) s;
SELECT count(*) AS zero FROM leaf_snowflake_next(0);
SELECT regress_sqlstate('SELECT leaf_snowflake_next(NULL::integer)') AS null_n;
SELECT regress_sqlstate('SELECT leaf_snowflake_next(-5)') AS negative_n;
