-- leaf_id 0.3.0 -> 0.4.0 (ALTER EXTENSION leaf_id UPDATE): opaque IDs.
-- After this script the catalog equals a fresh install of 0.4.0
-- (tests/tap/056_extension_upgrade.pl compares them; on Citus,
-- tests/citus/218_citus_extension_update.pl runs it).
\echo Use "ALTER EXTENSION leaf_id UPDATE TO '0.4.0'" to load this file. \quit

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

-- a tag's opaque domain, and the fingerprint of the encoding its refills
-- reserved under: every tag of 0.3.0 issued plain IDs (0), so a domain set
-- on it later is refused rather than colliding with its plain IDs
ALTER TABLE leaf_alloc ADD COLUMN opaque_domain text, ADD COLUMN opaque_check bigint;
COMMENT ON COLUMN leaf_alloc.opaque_domain IS 'A name in leaf_opaque_domain: the tag hands out that domain''s keyed permutation of its counter instead of the counter (NULL: plain IDs). Set it before the tag''s first ID: a refill refuses a domain that differs from the one its earlier IDs were issued under (55000).';
COMMENT ON COLUMN leaf_alloc.opaque_check IS 'Written by each refill: a fingerprint of the encoding the reserved IDs are issued under (0: plain; else SipHash of a constant under the domain''s key and width, which reveals nothing of the key). NULL: no refill yet.';


DO $do$
DECLARE
    shard record;
BEGIN
    -- (two statements: a query naming pg_dist_partition fails to plan without Citus)
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        UPDATE @extschema@.leaf_alloc SET opaque_check = 0;
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p
                    WHERE p.logicalrelid OPERATOR(pg_catalog.=) (SELECT t.oid FROM pg_catalog.pg_class t
                                              JOIN pg_catalog.pg_extension e ON e.extname OPERATOR(pg_catalog.=) 'leaf_id'
                                             WHERE t.relname OPERATOR(pg_catalog.=) 'leaf_alloc' AND t.relnamespace OPERATOR(pg_catalog.=) e.extnamespace)) THEN
        UPDATE @extschema@.leaf_alloc SET opaque_check = 0;
        RETURN;
    END IF;
    -- a Citus table: its rows are in the shards (Citus hides them from
    -- pg_class unless told not to); this node's own copy only, as every
    -- node runs this script
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
        EXECUTE pg_catalog.format('ALTER TABLE %I.%I ADD COLUMN opaque_domain text, ADD COLUMN opaque_check bigint',
                                  shard.nspname, shard.relname);
        EXECUTE pg_catalog.format('UPDATE %I.%I SET opaque_check = 0', shard.nspname, shard.relname);
    END LOOP;
END
$do$;

