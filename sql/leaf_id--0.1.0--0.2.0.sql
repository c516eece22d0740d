-- leaf_id 0.1.0 -> 0.2.0 (ALTER EXTENSION leaf_id UPDATE).
-- After this script the catalog equals a fresh install of 0.2.0
-- (tests/tap/056_extension_upgrade.pl compares both; on Citus,
-- tests/citus/218_citus_extension_update.pl runs it).
\echo Use "ALTER EXTENSION leaf_id UPDATE TO '0.2.0'" to load this file. \quit

-- The extension's schema keeps its name until the update ends (its
-- pg_namespace row is locked): a non-superuser who owns it (public belongs to
-- the database owner) cannot rename it and put look-alikes under its name
-- while the names below are resolved.
DO $leaf_id_pin$
BEGIN
    PERFORM 1 FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_extension e ON e.extnamespace OPERATOR(pg_catalog.=) n.oid
     WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id'
       AND pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.=) '@extschema@'
       FOR SHARE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the schema of leaf_id was renamed while ALTER EXTENSION ran' USING ERRCODE = '55000';
    END IF;
END
$leaf_id_pin$;

-- On Citus, leaf_worker is a reference table, and Citus would send this DDL
-- to the other nodes with the whole script as its text, which they refuse
-- ("cannot insert multiple commands into a prepared statement"). Citus runs
-- ALTER EXTENSION leaf_id UPDATE on every node anyway, so each node alters
-- its own table and its own copy (the shard) here, with Citus' DDL
-- propagation off for the script (and put back at its end).
SELECT pg_catalog.set_config('leaf_id_update.ddl_propagation',
                             pg_catalog.current_setting('citus.enable_ddl_propagation', true), true),
       pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true)
 WHERE pg_catalog.current_setting('citus.enable_ddl_propagation', true) IS NOT NULL;

-- Snowflake mode: the owner token of the server lifetime holding a worker id.
ALTER TABLE leaf_worker ADD COLUMN owner_token bigint;
COMMENT ON COLUMN leaf_worker.owner_token IS 'Random token of the server lifetime that holds the id (NULL: closed cleanly or released); tells apart servers with one node name, such as a physical copy.';
DO $do$
DECLARE
    shard record;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_shard') IS NULL THEN
        RETURN;
    END IF;
    -- (Citus hides shards from pg_class unless told not to)
    PERFORM pg_catalog.set_config('citus.enable_manual_changes_to_shards', 'on', true),
            pg_catalog.set_config('citus.override_table_visibility', 'off', true);
    FOR shard IN
        SELECT n.nspname, c.relname, c.oid AS reloid,
                 c.relkind OPERATOR(pg_catalog.=) 'r' AND c.relowner OPERATOR(pg_catalog.=) e.extowner AND NOT c.relhastriggers
                 AND NOT c.relhasrules AND NOT c.relrowsecurity AS plain
          FROM pg_catalog.pg_dist_shard s
          JOIN pg_catalog.pg_extension e ON e.extname OPERATOR(pg_catalog.=) 'leaf_id'
          JOIN pg_catalog.pg_class c
            ON c.relnamespace OPERATOR(pg_catalog.=) e.extnamespace
           AND c.relname OPERATOR(pg_catalog.=) ('leaf_worker_' OPERATOR(pg_catalog.||) s.shardid::pg_catalog.text)
          JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
         WHERE s.logicalrelid OPERATOR(pg_catalog.=) (SELECT t.oid FROM pg_catalog.pg_class t
                                  WHERE t.relname OPERATOR(pg_catalog.=) 'leaf_worker' AND t.relnamespace OPERATOR(pg_catalog.=) e.extnamespace)
    LOOP
        -- this node's copy, found by name (the schema's owner may drop a shard
        -- and make a look-alike with a trigger, which this update would fire
        -- as a superuser): the extension owner's plain table without
        -- triggers, rules or row security, locked under its name
        IF NOT shard.plain THEN
            RAISE EXCEPTION 'leaf_id: %.% is not the extension owner''s plain table without triggers, rules or row security',
                shard.nspname, shard.relname USING ERRCODE = '42501';
        END IF;
        EXECUTE pg_catalog.format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', shard.nspname, shard.relname);
        IF pg_catalog.to_regclass(pg_catalog.format('%I.%I', shard.nspname, shard.relname))::pg_catalog.oid IS DISTINCT FROM shard.reloid::pg_catalog.oid THEN
            RAISE EXCEPTION 'leaf_id: %.% changed while the update ran', shard.nspname, shard.relname USING ERRCODE = '55000';
        END IF;
        EXECUTE pg_catalog.format('ALTER TABLE %I.%I ADD COLUMN owner_token bigint',
                                  shard.nspname, shard.relname);
    END LOOP;
