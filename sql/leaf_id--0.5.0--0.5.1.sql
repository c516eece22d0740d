-- leaf_id 0.5.0 -> 0.5.1 (ALTER EXTENSION leaf_id UPDATE):
--  - on Citus, leaf_opaque_create sends a new domain's key to the other nodes
--    in the binary data of a COPY (an INSERT ... SELECT), no longer as a
--    literal of the remote command, which their pg_stat_activity showed to
--    pg_read_all_stats (and so pg_monitor) while it ran
--    (tests/citus/219_citus_opaque.pl);
--  - pg_init_privs holds what the scripts gave, not the operator's grants,
--    and the privilege block writes it only where it changes something
--    (tests/tap/056: an operator's grants on 0.4.0 survive two updates and
--    are in pg_dump's output).
-- After this script the catalog equals a fresh install of 0.5.1
-- (tests/tap/056_extension_upgrade.pl and 071 compare them).

\echo Use "ALTER EXTENSION leaf_id UPDATE TO '0.5.1'" to load this file. \quit

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

-- On Citus (see leaf_id--0.2.0--0.3.0.sql): each node alters its own table
-- and its own shard, with Citus' DDL propagation off for the script.
SELECT pg_catalog.set_config('leaf_id_update.ddl_propagation',
                             pg_catalog.current_setting('citus.enable_ddl_propagation', true), true),
       pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true)
 WHERE pg_catalog.current_setting('citus.enable_ddl_propagation', true) IS NOT NULL;

-- the privileged functions, as a fresh install of 0.5.1 has them
CREATE OR REPLACE FUNCTION leaf_opaque_create(name text, bits integer DEFAULT 63) RETURNS text
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
       AND pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.=) '@extschema@'
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
        INSERT INTO @extschema@.leaf_opaque_domain (name, bits, key)
        SELECT domain, width, @extschema@.leaf_id_random_key();
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'opaque domain "%" already exists', domain USING ERRCODE = '42710';
    END;
    RETURN domain;
END
$fn$;

-- pg_init_privs back to what the scripts gave: the list below and the owner's
-- own. 0.5.0's privilege block granted the owner ALL on every object, which
-- wrote each object's whole ACL into pg_init_privs, the operator's grants
-- included (an update from 0.4.0 kept them there): pg_dump left them out,
-- and the block below would take them for the scripts' and revoke them.
-- (The list is the privilege block's; a superuser's update may write the
-- catalog.)
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
          '@extschema@.leaf_snowflake_status()']) f
    UNION ALL
    SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, v::pg_catalog.oid,
           'pg_monitor'::pg_catalog.regrole::pg_catalog.oid, 'SELECT'
      FROM pg_catalog.unnest(ARRAY[
          '@extschema@.leaf_segment_status'::pg_catalog.regclass,
          '@extschema@.leaf_snowflake_status',
          '@extschema@.leaf_opaque_domains']) v
), member AS (
    SELECT d.classid, d.objid,
           CASE WHEN p.oid IS NOT NULL THEN 'f' ELSE 'r' END::"char" AS kind,
           CASE WHEN p.oid IS NOT NULL THEN 'EXECUTE' ELSE 'SELECT' END AS probe,
           COALESCE(p.proowner, c.relowner) AS owner
      FROM pg_catalog.pg_depend d
      LEFT JOIN pg_catalog.pg_proc p
        ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND p.oid OPERATOR(pg_catalog.=) d.objid
      LEFT JOIN pg_catalog.pg_class c
        ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
       AND c.oid OPERATOR(pg_catalog.=) d.objid
     WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
                                               WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id')
       AND d.deptype OPERATOR(pg_catalog.=) 'e'
       AND (p.oid IS NOT NULL OR c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p', 'v', 'm']::pg_catalog."char"[]))
), scripts AS (
    SELECT m.classid, m.objid,
           ARRAY(SELECT a FROM pg_catalog.unnest(pg_catalog.acldefault(m.kind, m.owner)) a
                  WHERE pg_catalog.aclcontains(ARRAY[a], pg_catalog.makeaclitem(m.owner, m.owner, m.probe, false)))
           OPERATOR(pg_catalog.||)
           ARRAY(SELECT pg_catalog.makeaclitem(w.grantee, m.owner, w.privilege, false)
                   FROM intended w
                  WHERE w.classid OPERATOR(pg_catalog.=) m.classid AND w.objid OPERATOR(pg_catalog.=) m.objid)
           AS acl
      FROM member m
)
UPDATE pg_catalog.pg_init_privs i
   SET initprivs = s.acl
  FROM scripts s
 WHERE i.classoid OPERATOR(pg_catalog.=) s.classid AND i.objoid OPERATOR(pg_catalog.=) s.objid
   AND i.objsubid OPERATOR(pg_catalog.=) 0;

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
                  '@extschema@.leaf_snowflake_status()']) f
            UNION ALL
            SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, v::pg_catalog.oid,
                   'pg_monitor'::pg_catalog.regrole::pg_catalog.oid, 'SELECT'
              FROM pg_catalog.unnest(ARRAY[
                  '@extschema@.leaf_segment_status'::pg_catalog.regclass,
                  '@extschema@.leaf_snowflake_status',
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
