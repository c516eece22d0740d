-- leaf_id segment mode
\set VERBOSITY terse

-- table checks
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('', 10);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES (repeat('x', 129), 10);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('bad', 0);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('bad', 10, -1);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag) VALUES ('bad');

INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, description) VALUES ('order', 100, 'orders');

-- IDs start at max_id and increase
SELECT leaf_segment_next('order') FROM generate_series(1, 5);

-- as a column default
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT leaf_segment_next('order'), item text);
INSERT INTO orders (item) VALUES ('a'), ('b'), ('c');
SELECT id, item FROM orders ORDER BY id;

-- a rolled-back transaction does not give its IDs back
BEGIN;
SELECT leaf_segment_next('order');
ROLLBACK;
SELECT leaf_segment_next('order');

-- crossing segments (steps of 100 or more, so refills happen meanwhile): 1000 IDs, all distinct,
-- none of the ten above (1..10), all inside what leaf_alloc reserved for the tag, [1, max_id),
-- and so are the segments still cached (a range is published only after its reservation
-- committed, so max_id read after the status is at least their end).
-- Not claimed: that they are consecutive or increasing (gaps are allowed, and a call that stalls
-- across a segment switch may take an ID of the newer range before an older one is used up).
SELECT refills AS refills_before FROM leaf_segment_status WHERE tag = 'order' \gset
CREATE TEMP TABLE crossing AS SELECT leaf_segment_next('order') AS id FROM generate_series(1, 1000);
SELECT refills > :refills_before AS refilled, greatest(buffer0_end, buffer1_end) AS cached_end
FROM leaf_segment_status WHERE tag = 'order' \gset
SELECT :'refilled' AS refilled, count(*) AS ids, count(DISTINCT id) AS distinct_ids,
       min(id) > 10 AS none_of_the_ten, max(id) < a.max_id AS ids_reserved,
       :cached_end <= a.max_id AS cached_reserved
FROM crossing, leaf_id_catalog.leaf_alloc a WHERE a.biz_tag = 'order' GROUP BY a.max_id;

-- max_id is above every ID handed out
SELECT max_id > (SELECT leaf_segment_next('order')) AS reserved_above FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'order';

-- status: one row per cached tag
SELECT tag, status, table_step, refills >= 2 AS refilled, dynamic_step >= table_step AS step_ok,
       last_refill IS NOT NULL AS has_time
FROM leaf_segment_status;

-- bad input
SELECT leaf_segment_next(NULL);
SELECT leaf_segment_next('');
SELECT leaf_segment_next(repeat('é', 129));
SELECT leaf_segment_next('no such tag');

-- a tag inserted now works at once; the unknown tag's slot is not kept
SELECT count(*) FROM leaf_segment_status WHERE tag = 'no such tag';
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('no such tag', 10);
SELECT leaf_segment_next('no such tag');

-- a step < 1 forced into the table is refused at the refill
ALTER TABLE leaf_id_catalog.leaf_alloc DROP CONSTRAINT leaf_alloc_step_positive;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('zero step', 0);
SELECT leaf_segment_next('zero step');
DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'zero step';
ALTER TABLE leaf_id_catalog.leaf_alloc ADD CONSTRAINT leaf_alloc_step_positive CHECK (step >= 1);

-- so is a negative max_id
ALTER TABLE leaf_id_catalog.leaf_alloc DROP CONSTRAINT leaf_alloc_max_id_not_negative;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('negative', 10, -5);
SELECT leaf_segment_next('negative');
DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'negative';
ALTER TABLE leaf_id_catalog.leaf_alloc ADD CONSTRAINT leaf_alloc_max_id_not_negative CHECK (max_id >= 0);

-- the end of bigint: the last IDs, then an error, never a wrap
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('almost full', 3, 9223372036854775802);
SELECT leaf_segment_next('almost full') FROM generate_series(1, 5);
SELECT leaf_segment_next('almost full');
SELECT leaf_segment_next('almost full');
SELECT max_id FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'almost full';

-- read-only transactions are refused, as nextval() does
BEGIN READ ONLY;
SELECT leaf_segment_next('order');
ROLLBACK;

-- a deleted tag stops issuing IDs at its next refill
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('short lived', 1);
SELECT leaf_segment_next('short lived');
CREATE TEMP TABLE after_delete (id bigint);
DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'short lived' RETURNING max_id AS reserved_to \gset
DO $$
DECLARE v bigint;
BEGIN
  FOR i IN 1..10 LOOP
    BEGIN
      v := leaf_segment_next('short lived');
    EXCEPTION WHEN undefined_object THEN
      RAISE NOTICE 'stopped: %', SQLERRM;
      RETURN;
    END;
    INSERT INTO after_delete VALUES (v);
  END LOOP;
  RAISE NOTICE 'never stopped';
END $$;
-- only IDs reserved before the DELETE were handed out after it
SELECT coalesce(bool_and(id < :reserved_to), true) AS reserved_before_delete FROM after_delete;

-- SQLSTATEs of the input errors above
ALTER TABLE leaf_id_catalog.leaf_alloc DROP CONSTRAINT leaf_alloc_step_positive;
ALTER TABLE leaf_id_catalog.leaf_alloc DROP CONSTRAINT leaf_alloc_max_id_not_negative;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('zero step', 0, 1), ('negative', 10, -5);
SELECT q, regress_sqlstate(q) FROM (VALUES
  ($$SELECT leaf_segment_next(NULL)$$),
  ($$SELECT leaf_segment_next('')$$),
  ($$SELECT leaf_segment_next(repeat('x', 129))$$),
  ($$SELECT leaf_segment_next('no tag like this')$$),
  ($$SELECT leaf_segment_next('zero step')$$),
  ($$SELECT leaf_segment_next('negative')$$),
  ($$SELECT leaf_segment_next('almost full')$$)) v(q);
DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag IN ('zero step', 'negative');
ALTER TABLE leaf_id_catalog.leaf_alloc ADD CONSTRAINT leaf_alloc_step_positive CHECK (step >= 1);
ALTER TABLE leaf_id_catalog.leaf_alloc ADD CONSTRAINT leaf_alloc_max_id_not_negative CHECK (max_id >= 0);
BEGIN READ ONLY;
SELECT regress_sqlstate($$SELECT leaf_segment_next('order')$$);
ROLLBACK;

-- the ID function is volatile and parallel unsafe
EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE id = leaf_segment_next('order');