END
$do$;

-- Checks that the worker's guarded updates run on every copy of a row.
CREATE FUNCTION "leaf_id_worker_row_conflict"(
	"worker_id" INT,
	"node_name" TEXT,
	"owner_token" bigint
) RETURNS bigint
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'leaf_id_worker_row_conflict_wrapper';
CREATE FUNCTION "leaf_id_alloc_row_conflict"(
	"biz_tag" TEXT,
	"max_id" bigint
) RETURNS bigint
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'leaf_id_alloc_row_conflict_wrapper';
COMMENT ON FUNCTION leaf_id_worker_row_conflict(integer, text, bigint) IS
  'Internal: raises an error; the worker''s guarded updates of leaf_worker call it on a copy whose row is not as expected.';
COMMENT ON FUNCTION leaf_id_alloc_row_conflict(text, bigint) IS
  'Internal: raises an error; the worker''s guarded refills call it on a copy of leaf_alloc whose max_id differs.';
REVOKE EXECUTE ON FUNCTION leaf_id_worker_row_conflict(integer, text, bigint),
  leaf_id_alloc_row_conflict(text, bigint) FROM PUBLIC;
-- The adopt functions read a column's largest value as the table's owner.
CREATE FUNCTION "leaf_id_column_max"(
	"tab" oid,
	"col" TEXT
) RETURNS bigint
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'leaf_id_column_max_wrapper';
-- leaf_alloc_tuning and the operator functions (as sql/schema.sql and sql/finish.sql)
CREATE TABLE leaf_alloc_tuning (
    biz_tag     text        PRIMARY KEY,
    tuned_step  integer     NOT NULL
                            CONSTRAINT leaf_alloc_tuning_step_positive CHECK (tuned_step >= 1),
    update_time timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('leaf_alloc_tuning', '');

COMMENT ON TABLE leaf_alloc_tuning IS
  'leaf_id segment mode: the dynamic step each tag last used on this server, written by the worker when it changes; the first refill after a restart starts from it (bounded by leaf_id.max_step, never below leaf_alloc.step). Delete a row to start that tag from its step again.';
COMMENT ON COLUMN leaf_alloc_tuning.tuned_step IS 'Dynamic step of the tag''s last refill.';
COMMENT ON COLUMN leaf_alloc_tuning.update_time IS 'Time the step last changed.';

-- Operator functions (README, "Operator functions" and "Adopting an existing
-- sequence"): superusers only. Each runs under a fixed search_path and names
-- tables and functions with their schema, so nothing planted elsewhere runs.

CREATE FUNCTION leaf_snowflake_release_worker_id(worker_id integer) RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    id ALIAS FOR $1;
    owner text;
BEGIN
    -- superusers only, whatever was granted
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER) THEN
        RAISE EXCEPTION 'permission denied for function leaf_snowflake_release_worker_id'
            USING ERRCODE = '42501', HINT = 'Only superusers may release a snowflake worker id.';
    END IF;
    IF id IS NULL THEN
        RAISE EXCEPTION 'worker_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF id < 0 OR id > 1023 THEN
        RAISE EXCEPTION 'worker_id % is out of range', id
            USING ERRCODE = '22023', DETAIL = 'Snowflake worker ids are 0 to 1023.';
    END IF;
    -- the row lock makes a concurrent release or claim wait for this one
    SELECT w.node_name INTO owner FROM @extschema@.leaf_worker w WHERE w.worker_id = id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'snowflake worker id % is not in leaf_worker', id USING ERRCODE = '42704';
    END IF;
    IF pg_catalog.starts_with(owner, 'released:') THEN
        RAISE EXCEPTION 'snowflake worker id % is already released', id USING ERRCODE = '55000';
    END IF;
    -- Rename only: the row and its mark stay for the next owner, which so
    -- cannot reissue this id's IDs; the live owner's renewal then matches no
    -- row and it claims again. The owner token goes: nobody holds the id.
    UPDATE @extschema@.leaf_worker w SET node_name = 'released:' OPERATOR(pg_catalog.||) id::text,
           owner_token = NULL
     WHERE w.worker_id = id;
    RETURN owner;
END
$fn$;

-- The common part of both adopt functions: lock the column owning the
-- sequence, read the largest value it or the sequence ever gave, and switch
-- the column's default to new_default (an identity column loses its identity:
-- it cannot have a default). freeze_sequence: let the sequence give nothing above what
-- was read, so that a stray nextval() fails instead of repeating a tag's ID.
CREATE FUNCTION leaf_id_adopt_sequence(seq regclass, new_default text, freeze_sequence boolean,
    OUT owner_table regclass, OUT owner_column name, OUT column_type regtype, OUT largest bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    kind "char";
    is_identity boolean;
    seq_increment bigint;
    seq_max bigint;
    seq_last bigint;
    column_max bigint;
BEGIN
    IF seq IS NULL THEN
        RAISE EXCEPTION 'the sequence must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- in REPEATABLE READ, rows committed before the lock below were invisible
    -- to the max() that must cover them
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'adopting a sequence must run in a READ COMMITTED transaction'
            USING ERRCODE = '55000',
                  DETAIL = pg_catalog.format('The transaction is %s: its snapshot could miss rows committed meanwhile.',
                                             pg_catalog.current_setting('transaction_isolation'));
    END IF;
    SELECT c.relkind INTO kind FROM pg_catalog.pg_class c WHERE c.oid = seq;
    IF kind IS DISTINCT FROM 'S' THEN
        RAISE EXCEPTION '"%" is not a sequence', seq USING ERRCODE = '42809';
    END IF;
    SELECT d.refobjid::pg_catalog.regclass, a.attname, a.atttypid::pg_catalog.regtype, d.deptype = 'i'
      INTO owner_table, owner_column, column_type, is_identity
      FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
     WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = seq
       AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.refobjsubid > 0
       AND d.deptype IN ('a', 'i');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'sequence % is not owned by a column', seq
            USING ERRCODE = '55000',
                  HINT = 'Make the column own it (ALTER SEQUENCE ... OWNED BY table.column), as serial and identity columns do.';
    END IF;
    IF column_type NOT IN ('pg_catalog.int2'::pg_catalog.regtype, 'pg_catalog.int4'::pg_catalog.regtype,
                           'pg_catalog.int8'::pg_catalog.regtype) THEN
        RAISE EXCEPTION 'column %.% is of type %, not an integer type', owner_table, owner_column, column_type
            USING ERRCODE = '42804';
    END IF;
    -- Inserts take the table's lock, then the sequence's (nextval): locking in
    -- the same order waits for every insert in flight and lets none start
    -- until this transaction ends, when they see the new default.
    EXECUTE pg_catalog.format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', owner_table);
    -- only a table, read once it is locked (a view, which its owner could
    -- make of it, would run the owner's code as the caller)
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = owner_table) NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '"%" is not a table', owner_table USING ERRCODE = '42809',
            DETAIL = 'Only the sequence of a column of a plain or partitioned table can be adopted.';
    END IF;
    SELECT s.seqincrement, s.seqmax INTO seq_increment, seq_max FROM pg_catalog.pg_sequence s WHERE s.seqrelid = seq;
    IF seq_increment < 0 THEN
        RAISE EXCEPTION 'sequence % descends', seq USING ERRCODE = '0A000',
            DETAIL = 'Only ascending sequences can be adopted.';
    END IF;
    -- an ALTER SEQUENCE locks the sequence against nextval() calls outside
    -- inserts (SHARE ROW EXCLUSIVE) until this transaction ends
    EXECUTE pg_catalog.format('ALTER SEQUENCE %s MAXVALUE %s', seq, seq_max);
    -- last_value also covers values other sessions hold in their CACHE; a
    -- sequence never called has not given last_value yet: counting it anyway
    -- only leaves a gap
    EXECUTE pg_catalog.format('SELECT last_value FROM %s', seq) INTO seq_last;
    -- setval() or explicit keys may have put larger values into the column;
    -- read as the table's owner, so nothing of the owner's runs as the caller
    column_max := @extschema@.leaf_id_column_max(owner_table::pg_catalog.oid, owner_column::pg_catalog.text);
    largest := pg_catalog.int8larger(seq_last, COALESCE(column_max, seq_last));
    IF is_identity THEN
        -- drops the identity's sequence with it
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', owner_table, owner_column);
    ELSIF freeze_sequence THEN
        EXECUTE pg_catalog.format('ALTER SEQUENCE %s MAXVALUE %s NO CYCLE', seq, seq_last);
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', owner_table, owner_column, new_default);
END
$fn$;

CREATE FUNCTION leaf_segment_adopt_sequence(seq regclass, tag text, step integer DEFAULT 1000) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    adopted record;
    first_id bigint;
BEGIN
    IF tag IS NULL OR step IS NULL THEN
        RAISE EXCEPTION 'tag and step must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.char_length(tag) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION 'a leaf_id tag has 1 to 128 characters' USING ERRCODE = '22023';
    END IF;
    IF step < 1 THEN
        RAISE EXCEPTION 'step must be at least 1, not %', step USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM @extschema@.leaf_alloc a WHERE a.biz_tag = tag) THEN
        RAISE EXCEPTION 'leaf_id tag "%" already exists in leaf_alloc', tag
            USING ERRCODE = '42710',
                  HINT = 'Adopt the sequence under a new tag, or switch the default yourself to leaf_segment_next() of the existing tag after raising its max_id above the column''s values.';
    END IF;
    SELECT * INTO adopted FROM @extschema@.leaf_id_adopt_sequence(
        seq, pg_catalog.format('%I.leaf_segment_next(%L::text)', (SELECT n.nspname FROM pg_catalog.pg_extension e
                   JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'leaf_id'), tag), true);
    IF adopted.largest = 9223372036854775807 THEN
        RAISE EXCEPTION 'sequence % has reached the largest bigint', seq USING ERRCODE = '2200H';
    END IF;
    first_id := pg_catalog.int8larger(adopted.largest + 1, 1);
    -- a concurrent adoption of the same tag fails here with 23505
    INSERT INTO @extschema@.leaf_alloc (biz_tag, max_id, step, description)
    VALUES (tag, first_id, step, pg_catalog.format('adopted from sequence %s of %s.%I',
                                                   seq, adopted.owner_table, adopted.owner_column));
    RETURN first_id;
