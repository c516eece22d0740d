-- Views and comments, after the functions exist (finalize).

CREATE VIEW leaf_segment_status AS SELECT * FROM leaf_segment_status();
CREATE VIEW leaf_snowflake_status AS SELECT * FROM leaf_snowflake_status();
CREATE VIEW leaf_id_worker_status AS SELECT * FROM leaf_id_worker_status();

COMMENT ON FUNCTION leaf_segment_next(text) IS
  'Next ID of a segment-mode tag (a row of leaf_alloc): unique per tag and database, increasing apart from gaps.';
COMMENT ON FUNCTION leaf_segment_next(text, integer) IS
  'n IDs of a segment-mode tag in one call (a set); n IDs that fit in the current segment cost one atomic step.';
COMMENT ON FUNCTION leaf_segment_status() IS
  'Cached segment-mode tags of this database: both segments, refills, waits, dynamic step, the width of an opaque tag''s domain.';
COMMENT ON VIEW leaf_segment_status IS
  'Cached segment-mode tags of this database: both segments, refills, waits, dynamic step, the width of an opaque tag''s domain.';
COMMENT ON FUNCTION leaf_snowflake_next() IS
  'Next snowflake ID: (ms - epoch) << 22 | worker_id << 12 | sequence, as Meituan Leaf.';
COMMENT ON FUNCTION leaf_snowflake_next(integer) IS
  'n snowflake IDs in one call (a set, increasing); one compare-and-swap per chunk of up to 256 IDs, at most 3,072 per millisecond (the top 1,024 sequence numbers stay for single calls).';
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
COMMENT ON FUNCTION leaf_id_worker_status() IS
  'This database''s two workers (segment, snowflake): the pid of each that runs, and what its last commit waits for before what it reserved is used (the standby slots of leaf_id.synchronized_standby_slots and the most bytes one is behind, or the synchronous standbys), since when.';
COMMENT ON VIEW leaf_id_worker_status IS
  'This database''s two workers (segment, snowflake): the pid of each that runs, and what its last commit waits for before what it reserved is used (the standby slots of leaf_id.synchronized_standby_slots and the most bytes one is behind, or the synchronous standbys), since when.';
COMMENT ON FUNCTION leaf_id_worker_row_conflict(integer, text, bigint) IS
  'Internal: raises an error; the worker''s guarded updates of leaf_worker call it on a copy whose row is not as expected.';
COMMENT ON FUNCTION leaf_id_alloc_row_conflict(text, bigint) IS
  'Internal: raises an error; the worker''s guarded refills call it on a copy of leaf_alloc whose max_id differs.';
COMMENT ON FUNCTION leaf_id_reset_cache() IS
  'Drops the segments this database has cached in shared memory (their unused IDs become gaps) and re-claims the snowflake worker id. Run by CREATE EXTENSION.';


-- a database that had leaf_id before must not reuse what was cached from the dropped tables
SELECT leaf_id_reset_cache();

