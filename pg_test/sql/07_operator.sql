-- leaf_id operator functions: releasing a worker id, adopting a sequence,
-- and the tuned-step table. Superusers only; bad input gets a clear error.
\set VERBOSITY terse

-- all of them are closed to PUBLIC
SELECT p.oid::regprocedure AS function, has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leaf_id'
WHERE p.proname ~ '(adopt|release)' ORDER BY p.oid::regprocedure::text;
SELECT has_table_privilege('public', 'leaf_id_catalog.leaf_alloc_tuning', 'SELECT') AS public_reads_tuning;

-- leaf_snowflake_release_worker_id: the manual UPDATE to released:<id>
INSERT INTO leaf_id_catalog.leaf_worker (worker_id, node_name, last_timestamp) VALUES (900, 'gone-node', 1700000000000);
SELECT leaf_snowflake_release_worker_id(900) AS former_owner;
SELECT worker_id, node_name, last_timestamp FROM leaf_id_catalog.leaf_worker WHERE worker_id = 900;  -- mark kept
SELECT regress_sqlstate('SELECT leaf_snowflake_release_worker_id(900)') AS already_released;
SELECT regress_sqlstate('SELECT leaf_snowflake_release_worker_id(901)') AS unknown_id;
SELECT leaf_snowflake_release_worker_id(901);  -- the message
SELECT regress_sqlstate('SELECT leaf_snowflake_release_worker_id(NULL)') AS null_id;
SELECT regress_sqlstate('SELECT leaf_snowflake_release_worker_id(1024)') AS out_of_range;
SELECT regress_sqlstate('SELECT leaf_snowflake_release_worker_id(-1)') AS negative;
DELETE FROM leaf_id_catalog.leaf_worker WHERE worker_id = 900;

-- leaf_segment_adopt_sequence: a serial column with rows, and a key above
-- the sequence put there by hand (setval or an explicit key)
CREATE TABLE adopt_serial (id serial PRIMARY KEY, note text);
INSERT INTO adopt_serial (note) SELECT 'old' FROM generate_series(1, 5);
INSERT INTO adopt_serial (id, note) VALUES (42, 'explicit');
SELECT leaf_segment_adopt_sequence('adopt_serial_id_seq', 'adopt_serial', 10) AS first_id;
SELECT biz_tag, max_id, step, description FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'adopt_serial';
SELECT pg_get_expr(adbin, adrelid) AS new_default FROM pg_attrdef WHERE adrelid = 'adopt_serial'::regclass;
INSERT INTO adopt_serial (note) VALUES ('new') RETURNING id > 42 AS above_old_keys;
-- the sequence is frozen: a stray nextval() fails instead of repeating an ID
SELECT regress_sqlstate($$SELECT nextval('adopt_serial_id_seq')$$) AS stray_nextval;
-- the same tag again: 42710
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('adopt_serial_id_seq', 'adopt_serial')$$) AS tag_exists;

-- an identity column loses its identity (it cannot have a default)
CREATE TABLE adopt_identity (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, note text);
INSERT INTO adopt_identity (note) SELECT 'old' FROM generate_series(1, 3);
SELECT leaf_segment_adopt_sequence(pg_get_serial_sequence('adopt_identity', 'id')::regclass, 'adopt_identity') AS first_id;
SELECT attidentity = '' AS identity_dropped, pg_get_expr(d.adbin, d.adrelid) AS new_default
FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = 'adopt_identity'::regclass AND a.attname = 'id';
INSERT INTO adopt_identity (note) VALUES ('new') RETURNING id AS new_id;