END
$fn$;

CREATE FUNCTION leaf_snowflake_adopt_sequence(seq regclass) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    adopted record;
    smallest bigint := @extschema@.leaf_snowflake_min_id(pg_catalog.now());
BEGIN
    SELECT * INTO adopted FROM @extschema@.leaf_id_adopt_sequence(
        seq, pg_catalog.format('%I.leaf_snowflake_next()', (SELECT n.nspname FROM pg_catalog.pg_extension e
                   JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'leaf_id')), false);
    IF adopted.column_type <> 'pg_catalog.int8'::pg_catalog.regtype THEN
        RAISE EXCEPTION 'column %.% is of type %: snowflake IDs need bigint', adopted.owner_table,
            adopted.owner_column, adopted.column_type USING ERRCODE = '42804';
    END IF;
    IF adopted.largest >= smallest THEN
        RAISE EXCEPTION 'values of %.% reach into the snowflake range', adopted.owner_table, adopted.owner_column
            USING ERRCODE = '55000',
                  DETAIL = pg_catalog.format('The largest value is %s; the smallest snowflake ID now is %s, so a snowflake ID could equal an existing key.',
                                             adopted.largest, smallest),
                  HINT = 'Use leaf_segment_adopt_sequence() for this column.';
    END IF;
    RETURN smallest;