-- Operator functions (docs/operations.md, "Operator functions" and "Adopting an existing
-- sequence"): superusers only. Each runs under a fixed search_path and names
-- tables and functions with their schema, so nothing planted elsewhere runs.

CREATE FUNCTION leaf_snowflake_release_worker_id(worker_id integer) RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    id ALIAS FOR $1;
    owner text;
    pinned bigint[];
    holder bigint;
    needed bigint[];
    listed bigint[];
    active bigint[];
BEGIN
    -- superusers only, whatever was granted
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER) THEN
        RAISE EXCEPTION 'permission denied for function leaf_snowflake_release_worker_id'
            USING ERRCODE = '42501', HINT = 'Only superusers may release a snowflake worker id.';
    END IF;
    -- The extension's schema keeps its name until this transaction ends (its
    -- pg_namespace row is locked), and it is the name this body was written
    -- with: every @extschema@ name below is the extension's object, even when
    -- a non-superuser owns the schema (public: the database owner). (Inline
    -- in each function: a helper would itself be called by name.)
    PERFORM 1 FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_extension e ON e.extnamespace OPERATOR(pg_catalog.=) n.oid
     WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id'
       AND n.nspname OPERATOR(pg_catalog.=) (pg_catalog.parse_ident('@extschema@'))[1]
       FOR SHARE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leaf_id''s schema is no longer named @extschema@' USING ERRCODE = '55000',
            HINT = 'Its functions name it: rename it back (ALTER SCHEMA ... RENAME TO @extschema@).';
    END IF;
    IF id IS NULL THEN
        RAISE EXCEPTION 'worker_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF id < 0 OR id > 1023 THEN
        RAISE EXCEPTION 'worker_id % is out of range', id
            USING ERRCODE = '22023', DETAIL = 'Snowflake worker ids are 0 to 1023.';
    END IF;
    -- the row lock makes a concurrent release or claim wait for this one
    SELECT w.node_name, w.copies, w.holder_copy INTO owner, pinned, holder
      FROM leaf_id_catalog.leaf_worker w WHERE w.worker_id = id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'snowflake worker id % is not in leaf_worker', id USING ERRCODE = '42704';
    END IF;
    IF pg_catalog.starts_with(owner, 'released:') THEN
        RAISE EXCEPTION 'snowflake worker id % is already released', id USING ERRCODE = '55000';
    END IF;
    -- On Citus the holder's renewals count a majority of the copies pinned in
    -- its row, whatever this node's metadata lists now. The release (written
    -- through Citus: every active copy listed here) must reach every pinned
    -- copy but the holder's own, or it may miss every copy of a majority the
    -- holder still renews on (nodes removed or disabled on one side of a
    -- partition). A row not pinned yet (from 0.2.0) counts every copy listed.
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_placement') IS NOT NULL THEN
        SELECT pg_catalog.array_agg(p.groupid::pg_catalog.int8),
               pg_catalog.array_agg(p.groupid::pg_catalog.int8) FILTER (WHERE n.isactive)
          INTO listed, active
          FROM pg_catalog.pg_dist_shard s
          JOIN pg_catalog.pg_dist_placement p ON p.shardid = s.shardid
          JOIN pg_catalog.pg_dist_node n ON n.groupid = p.groupid AND n.noderole = 'primary'
         WHERE s.logicalrelid = 'leaf_id_catalog.leaf_worker'::pg_catalog.regclass;
        needed := CASE WHEN pinned IS NULL THEN listed
                       WHEN pg_catalog.cardinality(pinned) >= 2 THEN pg_catalog.array_remove(pinned, holder)
                       ELSE pinned END;
        IF NOT (COALESCE(needed, '{}') OPERATOR(pg_catalog.<@) COALESCE(active, '{}')) THEN
            RAISE EXCEPTION 'cannot release snowflake worker id %: the copies of leaf_worker that its holder''s lease counts are not all on active nodes here', id
                USING ERRCODE = '55000',
                      DETAIL = pg_catalog.format('The release must reach the copies on the nodes of Citus groups %s; the active nodes here are groups %s.',
                                                 needed, COALESCE(active, '{}')),
                      HINT = 'Activate the nodes (citus_activate_node) or add them back. A node removed while it may still run keeps its id.';
        END IF;
    END IF;
    -- Rename only: the row and its mark stay for the next owner, which so
    -- cannot reissue this id's IDs; the live owner's renewal then matches no
    -- row and it claims again. The owner token goes: nobody holds the id.
    -- Every copy written must still have the owner and the pin read here
    -- (a copy whose holder moved its pin since fails the release).
    UPDATE leaf_id_catalog.leaf_worker w
       SET node_name = CASE WHEN w.node_name = owner AND w.copies IS NOT DISTINCT FROM pinned
                                 AND w.holder_copy IS NOT DISTINCT FROM holder
                            THEN 'released:' OPERATOR(pg_catalog.||) id::text
                            ELSE @extschema@.leaf_id_worker_row_conflict(w.worker_id, w.node_name, w.owner_token)::text END,
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
    seq_min bigint;
    seq_last bigint;
    column_max bigint;
    table_name text;
    seq_name text;
