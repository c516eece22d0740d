-- leaf_id 0.5.2 -> 0.6.0 (ALTER EXTENSION leaf_id UPDATE):
--  - leaf_alloc.max_value: the largest value a tag issues (a refill that
--    would pass it is refused, 2200H), set by leaf_segment_adopt_sequence
--    for an integer or smallint column;
--  - leaf_alloc.draw_role: only superusers and roles with that role's
--    privileges may draw the tag's IDs (42501 for the others), so that a
--    role that may run leaf_segment_next cannot burn another tenant's tag
--    (tests/tap/083).
-- Both NULL in every existing row: the tags go on as before. Nothing is
-- dropped, so the operator's grants stay. After this script the catalog
-- equals a fresh install of 0.6.0 (tests/tap/056_extension_upgrade.pl and
-- 071 compare them; on Citus, tests/citus/218 runs it).

\echo Use "ALTER EXTENSION leaf_id UPDATE TO '0.6.0'" to load this file. \quit

-- The extension's schema keeps its name until the update ends (its
-- pg_namespace row is locked): a non-superuser who owns it (public belongs to
-- the database owner) cannot rename it and put look-alikes under its name
-- while the names below are resolved.
DO $leaf_id_pin$
BEGIN
    PERFORM 1 FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_extension e ON e.extnamespace OPERATOR(pg_catalog.=) n.oid
     WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id'
       AND n.nspname OPERATOR(pg_catalog.=) (pg_catalog.parse_ident('@extschema@'))[1]
       FOR SHARE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the schema of leaf_id was renamed while ALTER EXTENSION ran' USING ERRCODE = '55000';
    END IF;
END
$leaf_id_pin$;

-- On Citus (see leaf_id--0.2.0--0.3.0.sql): each node alters its own table
-- and its own shard, with Citus' DDL propagation off for the script.
SELECT pg_catalog.set_config('leaf_id_update.ddl_propagation',
                             pg_catalog.current_setting('citus.enable_ddl_propagation', true), true),
       pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true)
 WHERE pg_catalog.current_setting('citus.enable_ddl_propagation', true) IS NOT NULL;

ALTER TABLE leaf_alloc ADD COLUMN max_value bigint, ADD COLUMN draw_role pg_catalog.name;
COMMENT ON COLUMN leaf_alloc.max_value IS 'The largest value the tag may issue (an opaque tag: the largest counter value); a refill that would pass it is refused (2200H). NULL: no bound but the bigint''s (or the opaque domain''s). leaf_segment_adopt_sequence sets it to the largest value the adopted column''s type and its sequence''s MAXVALUE allow. Changes apply at the next refill; what is reserved already is handed out.';
COMMENT ON COLUMN leaf_alloc.draw_role IS 'A role name: only superusers and roles with the privileges of this role (members that inherit them) may draw the tag''s IDs, others get 42501. NULL: every role that may run leaf_segment_next. A name no role has leaves the tag to superusers. Changes apply at the tag''s next refill (SELECT leaf_id_reset_cache() applies them at once).';

-- On Citus, this node's copy of leaf_alloc (a shard of the reference table)
-- gets the columns too.
DO $do$
DECLARE
    shard record;
BEGIN
    -- (two statements: a query naming pg_dist_partition fails to plan without Citus)
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN;
    END IF;
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
           AND c.relname OPERATOR(pg_catalog.=) ('leaf_alloc_' OPERATOR(pg_catalog.||) s.shardid::pg_catalog.text)
          JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
         WHERE s.logicalrelid OPERATOR(pg_catalog.=) (SELECT t.oid FROM pg_catalog.pg_class t
                                  WHERE t.relname OPERATOR(pg_catalog.=) 'leaf_alloc' AND t.relnamespace OPERATOR(pg_catalog.=) e.extnamespace)
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
        EXECUTE pg_catalog.format('ALTER TABLE %I.%I ADD COLUMN max_value bigint, ADD COLUMN draw_role pg_catalog.name',
                                  shard.nspname, shard.relname);
    END LOOP;