END
$fn$;

COMMENT ON FUNCTION leaf_snowflake_release_worker_id(integer) IS
  'Releases a snowflake worker id in leaf_worker (renames its row to released:<id>, keeping its mark for the next owner); a live owner stops issuing with it at its next renewal. Returns the former node name.';
COMMENT ON FUNCTION leaf_id_adopt_sequence(regclass, text, boolean) IS
  'Internal to the adopt functions: locks the column owning a sequence, returns the largest value it or the sequence gave, and switches the column default (dropping an identity).';
COMMENT ON FUNCTION leaf_id_column_max(oid, text) IS
  'Internal to the adopt functions: the largest value of an integer column of a plain or partitioned table, read as the table''s owner in a security-restricted operation.';
COMMENT ON FUNCTION leaf_segment_adopt_sequence(regclass, text, integer) IS
  'Turns a sequence into a new segment-mode tag: max_id above the sequence and its column, the column default switched to leaf_segment_next(tag), the sequence frozen (an identity is dropped). Returns the tag''s first ID.';
COMMENT ON FUNCTION leaf_snowflake_adopt_sequence(regclass) IS
  'Switches the column owning a sequence to DEFAULT leaf_snowflake_next(), if all its values are below the smallest snowflake ID of now (returned); an identity is dropped.';