BEGIN
    -- The extension's schema keeps its name until this transaction ends (its
    -- pg_namespace row is locked), and it is the name this body was written
    -- with: every @extschema@ name below is the extension's object, even when
    -- a non-superuser owns the schema (public: the database owner). (Inline
    -- in each function: a helper would itself be called by name.)
    PERFORM 1 FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_extension e ON e.extnamespace OPERATOR(pg_catalog.=) n.oid
     WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id'
       AND n.nspname OPERATOR(pg_catalog.=) (pg_catalog.parse_ident('@extschema@'))[1]
       FOR SHARE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leaf_id''s schema is no longer named @extschema@' USING ERRCODE = '55000',
            HINT = 'Its functions name it: rename it back (ALTER SCHEMA ... RENAME TO @extschema@).';
    END IF;
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
    -- The statements below name the table and the sequence (there is no
    -- syntax by OID): their schemas keep their names until this transaction
    -- ends (rows locked), and each name is checked to be the OID once the
    -- relation is locked under it, after which it cannot be renamed either.
    -- Else a schema or table owner could swap in a look-alike (a view that
    -- runs her function) between the lookup and the statement.
    PERFORM 1 FROM pg_catalog.pg_namespace n
     WHERE n.oid IN (SELECT c.relnamespace FROM pg_catalog.pg_class c WHERE c.oid IN (seq, owner_table))
       FOR SHARE OF n;
    table_name := owner_table::pg_catalog.text;
    seq_name := seq::pg_catalog.text;
    -- Inserts take the table's lock, then the sequence's (nextval): locking in
    -- the same order waits for every insert in flight and lets none start
    -- until this transaction ends, when they see the new default.
    EXECUTE pg_catalog.format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', table_name);
    IF pg_catalog.to_regclass(table_name) IS DISTINCT FROM owner_table THEN
        RAISE EXCEPTION 'table % was renamed while it was being adopted', owner_table USING ERRCODE = '55000';
    END IF;
    -- only a table, read once it is locked (a view, which its owner could
    -- make of it, would run the owner's code as the caller)
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = owner_table) NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '"%" is not a table', owner_table USING ERRCODE = '42809',
            DETAIL = 'Only the sequence of a column of a plain or partitioned table can be adopted.';
    END IF;
    SELECT s.seqincrement, s.seqmax, s.seqmin INTO seq_increment, seq_max, seq_min
      FROM pg_catalog.pg_sequence s WHERE s.seqrelid = seq;
    IF seq_increment < 0 THEN
        RAISE EXCEPTION 'sequence % descends', seq USING ERRCODE = '0A000',
            DETAIL = 'Only ascending sequences can be adopted.';
    END IF;
    -- an ALTER SEQUENCE locks the sequence against nextval() calls outside
    -- inserts (SHARE ROW EXCLUSIVE) until this transaction ends
    EXECUTE pg_catalog.format('ALTER SEQUENCE %s MAXVALUE %s', seq_name, seq_max);
    IF pg_catalog.to_regclass(seq_name) IS DISTINCT FROM seq THEN
        RAISE EXCEPTION 'sequence % was renamed while it was being adopted', seq USING ERRCODE = '55000';
    END IF;
    -- last_value also covers values other sessions hold in their CACHE; a
    -- sequence never called has not given last_value yet: counting it anyway
    -- only leaves a gap
    EXECUTE pg_catalog.format('SELECT last_value FROM %s', seq_name) INTO seq_last;
    -- setval() or explicit keys may have put larger values into the column;
    -- read as the table's owner, so nothing of the owner's runs as the caller
    column_max := @extschema@.leaf_id_column_max(owner_table::pg_catalog.oid, owner_column::pg_catalog.text);
    largest := pg_catalog.int8larger(seq_last, COALESCE(column_max, seq_last));
    IF is_identity THEN
        -- drops the identity's sequence with it
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', table_name, owner_column);
    ELSIF freeze_sequence THEN
        -- (MAXVALUE must stay above MINVALUE: a sequence still at its
        -- minimum, given one value or none, gets its MINVALUE lowered by one)
        EXECUTE pg_catalog.format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s NO CYCLE', seq_name,
                                  pg_catalog.int8smaller(seq_min, seq_last OPERATOR(pg_catalog.-) 1), seq_last);
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', table_name, owner_column, new_default);
END
$fn$;

CREATE FUNCTION leaf_segment_adopt_sequence(seq regclass, tag text, step integer DEFAULT 1000) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    adopted record;
    first_id bigint;
    seq_max bigint;
    drawers text;
