-- leaf_id 0.2.0 -> 0.3.0 (ALTER EXTENSION leaf_id UPDATE).
-- After this script the catalog equals a fresh install of 0.3.0
-- (tests/tap/056_extension_upgrade.pl compares them; on Citus,
-- tests/citus/218_citus_extension_update.pl runs it).
\echo Use "ALTER EXTENSION leaf_id UPDATE TO '0.3.0'" to load this file. \quit

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

-- the copies a holder's lease counts on Citus: NULL until
-- the row's next claim or its holder's next renewal sets them
ALTER TABLE leaf_worker ADD COLUMN copies bigint[], ADD COLUMN holder_copy bigint;
COMMENT ON COLUMN leaf_worker.copies IS 'On Citus: the group ids of the nodes with the copies of leaf_worker that the holder''s renewals count a majority of, set by its claim and moved by the holder when the nodes change; a release or take-over must reach all but the holder''s own. NULL: not on Citus.';
COMMENT ON COLUMN leaf_worker.holder_copy IS 'On Citus: the group id of the holder''s node (NULL: it had no copy of leaf_worker).';

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
        EXECUTE pg_catalog.format('ALTER TABLE %I.%I ADD COLUMN copies bigint[], ADD COLUMN holder_copy bigint',
                                  shard.nspname, shard.relname);
    END LOOP;
END
$do$;

-- a release must reach every copy the holder's lease counts but its own
CREATE OR REPLACE FUNCTION leaf_snowflake_release_worker_id(worker_id integer) RETURNS text
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
    IF id IS NULL THEN
        RAISE EXCEPTION 'worker_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF id < 0 OR id > 1023 THEN
        RAISE EXCEPTION 'worker_id % is out of range', id
            USING ERRCODE = '22023', DETAIL = 'Snowflake worker ids are 0 to 1023.';
    END IF;
    -- the row lock makes a concurrent release or claim wait for this one
    SELECT w.node_name, w.copies, w.holder_copy INTO owner, pinned, holder
      FROM @extschema@.leaf_worker w WHERE w.worker_id = id FOR UPDATE;
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
         WHERE s.logicalrelid = (SELECT c.oid FROM pg_catalog.pg_class c
                                  WHERE c.relname = 'leaf_worker'
                                    AND c.relnamespace = (SELECT e.extnamespace FROM pg_catalog.pg_extension e
                                                           WHERE e.extname = 'leaf_id'));
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
    UPDATE @extschema@.leaf_worker w
       SET node_name = CASE WHEN w.node_name = owner AND w.copies IS NOT DISTINCT FROM pinned
                                 AND w.holder_copy IS NOT DISTINCT FROM holder
                            THEN 'released:' OPERATOR(pg_catalog.||) id::text
                            ELSE @extschema@.leaf_id_worker_row_conflict(w.worker_id, w.node_name, w.owner_token)::text END,
           owner_token = NULL
     WHERE w.worker_id = id;
    RETURN owner;
END
$fn$;

SELECT pg_catalog.set_config('citus.enable_ddl_propagation',
                             pg_catalog.current_setting('leaf_id_update.ddl_propagation'), true)
 WHERE pg_catalog.current_setting('leaf_id_update.ddl_propagation', true) IS NOT NULL;