REVOKE ALL ON leaf_alloc_tuning FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION leaf_snowflake_release_worker_id(integer),
    leaf_id_adopt_sequence(regclass, text, boolean),
    leaf_id_column_max(oid, text),
    leaf_segment_adopt_sequence(regclass, text, integer),
    leaf_snowflake_adopt_sequence(regclass) FROM PUBLIC;

-- Only the privileges above are meant: grants that the installing role's
-- ALTER DEFAULT PRIVILEGES gave other roles on leaf_id's tables, views and
-- functions are taken back (the names are quoted by the server).
DO $leaf_id_acl$
DECLARE
    stmt text;
BEGIN
    FOR stmt IN
        SELECT pg_catalog.format('REVOKE ALL ON TABLE %s FROM %I', c.oid::pg_catalog.regclass, r.rolname)
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid
          CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
          JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id')
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner AND r.rolname OPERATOR(pg_catalog.<>) 'pg_monitor'
        UNION
        SELECT pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %I', p.oid::pg_catalog.regprocedure, r.rolname)
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid
          CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
          JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id')
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner AND r.rolname OPERATOR(pg_catalog.<>) 'pg_monitor'
    LOOP
        EXECUTE stmt;
    END LOOP;
END
$leaf_id_acl$;

SELECT pg_catalog.set_config('citus.enable_ddl_propagation',
                             pg_catalog.current_setting('leaf_id_update.ddl_propagation'), true)
 WHERE pg_catalog.current_setting('leaf_id_update.ddl_propagation', true) IS NOT NULL;