BEGIN
    -- The extension's schema keeps its name until this transaction ends (its
    -- pg_namespace row is locked), and it is the name this body was written
    -- with: every @extschema@ name below is the extension's object, even when
    -- a non-superuser owns the schema (public: the database owner). (Inline
    -- in each function: a helper would itself be called by name.)
    PERFORM 1 FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_extension e ON e.extnamespace OPERATOR(pg_catalog.=) n.oid
     WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id'
       AND n.nspname OPERATOR(pg_catalog.=) (pg_catalog.parse_ident('@extschema@'))[1]
       FOR SHARE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leaf_id''s schema is no longer named @extschema@' USING ERRCODE = '55000',
            HINT = 'Its functions name it: rename it back (ALTER SCHEMA ... RENAME TO @extschema@).';
    END IF;
    IF tag IS NULL OR step IS NULL THEN
        RAISE EXCEPTION 'tag and step must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.char_length(tag) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION 'a leaf_id tag has 1 to 128 characters' USING ERRCODE = '22023';
    END IF;
    IF step < 1 THEN
        RAISE EXCEPTION 'step must be at least 1, not %', step USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM leaf_id_catalog.leaf_alloc a WHERE a.biz_tag = tag) THEN
        RAISE EXCEPTION 'leaf_id tag "%" already exists in leaf_alloc', tag
            USING ERRCODE = '42710',
                  HINT = 'Adopt the sequence under a new tag, or switch the default yourself to leaf_segment_next() of the existing tag after raising its max_id above the column''s values.';
    END IF;
    -- the sequence's own bound, before the adoption freezes it
    SELECT s.seqmax INTO seq_max FROM pg_catalog.pg_sequence s WHERE s.seqrelid = seq;
    SELECT * INTO adopted FROM @extschema@.leaf_id_adopt_sequence(
        seq, pg_catalog.format('%I.leaf_segment_next(%L::text)', (SELECT n.nspname FROM pg_catalog.pg_extension e
                   JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'leaf_id'), tag), true);
    IF adopted.largest = 9223372036854775807 THEN
        RAISE EXCEPTION 'sequence % has reached the largest bigint', seq USING ERRCODE = '2200H';
    END IF;
    first_id := pg_catalog.int8larger(adopted.largest + 1, 1);
    -- the tag issues nothing its column cannot hold, nor above the
    -- sequence's MAXVALUE (max_value: 2200H instead of 22003 at the insert)
    seq_max := pg_catalog.int8smaller(seq_max,
        CASE WHEN adopted.column_type = 'pg_catalog.int2'::pg_catalog.regtype THEN 32767
             WHEN adopted.column_type = 'pg_catalog.int4'::pg_catalog.regtype THEN 2147483647
             ELSE 9223372036854775807 END);
    -- a concurrent adoption of the same tag fails here with 23505
    INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, description, max_value)
    VALUES (tag, first_id, step, pg_catalog.format('adopted from sequence %s of %s.%I',
                                                   seq, adopted.owner_table, adopted.owner_column),
            NULLIF(seq_max, 9223372036854775807));
    -- nextval on the sequence needed USAGE or UPDATE on it; the tag has no
    -- draw_role, so every role that may run leaf_segment_next draws it
    -- (and can burn an integer column's space): say so, and who had it
    IF NOT pg_catalog.has_sequence_privilege('public', seq, 'USAGE')
       AND NOT pg_catalog.has_sequence_privilege('public', seq, 'UPDATE') THEN
        SELECT pg_catalog.string_agg(DISTINCT r.rolname::pg_catalog.text, ', ')
          INTO drawers
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(COALESCE(c.relacl, pg_catalog.acldefault('s', c.relowner))) a
          JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
         WHERE c.oid = seq AND a.privilege_type IN ('USAGE', 'UPDATE');
        RAISE WARNING 'every role that may run leaf_segment_next may now draw leaf_id tag "%"; nextval on sequence % needed USAGE or UPDATE (held by: %)',
            tag, seq, COALESCE(drawers, 'nobody but superusers')
            USING HINT = pg_catalog.format('To keep it to them, give the tag a draw_role they are members of: UPDATE leaf_id_catalog.leaf_alloc SET draw_role = ''...'' WHERE biz_tag = %L; then SELECT leaf_id_reset_cache().', tag);
    END IF;
    RETURN first_id;
END
$fn$;

CREATE FUNCTION leaf_snowflake_adopt_sequence(seq regclass) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    adopted record;
    smallest bigint;
BEGIN
    -- The extension's schema keeps its name until this transaction ends (its
    -- pg_namespace row is locked), and it is the name this body was written
    -- with: every @extschema@ name below is the extension's object, even when
    -- a non-superuser owns the schema (public: the database owner). (Inline
    -- in each function: a helper would itself be called by name.)
    PERFORM 1 FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_extension e ON e.extnamespace OPERATOR(pg_catalog.=) n.oid
     WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id'
       AND n.nspname OPERATOR(pg_catalog.=) (pg_catalog.parse_ident('@extschema@'))[1]
       FOR SHARE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leaf_id''s schema is no longer named @extschema@' USING ERRCODE = '55000',
            HINT = 'Its functions name it: rename it back (ALTER SCHEMA ... RENAME TO @extschema@).';
    END IF;
    smallest := @extschema@.leaf_snowflake_min_id(pg_catalog.now());
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


-- Opaque IDs (docs/opaque-ids.md): domains are created and dropped by
-- superusers; encoding and decoding reveal a tag's count, so they need an
-- explicit grant; the key never leaves leaf_opaque_domain.