-- bad input
CREATE SEQUENCE adopt_free_seq;
CREATE TABLE adopt_text (id text PRIMARY KEY);
CREATE SEQUENCE adopt_text_seq OWNED BY adopt_text.id;
CREATE SEQUENCE adopt_down_seq INCREMENT -1;
CREATE TABLE adopt_down (id bigint DEFAULT nextval('adopt_down_seq'));
ALTER SEQUENCE adopt_down_seq OWNED BY adopt_down.id;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence(NULL, 't')$$) AS null_sequence;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('adopt_free_seq', NULL)$$) AS null_tag;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('adopt_free_seq', 't', NULL)$$) AS null_step;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('adopt_free_seq', '')$$) AS empty_tag;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('adopt_free_seq', 't', 0)$$) AS zero_step;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('adopt_serial', 't')$$) AS not_a_sequence;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('no_such_seq', 't')$$) AS unknown_sequence;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('adopt_free_seq', 't')$$) AS not_owned;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('adopt_text_seq', 't')$$) AS text_column;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('adopt_down_seq', 't')$$) AS descending;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('adopt_down_seq', 't')$$) AS repeatable_read;
ROLLBACK;
-- nothing of a refused adoption stays
SELECT count(*) AS stray_tags FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 't';
SELECT pg_get_expr(adbin, adrelid) AS default_kept FROM pg_attrdef WHERE adrelid = 'adopt_down'::regclass;

-- leaf_snowflake_adopt_sequence
CREATE TABLE adopt_flake (id bigserial PRIMARY KEY, note text);
INSERT INTO adopt_flake (note) SELECT 'old' FROM generate_series(1, 3);
SELECT leaf_snowflake_adopt_sequence('adopt_flake_id_seq') > 3 AS adopted;
SELECT pg_get_expr(adbin, adrelid) AS new_default FROM pg_attrdef WHERE adrelid = 'adopt_flake'::regclass;
INSERT INTO adopt_flake (note) VALUES ('new') RETURNING id >= leaf_snowflake_min_id(now()) AS snowflake_id;
-- a column whose values reach into the snowflake range, or too narrow for it
CREATE TABLE adopt_flake_big (id bigserial PRIMARY KEY);
INSERT INTO adopt_flake_big VALUES (leaf_snowflake_min_id(now() + interval '1 day'));
SELECT regress_sqlstate($$SELECT leaf_snowflake_adopt_sequence('adopt_flake_big_id_seq')$$) AS values_too_big;
CREATE TABLE adopt_flake_int (id serial PRIMARY KEY);
SELECT regress_sqlstate($$SELECT leaf_snowflake_adopt_sequence('adopt_flake_int_id_seq')$$) AS int_column;
SELECT leaf_snowflake_adopt_sequence('adopt_flake_int_id_seq');  -- the message
SELECT leaf_segment_adopt_sequence('adopt_free_seq', 't');  -- the message
SELECT regress_sqlstate($$SELECT leaf_snowflake_adopt_sequence(NULL)$$) AS null_sequence;
SELECT regress_sqlstate($$SELECT leaf_snowflake_adopt_sequence('adopt_flake')$$) AS not_a_sequence;
SELECT pg_get_expr(adbin, adrelid) AS default_kept FROM pg_attrdef WHERE adrelid = 'adopt_flake_big'::regclass;

-- an unprivileged role may call none of them (42501)
CREATE ROLE regress_leaf_operator;
SET ROLE regress_leaf_operator;
SELECT regress_sqlstate('SELECT leaf_snowflake_release_worker_id(0)') AS release;
SELECT regress_sqlstate($$SELECT leaf_segment_adopt_sequence('adopt_free_seq', 'x')$$) AS segment_adopt;
SELECT regress_sqlstate($$SELECT leaf_snowflake_adopt_sequence('adopt_free_seq')$$) AS snowflake_adopt;
SELECT regress_sqlstate($$SELECT * FROM leaf_id_adopt_sequence('adopt_free_seq', '1', false)$$) AS adopt_internal;
SELECT regress_sqlstate('SELECT * FROM leaf_id_catalog.leaf_alloc_tuning') AS read_tuning;
SELECT regress_sqlstate('DELETE FROM leaf_id_catalog.leaf_alloc_tuning') AS reset_tuning;
RESET ROLE;
DROP ROLE regress_leaf_operator;

DROP TABLE adopt_serial, adopt_identity, adopt_text, adopt_down, adopt_flake, adopt_flake_big, adopt_flake_int;
DROP SEQUENCE adopt_free_seq;
DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag IN ('adopt_serial', 'adopt_identity');