CREATE TABLE leaf_opaque_domain (
    name    text        PRIMARY KEY
                        CONSTRAINT leaf_opaque_domain_name_length CHECK (char_length(name) BETWEEN 1 AND 128),
    bits    integer     NOT NULL
                        CONSTRAINT leaf_opaque_domain_bits_range CHECK (bits BETWEEN 16 AND 63),
    key     bytea       NOT NULL
                        CONSTRAINT leaf_opaque_domain_key_length CHECK (octet_length(key) = 16),
    created timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('leaf_opaque_domain', '');

COMMENT ON TABLE leaf_opaque_domain IS
  'leaf_id opaque IDs: one row per domain (leaf_opaque_create), a secret 128-bit key and a width. Superusers only (the key is the secret); leaf_opaque_domains shows the rest. Never edit a row: a tag refuses to go on under a changed key or width.';
COMMENT ON COLUMN leaf_opaque_domain.bits IS 'Width: the domain permutes [0, 2^bits), 16 to 63.';
COMMENT ON COLUMN leaf_opaque_domain.key IS 'The secret key (16 bytes from pg_strong_random).';

-- the Rust functions of opaque domains (as a fresh install declares them)
CREATE  FUNCTION "leaf_id_opaque_permute"(
	"bits" INT, /* i32 */
	"key" bytea, /* & [u8] */
	"value" bigint, /* i64 */
	"inverse" bool /* bool */
) RETURNS bigint /* i64 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'leaf_id_opaque_permute_wrapper';

CREATE  FUNCTION "leaf_id_random_key"() RETURNS bytea /* Vec < u8 > */
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'leaf_id_random_key_wrapper';

-- leaf_segment_status() gains opaque_bits: its view goes and comes back
DROP VIEW leaf_segment_status;
DROP FUNCTION leaf_segment_status();
CREATE  FUNCTION "leaf_segment_status"() RETURNS TABLE (
	"tag" TEXT,  /* String */
	"status" TEXT,  /* String */
	"current_buffer" INT,  /* i32 */
	"buffer0_start" bigint,  /* i64 */
	"buffer0_next" bigint,  /* i64 */
	"buffer0_end" bigint,  /* i64 */
	"buffer1_start" bigint,  /* i64 */
	"buffer1_next" bigint,  /* i64 */
	"buffer1_end" bigint,  /* i64 */
	"next_ready" bool,  /* bool */
	"refill_in_flight" bool,  /* bool */
	"dynamic_step" bigint,  /* i64 */
	"table_step" bigint,  /* i64 */
	"refills" bigint,  /* i64 */
	"waits" bigint,  /* i64 */
	"last_refill" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"opaque_bits" INT  /* Option < i32 > */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'leaf_segment_status_wrapper';
CREATE VIEW leaf_segment_status AS SELECT * FROM leaf_segment_status();
COMMENT ON FUNCTION leaf_segment_status() IS
  'Cached segment-mode tags of this database: both segments, refills, waits, dynamic step, the width of an opaque tag''s domain.';
COMMENT ON VIEW leaf_segment_status IS
  'Cached segment-mode tags of this database: both segments, refills, waits, dynamic step, the width of an opaque tag''s domain.';
REVOKE ALL ON leaf_segment_status FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION leaf_segment_status() FROM PUBLIC;
GRANT SELECT ON leaf_segment_status TO pg_monitor;
GRANT EXECUTE ON FUNCTION leaf_segment_status() TO pg_monitor;

-- Opaque IDs (docs/opaque-ids.md): domains are created and dropped by
-- superusers; encoding and decoding reveal a tag's count, so they need an
-- explicit grant; the key never leaves leaf_opaque_domain.

CREATE VIEW leaf_opaque_domains AS
SELECT d.name, d.bits, d.created,
       (SELECT pg_catalog.array_agg(a.biz_tag ORDER BY a.biz_tag)
          FROM @extschema@.leaf_alloc a
         WHERE a.opaque_domain OPERATOR(pg_catalog.=) d.name) AS tags
  FROM @extschema@.leaf_opaque_domain d;

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
    IF domain IS NULL OR width IS NULL THEN
        RAISE EXCEPTION 'the name and the width of an opaque domain must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.char_length(domain) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION 'an opaque domain name is 1 to 128 characters long; this one has %',
            pg_catalog.char_length(domain) USING ERRCODE = '22023';
    END IF;
    IF width NOT BETWEEN 16 AND 63 THEN
        RAISE EXCEPTION 'the width of an opaque domain is 16 to 63 bits; % was given', width
            USING ERRCODE = '22023', HINT = '63 (the default) covers every non-negative bigint; 53 keeps IDs exact in JavaScript numbers.';
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

-- encode and decode read the key as the extension's owner: callers need
-- EXECUTE (granted explicitly), never the key's table
CREATE FUNCTION leaf_opaque_encode(domain text, value bigint) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    width integer;
    secret bytea;
BEGIN
    IF $1 IS NULL OR $2 IS NULL THEN
        RAISE EXCEPTION 'leaf_opaque_encode: the domain and the value must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT d.bits, d.key INTO width, secret
      FROM @extschema@.leaf_opaque_domain d WHERE d.name OPERATOR(pg_catalog.=) $1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'opaque domain "%" does not exist', $1 USING ERRCODE = '42704';
    END IF;
    RETURN @extschema@.leaf_id_opaque_permute(width, secret, $2, false);
END
$fn$;

CREATE FUNCTION leaf_opaque_decode(domain text, id bigint) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    width integer;
    secret bytea;
BEGIN
    IF $1 IS NULL OR $2 IS NULL THEN
        RAISE EXCEPTION 'leaf_opaque_decode: the domain and the ID must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT d.bits, d.key INTO width, secret
      FROM @extschema@.leaf_opaque_domain d WHERE d.name OPERATOR(pg_catalog.=) $1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'opaque domain "%" does not exist', $1 USING ERRCODE = '42704';
    END IF;
    RETURN @extschema@.leaf_id_opaque_permute(width, secret, $2, true);
END
$fn$;

COMMENT ON VIEW leaf_opaque_domains IS
  'Opaque domains: name, width, creation time and the tags that use each; never the key.';
COMMENT ON FUNCTION leaf_opaque_create(text, integer) IS
  'Creates an opaque domain: a fresh 128-bit key from pg_strong_random and a width of 16 to 63 bits (default 63). Superusers only.';
COMMENT ON FUNCTION leaf_opaque_drop(text) IS
  'Drops an opaque domain that no tag uses (its key is gone for good: IDs issued through it can no longer be decoded). Superusers only.';
COMMENT ON FUNCTION leaf_opaque_encode(text, bigint) IS
  'The opaque ID of a counter value in a domain: its keyed permutation of [0, 2^bits). Needs an explicit grant.';
COMMENT ON FUNCTION leaf_opaque_decode(text, bigint) IS
  'The counter value of an opaque ID of a domain (the inverse of leaf_opaque_encode); reveals a tag''s count, so it needs an explicit grant.';
COMMENT ON FUNCTION leaf_id_random_key() IS
  'Internal to leaf_opaque_create: 16 bytes from pg_strong_random.';
COMMENT ON FUNCTION leaf_id_opaque_permute(integer, bytea, bigint, boolean) IS
  'Internal to leaf_opaque_encode and leaf_opaque_decode: the permutation (or its inverse) of a value under a width and key.';

REVOKE ALL ON leaf_opaque_domain, leaf_opaque_domains FROM PUBLIC;
GRANT SELECT ON leaf_opaque_domains TO pg_monitor;
REVOKE EXECUTE ON FUNCTION leaf_opaque_create(text, integer), leaf_opaque_drop(text),
    leaf_opaque_encode(text, bigint), leaf_opaque_decode(text, bigint),
    leaf_id_random_key(), leaf_id_opaque_permute(integer, bytea, bigint, boolean) FROM PUBLIC;

SELECT pg_catalog.set_config('citus.enable_ddl_propagation',
                             pg_catalog.current_setting('leaf_id_update.ddl_propagation'), true)
 WHERE pg_catalog.current_setting('leaf_id_update.ddl_propagation', true) IS NOT NULL;