-- The view reads the tables through a function, so that naming the view
-- (PREPARE, which locks a view's tables while parsing, before any privilege
-- check, and holds the locks to the end of its transaction) locks none of
-- leaf_id's tables: only a role that may run the function (pg_monitor)
-- reads them, when the query runs. A SECURITY DEFINER function is never
-- inlined.
CREATE FUNCTION leaf_opaque_domains_list() RETURNS TABLE (name text, bits integer, created timestamptz, tags text[])
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT d.name, d.bits, d.created,
           (SELECT pg_catalog.array_agg(a.biz_tag ORDER BY a.biz_tag)
              FROM leaf_id_catalog.leaf_alloc a
             WHERE a.opaque_domain OPERATOR(pg_catalog.=) d.name) AS tags
      FROM leaf_id_catalog.leaf_opaque_domain d;
END;

CREATE VIEW leaf_opaque_domains AS SELECT * FROM @extschema@.leaf_opaque_domains_list();

CREATE FUNCTION leaf_opaque_create(name text, bits integer DEFAULT 63) RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    domain ALIAS FOR $1;
    width ALIAS FOR $2;
BEGIN
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER) THEN
        RAISE EXCEPTION 'permission denied for function leaf_opaque_create'
            USING ERRCODE = '42501', HINT = 'Only superusers may create an opaque domain.';
    END IF;
    -- The extension's schema keeps its name until this transaction ends (its
    -- pg_namespace row is locked), and it is the name this body was written
    -- with: every @extschema@ name below is the extension's object, even when
    -- a non-superuser owns the schema (public: the database owner). (Inline
    -- in each function: a helper would itself be called by name.)
    PERFORM 1 FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_extension e ON e.extnamespace OPERATOR(pg_catalog.=) n.oid
     WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id'
       AND n.nspname OPERATOR(pg_catalog.=) (pg_catalog.parse_ident('@extschema@'))[1]
       FOR SHARE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leaf_id''s schema is no longer named @extschema@' USING ERRCODE = '55000',
            HINT = 'Its functions name it: rename it back (ALTER SCHEMA ... RENAME TO @extschema@).';
    END IF;
    IF domain IS NULL OR width IS NULL THEN
        RAISE EXCEPTION 'the name and the width of an opaque domain must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.char_length(domain) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION 'an opaque domain name is 1 to 128 characters long; this one has %',
            pg_catalog.char_length(domain) USING ERRCODE = '22023';
    END IF;
    -- 20 bits at least: 2^20 is the first power of two above the 10^6
    -- values NIST's revision of SP 800-38G asks of an FF1 domain; below it a
    -- domain is a small codebook (docs/opaque-ids.md, "Widths")
    IF width NOT BETWEEN 20 AND 63 THEN
        RAISE EXCEPTION 'the width of an opaque domain is 20 to 63 bits; % was given', width
            USING ERRCODE = '22023', HINT = '63 (the default) covers every non-negative bigint; 53 keeps IDs exact in JavaScript numbers; below 20 bits a guess hits an issued ID too often.';
    END IF;
    -- On Citus the row goes to every node. An INSERT ... VALUES would carry
    -- the key as a literal of the remote command (in the nodes'
    -- pg_stat_activity, which pg_read_all_stats and so pg_monitor read, and
    -- in any log of statements); an INSERT ... SELECT is sent as a COPY, the
    -- key in its binary data. Nor may the commands reach a log from here (a
    -- database owner may ALTER DATABASE ... SET citus.log_remote_commands, a
    -- user setting; confined to this call by the SET clause above).
    IF pg_catalog.current_setting('citus.log_remote_commands', true) IS NOT NULL THEN
        PERFORM pg_catalog.set_config('citus.log_remote_commands', 'off', true),
                pg_catalog.set_config('citus.log_local_commands', 'off', true);
    END IF;
    BEGIN
        INSERT INTO leaf_id_catalog.leaf_opaque_domain (name, bits, key)
        SELECT domain, width, @extschema@.leaf_id_random_key();
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'opaque domain "%" already exists', domain USING ERRCODE = '42710';
    END;
    RETURN domain;
END
$fn$;

CREATE FUNCTION leaf_opaque_drop(name text) RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    domain ALIAS FOR $1;
    users text[];
