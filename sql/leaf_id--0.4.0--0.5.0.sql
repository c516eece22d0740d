-- leaf_id 0.4.0 -> 0.5.0 (ALTER EXTENSION leaf_id UPDATE):
--  - the privileged SQL functions cannot be made to run a database owner's
--    look-alikes: encode and decode have SQL-standard bodies (bound by OID),
--    the superusers' PL/pgSQL functions lock the schema's name;
--  - a tag uses an opaque domain only with a grant (leaf_alloc.opaque_grant)
--    that a role allowed to decode computed (leaf_opaque_grant); the tags of
--    0.4.0 that use one get theirs here;
--  - the encoding each tag issued under is kept apart from its row
--    (leaf_alloc_encoding): a tag deleted and inserted under another encoding
--    is refused;
--  - privileges are reset to the same list as a fresh install.
-- After this script the catalog equals a fresh install of 0.5.0
-- (tests/tap/056_extension_upgrade.pl and 071 compare them; on Citus,
-- tests/citus/218_citus_extension_update.pl runs it).
\echo Use "ALTER EXTENSION leaf_id UPDATE TO '0.5.0'" to load this file. \quit

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

-- the Rust functions of this version (as a fresh install declares them)
CREATE  FUNCTION "leaf_id_opaque_code"(
	"caller" TEXT, /* & str */
	"domain" TEXT, /* Option < & str > */
	"value" bigint, /* Option < i64 > */
	"inverse" bool, /* bool */
	"bits" INT, /* Option < i32 > */
	"key" bytea /* Option < & [u8] > */
) RETURNS bigint /* i64 */
IMMUTABLE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'leaf_id_opaque_code_wrapper';