END
$do$;

-- as a fresh install of 0.6.0 has it: an adopted tag gets the largest
-- value its column and its sequence allow as max_value
CREATE OR REPLACE FUNCTION leaf_segment_adopt_sequence(seq regclass, tag text, step integer DEFAULT 1000) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    adopted record;
    first_id bigint;
    seq_max bigint;
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
    IF EXISTS (SELECT 1 FROM @extschema@.leaf_alloc a WHERE a.biz_tag = tag) THEN
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
    INSERT INTO @extschema@.leaf_alloc (biz_tag, max_id, step, description, max_value)
    VALUES (tag, first_id, step, pg_catalog.format('adopted from sequence %s of %s.%I',
                                                   seq, adopted.owner_table, adopted.owner_column),
            NULLIF(seq_max, 9223372036854775807));
    RETURN first_id;
END
$fn$;

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
-- tables, encoding and decoding, and everything that changes state are the
-- superuser's unless granted. (The names are quoted by the server.)
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
                  '@extschema@.leaf_id_worker_status()']) f
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
                   CASE WHEN d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                        THEN 'FUNCTION' ELSE 'TABLE' END AS kind,
                   CASE WHEN d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                        THEN d.objid::pg_catalog.regprocedure::pg_catalog.text
                        ELSE d.objid::pg_catalog.regclass::pg_catalog.text END AS name,
                   COALESCE(p.proowner, c.relowner) AS owner,
                   COALESCE(p.proacl, c.relacl,
                            pg_catalog.acldefault((CASE WHEN p.oid IS NOT NULL THEN 'f' ELSE 'r' END)::"char",
                                                  COALESCE(p.proowner, c.relowner))) AS acl,
                   -- made by this install or update (its membership is of
                   -- this transaction): all it has is the scripts'; else
                   -- what the earlier scripts left (no row: the default)
                   CASE WHEN d.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(pg_catalog.pg_current_xact_id())
                        THEN COALESCE(p.proacl, c.relacl,
                                      pg_catalog.acldefault((CASE WHEN p.oid IS NOT NULL THEN 'f' ELSE 'r' END)::"char",
                                                            COALESCE(p.proowner, c.relowner)))
                        ELSE COALESCE(i.initprivs,
                                      pg_catalog.acldefault((CASE WHEN p.oid IS NOT NULL THEN 'f' ELSE 'r' END)::"char",
                                                            COALESCE(p.proowner, c.relowner))) END AS initial
              FROM pg_catalog.pg_depend d
              LEFT JOIN pg_catalog.pg_proc p
                ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
               AND p.oid OPERATOR(pg_catalog.=) d.objid
              LEFT JOIN pg_catalog.pg_class c
                ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
               AND c.oid OPERATOR(pg_catalog.=) d.objid
              LEFT JOIN pg_catalog.pg_init_privs i
                ON i.classoid OPERATOR(pg_catalog.=) d.classid AND i.objoid OPERATOR(pg_catalog.=) d.objid
               AND i.objsubid OPERATOR(pg_catalog.=) 0
             WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
               AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
                                                       WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id')
               AND d.deptype OPERATOR(pg_catalog.=) 'e'
               AND (p.oid IS NOT NULL OR c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p', 'v', 'm']::pg_catalog."char"[]))
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
                         FROM pg_catalog.aclexplode(pg_catalog.acldefault(
                                  (CASE WHEN m.kind OPERATOR(pg_catalog.=) 'FUNCTION' THEN 'f' ELSE 'r' END)::"char",
                                  m.owner)) d
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

SELECT pg_catalog.set_config('citus.enable_ddl_propagation',
                             pg_catalog.current_setting('leaf_id_update.ddl_propagation'), true)
 WHERE pg_catalog.current_setting('leaf_id_update.ddl_propagation', true) IS NOT NULL;