BEGIN
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER) THEN
        RAISE EXCEPTION 'permission denied for function leaf_opaque_drop'
            USING ERRCODE = '42501', HINT = 'Only superusers may drop an opaque domain.';
    END IF;
    -- The extension's schema keeps its name until this transaction ends (its
    -- pg_namespace row is locked), and it is the name this body was written
    -- with: every @extschema@ name below is the extension's object, even when
    -- a non-superuser owns the schema (public: the database owner). (Inline
    -- in each function: a helper would itself be called by name.)
    PERFORM 1 FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_extension e ON e.extnamespace OPERATOR(pg_catalog.=) n.oid
     WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id'
       AND n.nspname OPERATOR(pg_catalog.=) (pg_catalog.parse_ident('@extschema@'))[1]
       FOR SHARE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leaf_id''s schema is no longer named @extschema@' USING ERRCODE = '55000',
            HINT = 'Its functions name it: rename it back (ALTER SCHEMA ... RENAME TO @extschema@).';
    END IF;
    IF domain IS NULL THEN
        RAISE EXCEPTION 'the name of an opaque domain must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- the row lock makes a concurrent drop wait; a tag's row names it
    PERFORM 1 FROM leaf_id_catalog.leaf_opaque_domain d WHERE d.name OPERATOR(pg_catalog.=) domain FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'opaque domain "%" does not exist', domain USING ERRCODE = '42704';
    END IF;
    SELECT pg_catalog.array_agg(a.biz_tag ORDER BY a.biz_tag) INTO users
      FROM leaf_id_catalog.leaf_alloc a WHERE a.opaque_domain OPERATOR(pg_catalog.=) domain;
    IF users IS NOT NULL THEN
        RAISE EXCEPTION 'opaque domain "%" is used by tags %', domain, users
            USING ERRCODE = '2BP01', DETAIL = 'Its key decodes the IDs those tags issued.';
    END IF;
    DELETE FROM leaf_id_catalog.leaf_opaque_domain d WHERE d.name OPERATOR(pg_catalog.=) domain;
    RETURN domain;
END
$fn$;

-- encode and decode read the key as the extension's owner: callers need
-- EXECUTE (granted explicitly), never the key's table. SQL-standard bodies:
-- the table, the function and the operator are bound by OID when the
-- function is created, so that no schema renamed or planted later (public
-- belongs to the database owner) can stand in for them while they run as
-- the owner.
CREATE FUNCTION leaf_opaque_encode(domain text, value bigint) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT @extschema@.leaf_id_opaque_code('leaf_opaque_encode', $1, $2, false, d.bits, d.key)
      FROM (VALUES (1)) AS one (x)
      LEFT JOIN leaf_id_catalog.leaf_opaque_domain d ON d.name OPERATOR(pg_catalog.=) $1;
END;

CREATE FUNCTION leaf_opaque_decode(domain text, id bigint) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT @extschema@.leaf_id_opaque_code('leaf_opaque_decode', $1, $2, true, d.bits, d.key)
      FROM (VALUES (1)) AS one (x)
      LEFT JOIN leaf_id_catalog.leaf_opaque_domain d ON d.name OPERATOR(pg_catalog.=) $1;
END;

COMMENT ON VIEW leaf_opaque_domains IS
  'Opaque domains: name, width, creation time and the tags that use each; never the key.';
COMMENT ON FUNCTION leaf_opaque_domains_list() IS
  'The rows of the view leaf_opaque_domains (the view reads the tables through it, so that naming the view locks none of them). Superusers and pg_monitor.';
COMMENT ON FUNCTION leaf_opaque_create(text, integer) IS
  'Creates an opaque domain: a fresh 128-bit key from pg_strong_random and a width of 20 to 63 bits (default 63). Superusers only.';
COMMENT ON FUNCTION leaf_opaque_drop(text) IS
  'Drops an opaque domain that no tag uses (its key is gone for good: IDs issued through it can no longer be decoded). Superusers only.';
COMMENT ON FUNCTION leaf_opaque_encode(text, bigint) IS
  'The opaque ID of a counter value in a domain: its keyed permutation of [0, 2^bits). Needs an explicit grant.';
COMMENT ON FUNCTION leaf_opaque_decode(text, bigint) IS
  'The counter value of an opaque ID of a domain (the inverse of leaf_opaque_encode); reveals a tag''s count, so it needs an explicit grant.';
COMMENT ON FUNCTION leaf_id_random_key() IS
  'Internal to leaf_opaque_create: 16 bytes from pg_strong_random.';
COMMENT ON FUNCTION leaf_id_opaque_permute(integer, bytea, bigint, boolean) IS
  'Internal: the permutation (or its inverse) of a value under a width and key.';
COMMENT ON FUNCTION leaf_id_opaque_code(text, text, bigint, boolean, integer, bytea) IS
  'Internal to leaf_opaque_encode and leaf_opaque_decode: a value through a domain''s permutation (or its inverse), given the domain''s row.';
COMMENT ON FUNCTION leaf_opaque_grant(text, text, bigint) IS
  'The value of leaf_alloc.opaque_grant that lets a tag issue an opaque domain''s IDs from a max_id on. Superusers and roles that may run leaf_opaque_decode only.';