CREATE  FUNCTION "leaf_opaque_grant"(
	"domain" TEXT, /* Option < & str > */
	"tag" TEXT, /* Option < & str > */
	"max_id" bigint /* Option < i64 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'leaf_opaque_grant_wrapper';

ALTER TABLE leaf_alloc ADD COLUMN opaque_grant bigint;
COMMENT ON COLUMN leaf_alloc.opaque_grant IS 'With opaque_domain: leaf_opaque_grant(opaque_domain, biz_tag, max_id), which only a superuser or a role that may run leaf_opaque_decode can compute; each refill writes the one of its new max_id. A refill of an opaque tag whose grant does not match is refused (42501).';

-- The encodings tags issued under, kept when a row is deleted; filled from
-- every row that recorded one (a refill of 0.4.0, or 0 for the tags of 0.3.0).
CREATE TABLE leaf_alloc_encoding (
    biz_tag      text        PRIMARY KEY,
    opaque_check bigint      NOT NULL,
    reserved_end bigint      NOT NULL DEFAULT 0,
    first_refill timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('leaf_alloc_encoding', '');

COMMENT ON TABLE leaf_alloc_encoding IS
  'leaf_id segment mode: the encoding each tag issued its IDs under (written by its first refill) and the end of all that was reserved for it, kept when its leaf_alloc row is deleted: a tag inserted again under another encoding (plain or another opaque domain) is refused (55000), since its IDs could equal those issued before, and no refill starts below the end. Superusers only; delete a row only for a tag whose IDs are all gone.';
COMMENT ON COLUMN leaf_alloc_encoding.opaque_check IS 'The fingerprint of the encoding, as leaf_alloc.opaque_check (0: plain).';
COMMENT ON COLUMN leaf_alloc_encoding.reserved_end IS 'The end of everything a refill reserved for the tag (its max_id after the refill): the next refill starts at or above it, whatever leaf_alloc.max_id says, so a max_id moved back (or an old row put back with its grant), or a row deleted and inserted again lower, repeats no ID, also after a restart.';
COMMENT ON COLUMN leaf_alloc_encoding.first_refill IS 'Time of the first refill recorded here.';

-- The tags of 0.4.0 that use a domain get the grant of their max_id (this
-- update is run by a superuser, who may grant any domain); on Citus, each
-- node's own copy, as every node runs this script. Only if no one but
-- superusers can write leaf_alloc (a role granted INSERT or UPDATE on it, a
-- tag admin, or a member of pg_write_all_data could have planted a row with
-- another tag's domain, and granting it would hand her the domain's
-- codebook), and only a tag whose domain no other tag uses. Else the update
-- grants nothing, and says which tags a superuser must check and grant.
DO $do$
DECLARE
    shard record;
    writers text[];
    pending text[];
    auto boolean;
BEGIN
    SELECT pg_catalog.array_agg(DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE r.rolname::pg_catalog.text END)
      INTO writers
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_extension e ON e.extname OPERATOR(pg_catalog.=) 'leaf_id' AND c.relnamespace OPERATOR(pg_catalog.=) e.extnamespace
      CROSS JOIN LATERAL (
          SELECT x.grantee, x.privilege_type
            FROM pg_catalog.aclexplode(COALESCE(c.relacl, pg_catalog.acldefault('r', c.relowner))) x
          UNION ALL
          SELECT x.grantee, x.privilege_type
            FROM pg_catalog.pg_attribute att
            CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) x
           WHERE att.attrelid OPERATOR(pg_catalog.=) c.oid AND att.attacl IS NOT NULL) a
      LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
     WHERE c.relname OPERATOR(pg_catalog.=) 'leaf_alloc'
       AND a.privilege_type OPERATOR(pg_catalog.=) ANY (ARRAY['INSERT', 'UPDATE']::pg_catalog.text[])
       AND (a.grantee OPERATOR(pg_catalog.=) 0 OR NOT r.rolsuper);
    -- (and the members of pg_write_all_data, who need no grant on the table)
    SELECT pg_catalog.array_cat(writers, pg_catalog.array_agg(r.rolname::pg_catalog.text ORDER BY r.rolname))
      INTO writers
      FROM pg_catalog.pg_roles r
     WHERE NOT r.rolsuper
       AND r.oid OPERATOR(pg_catalog.<>) 'pg_write_all_data'::pg_catalog.regrole
       AND pg_catalog.pg_has_role(r.oid, 'pg_write_all_data'::pg_catalog.regrole, 'USAGE')
    HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0 OR writers IS NOT NULL;
    auto := writers IS NULL;
    -- (two statements: a query naming pg_dist_partition fails to plan without Citus)
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        -- (nor a tag whose domain another tag uses too: either may be a
        -- copy planted by a role that could write leaf_alloc once, and
        -- revoked or dropped since, whom no ACL shows any more)
        UPDATE @extschema@.leaf_alloc a
           SET opaque_grant = @extschema@.leaf_opaque_grant(a.opaque_domain, a.biz_tag, a.max_id)
         WHERE auto AND a.opaque_domain IS NOT NULL
           AND EXISTS (SELECT 1 FROM @extschema@.leaf_opaque_domain d WHERE d.name OPERATOR(pg_catalog.=) a.opaque_domain)
           AND NOT EXISTS (SELECT 1 FROM @extschema@.leaf_alloc b
                            WHERE b.opaque_domain OPERATOR(pg_catalog.=) a.opaque_domain AND b.biz_tag OPERATOR(pg_catalog.<>) a.biz_tag);
        INSERT INTO @extschema@.leaf_alloc_encoding (biz_tag, opaque_check, reserved_end)
        SELECT a.biz_tag, a.opaque_check, a.max_id FROM @extschema@.leaf_alloc a WHERE a.opaque_check IS NOT NULL;
        SELECT pg_catalog.array_agg(a.biz_tag ORDER BY a.biz_tag) INTO pending
          FROM @extschema@.leaf_alloc a WHERE a.opaque_domain IS NOT NULL AND a.opaque_grant IS NULL;
        IF pending IS NOT NULL THEN
            RAISE WARNING 'leaf_id: the opaque tags % were not granted their domains by this update: %', pending,
                CASE WHEN auto THEN 'each shares its domain with another tag'
                     ELSE pg_catalog.format('%s could write leaf_alloc', writers) END
                USING HINT = 'Check each row (its opaque_domain and max_id), then: UPDATE leaf_alloc SET opaque_grant = leaf_opaque_grant(opaque_domain, biz_tag, max_id) WHERE biz_tag = ...; until then its refills are refused (42501).';
        END IF;
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p
                    WHERE p.logicalrelid OPERATOR(pg_catalog.=) (SELECT t.oid FROM pg_catalog.pg_class t
                                              JOIN pg_catalog.pg_extension e ON e.extname OPERATOR(pg_catalog.=) 'leaf_id'
                                             WHERE t.relname OPERATOR(pg_catalog.=) 'leaf_alloc' AND t.relnamespace OPERATOR(pg_catalog.=) e.extnamespace)) THEN
        -- (nor a tag whose domain another tag uses too: either may be a
        -- copy planted by a role that could write leaf_alloc once, and
        -- revoked or dropped since, whom no ACL shows any more)
        UPDATE @extschema@.leaf_alloc a
           SET opaque_grant = @extschema@.leaf_opaque_grant(a.opaque_domain, a.biz_tag, a.max_id)
         WHERE auto AND a.opaque_domain IS NOT NULL
           AND EXISTS (SELECT 1 FROM @extschema@.leaf_opaque_domain d WHERE d.name OPERATOR(pg_catalog.=) a.opaque_domain)
           AND NOT EXISTS (SELECT 1 FROM @extschema@.leaf_alloc b
                            WHERE b.opaque_domain OPERATOR(pg_catalog.=) a.opaque_domain AND b.biz_tag OPERATOR(pg_catalog.<>) a.biz_tag);
        INSERT INTO @extschema@.leaf_alloc_encoding (biz_tag, opaque_check, reserved_end)
        SELECT a.biz_tag, a.opaque_check, a.max_id FROM @extschema@.leaf_alloc a WHERE a.opaque_check IS NOT NULL;
        SELECT pg_catalog.array_agg(a.biz_tag ORDER BY a.biz_tag) INTO pending
          FROM @extschema@.leaf_alloc a WHERE a.opaque_domain IS NOT NULL AND a.opaque_grant IS NULL;
        IF pending IS NOT NULL THEN
            RAISE WARNING 'leaf_id: the opaque tags % were not granted their domains by this update: %', pending,
                CASE WHEN auto THEN 'each shares its domain with another tag'
                     ELSE pg_catalog.format('%s could write leaf_alloc', writers) END
                USING HINT = 'Check each row (its opaque_domain and max_id), then: UPDATE leaf_alloc SET opaque_grant = leaf_opaque_grant(opaque_domain, biz_tag, max_id) WHERE biz_tag = ...; until then its refills are refused (42501).';
        END IF;
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
        EXECUTE pg_catalog.format('ALTER TABLE %I.%I ADD COLUMN opaque_grant bigint', shard.nspname, shard.relname);
        EXECUTE pg_catalog.format(
            'INSERT INTO %I.leaf_alloc_encoding (biz_tag, opaque_check, reserved_end) SELECT a.biz_tag, a.opaque_check, a.max_id '
            'FROM %I.%I a WHERE a.opaque_check IS NOT NULL ON CONFLICT DO NOTHING',
            shard.nspname, shard.nspname, shard.relname);
        -- On Citus no grant is written here: the grant reads the domains'
        -- table, a distributed query that Citus refuses inside the one it
        -- runs the update by; the tags are listed (from this node's copy)
        -- for a superuser to grant on the coordinator.
        EXECUTE pg_catalog.format('SELECT pg_catalog.array_agg(a.biz_tag ORDER BY a.biz_tag) FROM %I.%I a '
                                  'WHERE a.opaque_domain IS NOT NULL', shard.nspname, shard.relname)
           INTO pending;
        IF pending IS NOT NULL THEN
            RAISE WARNING 'leaf_id: the opaque tags % were not granted their domains by this update (on Citus it grants none)', pending
                USING HINT = 'Check each row (its opaque_domain and max_id), then on the coordinator: UPDATE leaf_alloc SET opaque_grant = leaf_opaque_grant(opaque_domain, biz_tag, max_id) WHERE biz_tag = ...; until then its refills are refused (42501).';
        END IF;
    END LOOP;
END
$do$;

-- the privileged functions, as a fresh install of 0.5.0 has them
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

CREATE OR REPLACE FUNCTION leaf_id_adopt_sequence(seq regclass, new_default text, freeze_sequence boolean,
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
       AND pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.=) '@extschema@'
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
    SELECT s.seqincrement, s.seqmax INTO seq_increment, seq_max FROM pg_catalog.pg_sequence s WHERE s.seqrelid = seq;
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
        EXECUTE pg_catalog.format('ALTER SEQUENCE %s MAXVALUE %s NO CYCLE', seq_name, seq_last);
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', table_name, owner_column, new_default);
END
$fn$;

CREATE OR REPLACE FUNCTION leaf_segment_adopt_sequence(seq regclass, tag text, step integer DEFAULT 1000) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    adopted record;
    first_id bigint;
BEGIN
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

CREATE OR REPLACE FUNCTION leaf_snowflake_adopt_sequence(seq regclass) RETURNS bigint
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
       AND pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.=) '@extschema@'
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
    -- On Citus the key goes to every node as a literal of this INSERT: it
    -- must not reach a log from here (a database owner may ALTER DATABASE ...
    -- SET citus.log_remote_commands, a user setting). (Confined to this call
    -- by the SET clause above.)
    IF pg_catalog.current_setting('citus.log_remote_commands', true) IS NOT NULL THEN
        PERFORM pg_catalog.set_config('citus.log_remote_commands', 'off', true),
                pg_catalog.set_config('citus.log_local_commands', 'off', true);
    END IF;
    BEGIN
        INSERT INTO @extschema@.leaf_opaque_domain (name, bits, key)
        VALUES (domain, width, @extschema@.leaf_id_random_key());
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'opaque domain "%" already exists', domain USING ERRCODE = '42710';
    END;
    RETURN domain;
END
$fn$;

CREATE OR REPLACE FUNCTION leaf_opaque_drop(name text) RETURNS text
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
       AND pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.=) '@extschema@'
       FOR SHARE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leaf_id''s schema is no longer named @extschema@' USING ERRCODE = '55000',
            HINT = 'Its functions name it: rename it back (ALTER SCHEMA ... RENAME TO @extschema@).';
    END IF;
    IF domain IS NULL THEN
        RAISE EXCEPTION 'the name of an opaque domain must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- the row lock makes a concurrent drop wait; a tag's row names it
    PERFORM 1 FROM @extschema@.leaf_opaque_domain d WHERE d.name OPERATOR(pg_catalog.=) domain FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'opaque domain "%" does not exist', domain USING ERRCODE = '42704';
    END IF;
    SELECT pg_catalog.array_agg(a.biz_tag ORDER BY a.biz_tag) INTO users
      FROM @extschema@.leaf_alloc a WHERE a.opaque_domain OPERATOR(pg_catalog.=) domain;
    IF users IS NOT NULL THEN
        RAISE EXCEPTION 'opaque domain "%" is used by tags %', domain, users
            USING ERRCODE = '2BP01', DETAIL = 'Its key decodes the IDs those tags issued.';
    END IF;
    DELETE FROM @extschema@.leaf_opaque_domain d WHERE d.name OPERATOR(pg_catalog.=) domain;
    RETURN domain;
END
$fn$;

CREATE OR REPLACE FUNCTION leaf_opaque_encode(domain text, value bigint) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT @extschema@.leaf_id_opaque_code('leaf_opaque_encode', $1, $2, false, d.bits, d.key)
      FROM (VALUES (1)) AS one (x)
      LEFT JOIN @extschema@.leaf_opaque_domain d ON d.name OPERATOR(pg_catalog.=) $1;
END;

CREATE OR REPLACE FUNCTION leaf_opaque_decode(domain text, id bigint) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT @extschema@.leaf_id_opaque_code('leaf_opaque_decode', $1, $2, true, d.bits, d.key)
      FROM (VALUES (1)) AS one (x)
      LEFT JOIN @extschema@.leaf_opaque_domain d ON d.name OPERATOR(pg_catalog.=) $1;
END;

COMMENT ON FUNCTION leaf_opaque_create(text, integer) IS
  'Creates an opaque domain: a fresh 128-bit key from pg_strong_random and a width of 20 to 63 bits (default 63). Superusers only.';
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
        -- the owner keeps all
        SELECT pg_catalog.format('GRANT ALL ON %s %s TO %I', m.kind, m.name, r.rolname)
          FROM member m JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) m.owner
    LOOP
        EXECUTE stmt;
    END LOOP;
END
$leaf_id_acl$;

SELECT pg_catalog.set_config('citus.enable_ddl_propagation',
                             pg_catalog.current_setting('leaf_id_update.ddl_propagation'), true)
 WHERE pg_catalog.current_setting('leaf_id_update.ddl_propagation', true) IS NOT NULL;