-- Privileges (docs/privileges.md). Every install and update script ends
-- with this block, the same text in each, so that every path ends with the
-- same privileges (tests/tap/071 compares them under hostile default
-- privileges) and an update keeps what the operator granted or revoked:
--  1. What the scripts gave beyond the list below is taken back: all an
--     object made by this install or update has (ALTER DEFAULT PRIVILEGES of
--     the installing role add to it, for PUBLIC and pg_monitor too), and
--     what earlier scripts left (pg_init_privs). Grants made after an
--     install or update (the operator's: a decode grant, a tag admin) are in
--     neither and stay.
--  2. What the list has and the scripts did not give (new objects; default
--     privileges that took EXECUTE from PUBLIC) is granted; what the
--     operator revoked since stays revoked. The owner keeps all.
-- The list: drawing and decoding snowflake IDs is open to PUBLIC, as a
-- column default needs (REVOKE EXECUTE ... FROM PUBLIC to restrict it), and
-- leaf_opaque_grant checks its caller itself. What shows tag names, ranges
-- and the worker registry is for pg_monitor, as pg_stat_* details. The
-- tables and their schema (leaf_id_catalog: USAGE too), encoding and
-- decoding, and everything that changes state are the superuser's unless
-- granted. (The names are quoted by the server.)
DO $leaf_id_acl$
DECLARE
    stmt text;
BEGIN
    FOR stmt IN
        WITH intended (classid, objid, grantee, privilege) AS (
            SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, f::pg_catalog.oid, 0::pg_catalog.oid, 'EXECUTE'
              FROM pg_catalog.unnest(ARRAY[
                  '@extschema@.leaf_segment_next(text)'::pg_catalog.regprocedure,
                  '@extschema@.leaf_segment_next(text, integer)',
                  '@extschema@.leaf_snowflake_next()',
                  '@extschema@.leaf_snowflake_next(integer)',
                  '@extschema@.leaf_snowflake_decode(bigint)',
                  '@extschema@.leaf_snowflake_decode(bigint, bigint)',
                  '@extschema@.leaf_snowflake_min_id(timestamp with time zone)',
                  '@extschema@.leaf_snowflake_min_id(timestamp with time zone, bigint)',
                  '@extschema@.leaf_opaque_grant(text, text, bigint)']) f
            UNION ALL
            SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, f::pg_catalog.oid,
                   'pg_monitor'::pg_catalog.regrole::pg_catalog.oid, 'EXECUTE'
              FROM pg_catalog.unnest(ARRAY[
                  '@extschema@.leaf_segment_status()'::pg_catalog.regprocedure,
                  '@extschema@.leaf_snowflake_status()',
                  '@extschema@.leaf_id_worker_status()',
                  '@extschema@.leaf_opaque_domains_list()']) f
            UNION ALL
            SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, v::pg_catalog.oid,
                   'pg_monitor'::pg_catalog.regrole::pg_catalog.oid, 'SELECT'
              FROM pg_catalog.unnest(ARRAY[
                  '@extschema@.leaf_segment_status'::pg_catalog.regclass,
                  '@extschema@.leaf_snowflake_status',
                  '@extschema@.leaf_id_worker_status',
                  '@extschema@.leaf_opaque_domains']) v
        ), member AS (
            SELECT d.classid, d.objid,
                   CASE WHEN p.oid IS NOT NULL THEN 'FUNCTION'
                        WHEN ns.oid IS NOT NULL THEN 'SCHEMA' ELSE 'TABLE' END AS kind,
                   CASE WHEN p.oid IS NOT NULL THEN d.objid::pg_catalog.regprocedure::pg_catalog.text
                        WHEN ns.oid IS NOT NULL THEN pg_catalog.quote_ident(ns.nspname::pg_catalog.text)
                        ELSE d.objid::pg_catalog.regclass::pg_catalog.text END AS name,
                   COALESCE(p.proowner, c.relowner, ns.nspowner) AS owner,
                   COALESCE(p.proacl, c.relacl, ns.nspacl,
                            pg_catalog.acldefault(t.objtype, COALESCE(p.proowner, c.relowner, ns.nspowner))) AS acl,
                   -- made by this install or update (its membership is of
                   -- this transaction): all it has is the scripts'; else
                   -- what the earlier scripts left (no row: the default)
                   CASE WHEN d.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(pg_catalog.pg_current_xact_id())
                        THEN COALESCE(p.proacl, c.relacl, ns.nspacl,
                                      pg_catalog.acldefault(t.objtype, COALESCE(p.proowner, c.relowner, ns.nspowner)))
                        ELSE COALESCE(i.initprivs,
                                      pg_catalog.acldefault(t.objtype, COALESCE(p.proowner, c.relowner, ns.nspowner))) END AS initial,
                   t.objtype
              FROM pg_catalog.pg_depend d
              LEFT JOIN pg_catalog.pg_proc p
                ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
               AND p.oid OPERATOR(pg_catalog.=) d.objid
              LEFT JOIN pg_catalog.pg_class c
                ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
               AND c.oid OPERATOR(pg_catalog.=) d.objid
              LEFT JOIN pg_catalog.pg_namespace ns
                ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
               AND ns.oid OPERATOR(pg_catalog.=) d.objid
              CROSS JOIN LATERAL (SELECT (CASE WHEN p.oid IS NOT NULL THEN 'f'
                                               WHEN ns.oid IS NOT NULL THEN 'n' ELSE 'r' END)::"char" AS objtype) t
              LEFT JOIN pg_catalog.pg_init_privs i
                ON i.classoid OPERATOR(pg_catalog.=) d.classid AND i.objoid OPERATOR(pg_catalog.=) d.objid
               AND i.objsubid OPERATOR(pg_catalog.=) 0
             WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
               AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
                                                       WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id')
               AND d.deptype OPERATOR(pg_catalog.=) 'e'
               AND (p.oid IS NOT NULL OR ns.oid IS NOT NULL
                    OR c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p', 'v', 'm']::pg_catalog."char"[]))
        ), initial AS (
            SELECT m.*, a.grantee, a.privilege_type
              FROM member m CROSS JOIN LATERAL pg_catalog.aclexplode(m.initial) a
        ), current AS (
            SELECT m.classid, m.objid, a.grantee, a.privilege_type
              FROM member m CROSS JOIN LATERAL pg_catalog.aclexplode(m.acl) a
        )
        -- 1. script-made, still there, not on the list
        SELECT pg_catalog.format('REVOKE %s ON %s %s FROM %s', g.privilege_type, g.kind, g.name,
                                 CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                      ELSE pg_catalog.quote_ident(r.rolname) END)
          FROM initial g
          LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) g.grantee
         WHERE g.grantee OPERATOR(pg_catalog.<>) g.owner
           AND EXISTS (SELECT 1 FROM current c
                        WHERE c.classid OPERATOR(pg_catalog.=) g.classid AND c.objid OPERATOR(pg_catalog.=) g.objid
                          AND c.grantee OPERATOR(pg_catalog.=) g.grantee
                          AND c.privilege_type OPERATOR(pg_catalog.=) g.privilege_type)
           AND NOT EXISTS (SELECT 1 FROM intended w
                            WHERE w.classid OPERATOR(pg_catalog.=) g.classid AND w.objid OPERATOR(pg_catalog.=) g.objid
                              AND w.grantee OPERATOR(pg_catalog.=) g.grantee
                              AND w.privilege OPERATOR(pg_catalog.=) g.privilege_type)
        UNION ALL
        -- 2. on the list, not given by the scripts
        SELECT pg_catalog.format('GRANT %s ON %s %s TO %s', w.privilege, m.kind, m.name,
                                 CASE WHEN w.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                      ELSE pg_catalog.quote_ident(r.rolname) END)
          FROM intended w
          JOIN member m ON m.classid OPERATOR(pg_catalog.=) w.classid AND m.objid OPERATOR(pg_catalog.=) w.objid
          LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) w.grantee
         WHERE NOT EXISTS (SELECT 1 FROM initial g
                            WHERE g.classid OPERATOR(pg_catalog.=) w.classid AND g.objid OPERATOR(pg_catalog.=) w.objid
                              AND g.grantee OPERATOR(pg_catalog.=) w.grantee
                              AND g.privilege_type OPERATOR(pg_catalog.=) w.privilege)
        UNION ALL
        -- the owner keeps all: granted only where it lacks some (every GRANT
        -- or REVOKE in a script also writes the object's whole ACL, the
        -- operator's grants with it, into pg_init_privs, and pg_dump leaves
        -- out what pg_init_privs has)
        SELECT pg_catalog.format('GRANT ALL ON %s %s TO %I', m.kind, m.name, r.rolname)
          FROM member m JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) m.owner
         WHERE EXISTS (SELECT 1
                         FROM pg_catalog.aclexplode(pg_catalog.acldefault(m.objtype, m.owner)) d
                        WHERE d.grantee OPERATOR(pg_catalog.=) m.owner
                          AND NOT EXISTS (SELECT 1 FROM current c
                                           WHERE c.classid OPERATOR(pg_catalog.=) m.classid
                                             AND c.objid OPERATOR(pg_catalog.=) m.objid
                                             AND c.grantee OPERATOR(pg_catalog.=) m.owner
                                             AND c.privilege_type OPERATOR(pg_catalog.=) d.privilege_type))
    LOOP
        EXECUTE stmt;
    END LOOP;
END
$leaf_id_acl$;
