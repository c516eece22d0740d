-- leaf_id tables. Created before the functions (bootstrap).

-- The extension's schema keeps its name until CREATE EXTENSION ends (its
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
        RAISE EXCEPTION 'the schema of leaf_id was renamed while CREATE EXTENSION ran' USING ERRCODE = '55000';
    END IF;
END
$leaf_id_pin$;

-- The tables live in a schema of their own, which the extension owns and
-- only its owner may use: a role that may not write them cannot name them,
-- so no statement of its (PREPARE, CREATE RULE, LOCK) can take or queue a
-- lock on them before its privileges are checked, and so hold up the
-- workers' refills, claims and renewals. Callers use the functions and
-- views in @extschema@. An existing schema of this name is an error (42P06),
-- never adopted.
-- (What the installing role's default privileges would give on it is taken
-- back by the privileges block at the end of the script.)
CREATE SCHEMA leaf_id_catalog;
COMMENT ON SCHEMA leaf_id_catalog IS
  'leaf_id''s tables (leaf_alloc, leaf_worker, leaf_opaque_domain, leaf_alloc_encoding, leaf_alloc_tuning): the extension owner''s; grant USAGE and table privileges to tag admins only (docs/privileges.md).';

CREATE TABLE leaf_id_catalog.leaf_alloc (
    biz_tag     text        PRIMARY KEY
                            CONSTRAINT leaf_alloc_biz_tag_length CHECK (char_length(biz_tag) BETWEEN 1 AND 128),
    max_id      bigint      NOT NULL DEFAULT 1
                            CONSTRAINT leaf_alloc_max_id_not_negative CHECK (max_id >= 0),
    step        integer     NOT NULL
                            CONSTRAINT leaf_alloc_step_positive CHECK (step >= 1),
    description text,
    update_time timestamptz NOT NULL DEFAULT now(),
    opaque_domain text,
    opaque_check  bigint,
    opaque_grant  bigint,
    max_value   bigint,
    draw_role   pg_catalog.name
);
SELECT pg_catalog.pg_extension_config_dump('leaf_id_catalog.leaf_alloc', '');

COMMENT ON TABLE leaf_id_catalog.leaf_alloc IS
  'leaf_id segment mode: one row per tag. max_id is the first ID not yet reserved; a refill reserves [max_id, max_id + n) and advances max_id.';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc.biz_tag IS 'Tag name passed to leaf_segment_next(), 1 to 128 characters.';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc.max_id IS 'First ID not yet reserved by any segment.';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc.step IS 'Minimum segment size; the dynamic step grows from it (changes apply at the next refill).';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc.update_time IS 'Time of the last refill.';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc.opaque_domain IS 'A name in leaf_opaque_domain: the tag hands out that domain''s keyed permutation of its counter instead of the counter (NULL: plain IDs). Set it before the tag''s first ID: a refill refuses a domain that differs from the one its earlier IDs were issued under (55000).';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc.opaque_grant IS 'With opaque_domain: leaf_opaque_grant(opaque_domain, biz_tag, max_id), which only a superuser or a role that may run leaf_opaque_decode can compute; each refill writes the one of its new max_id. A refill of an opaque tag whose grant does not match is refused (42501).';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc.max_value IS 'The largest value the tag may issue (an opaque tag: the largest counter value); a refill that would pass it is refused (2200H). NULL: no bound but the bigint''s (or the opaque domain''s). leaf_segment_adopt_sequence sets it to the largest value the adopted column''s type and its sequence''s MAXVALUE allow. Changes apply at the next refill; what is reserved already is handed out.';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc.draw_role IS 'A role name: only superusers and roles with the privileges of this role (members that inherit them) may draw the tag''s IDs, others get 42501. NULL: every role that may run leaf_segment_next. A name no role has leaves the tag to superusers. Changes apply at the tag''s next refill (SELECT leaf_id_reset_cache() applies them at once).';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc.opaque_check IS 'Written by each refill: a fingerprint of the encoding the reserved IDs are issued under (0: plain; else SipHash of a constant under the domain''s key and width, which reveals nothing of the key). NULL: no refill yet.';

CREATE TABLE leaf_id_catalog.leaf_opaque_domain (
    name    text        PRIMARY KEY
                        CONSTRAINT leaf_opaque_domain_name_length CHECK (char_length(name) BETWEEN 1 AND 128),
    bits    integer     NOT NULL
                        CONSTRAINT leaf_opaque_domain_bits_range CHECK (bits BETWEEN 16 AND 63),
    key     bytea       NOT NULL
                        CONSTRAINT leaf_opaque_domain_key_length CHECK (octet_length(key) = 16),
    created timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('leaf_id_catalog.leaf_opaque_domain', '');

COMMENT ON TABLE leaf_id_catalog.leaf_opaque_domain IS
  'leaf_id opaque IDs: one row per domain (leaf_opaque_create), a secret 128-bit key and a width. Superusers only (the key is the secret); leaf_opaque_domains shows the rest. Never edit a row: a tag refuses to go on under a changed key or width.';
COMMENT ON COLUMN leaf_id_catalog.leaf_opaque_domain.bits IS 'Width: the domain permutes [0, 2^bits), 16 to 63.';
COMMENT ON COLUMN leaf_id_catalog.leaf_opaque_domain.key IS 'The secret key (16 bytes from pg_strong_random).';

CREATE TABLE leaf_id_catalog.leaf_worker (
    worker_id      integer     PRIMARY KEY
                               CONSTRAINT leaf_worker_id_range CHECK (worker_id BETWEEN 0 AND 1023),
    node_name      text        NOT NULL UNIQUE,
    last_timestamp bigint,
    epoch_ms       bigint,
    heartbeat_at   timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    owner_token    bigint,
    copies         bigint[],
    holder_copy    bigint
);
SELECT pg_catalog.pg_extension_config_dump('leaf_id_catalog.leaf_worker', '');

COMMENT ON TABLE leaf_id_catalog.leaf_worker IS
  'leaf_id snowflake mode: registry of worker ids (0..1023), one per node. Share it between nodes for ids unique across them.';
COMMENT ON COLUMN leaf_id_catalog.leaf_worker.node_name IS 'Node identity: leaf_id.node_name, or system identifier:port; released:<id> marks an id given up (its mark is kept for the next owner).';
COMMENT ON COLUMN leaf_id_catalog.leaf_worker.last_timestamp IS 'Persisted high-water mark (Unix ms): no ID of this worker id has a later millisecond.';
COMMENT ON COLUMN leaf_id_catalog.leaf_worker.epoch_ms IS 'leaf_id.epoch_ms in force when last_timestamp was written (a changed epoch moves the mark).';
COMMENT ON COLUMN leaf_id_catalog.leaf_worker.heartbeat_at IS 'Time of the last renewal of last_timestamp.';
COMMENT ON COLUMN leaf_id_catalog.leaf_worker.copies IS 'On Citus: the group ids of the nodes with the copies of leaf_worker that the holder''s renewals count a majority of, set by its claim and moved by the holder when the nodes change; a release or take-over must reach all but the holder''s own. NULL: not on Citus.';
COMMENT ON COLUMN leaf_id_catalog.leaf_worker.holder_copy IS 'On Citus: the group id of the holder''s node (NULL: it had no copy of leaf_worker).';
COMMENT ON COLUMN leaf_id_catalog.leaf_worker.owner_token IS 'Random token of the server lifetime that holds the id (NULL: closed cleanly or released); tells apart servers with one node name, such as a physical copy.';

CREATE TABLE leaf_id_catalog.leaf_alloc_encoding (
    biz_tag      text        PRIMARY KEY,
    opaque_check bigint      NOT NULL,
    reserved_end bigint      NOT NULL DEFAULT 0,
    first_refill timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('leaf_id_catalog.leaf_alloc_encoding', '');

COMMENT ON TABLE leaf_id_catalog.leaf_alloc_encoding IS
  'leaf_id segment mode: the encoding each tag issued its IDs under (written by its first refill) and the end of all that was reserved for it, kept when its leaf_alloc row is deleted: a tag inserted again under another encoding (plain or another opaque domain) is refused (55000), since its IDs could equal those issued before, and no refill starts below the end. Superusers only; delete a row only for a tag whose IDs are all gone.';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc_encoding.opaque_check IS 'The fingerprint of the encoding, as leaf_alloc.opaque_check (0: plain).';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc_encoding.reserved_end IS 'The end of everything a refill reserved for the tag (its max_id after the refill): the next refill starts at or above it, whatever leaf_alloc.max_id says, so a max_id moved back (or an old row put back with its grant), or a row deleted and inserted again lower, repeats no ID, also after a restart.';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc_encoding.first_refill IS 'Time of the first refill recorded here.';

CREATE TABLE leaf_id_catalog.leaf_alloc_tuning (
    biz_tag     text        PRIMARY KEY,
    tuned_step  integer     NOT NULL
                            CONSTRAINT leaf_alloc_tuning_step_positive CHECK (tuned_step >= 1),
    update_time timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('leaf_id_catalog.leaf_alloc_tuning', '');

COMMENT ON TABLE leaf_id_catalog.leaf_alloc_tuning IS
  'leaf_id segment mode: the dynamic step each tag last used on this server, written by the worker when it changes; the first refill after a restart starts from it (bounded by leaf_id.max_step, never below leaf_alloc.step). Delete a row to start that tag from its step again.';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc_tuning.tuned_step IS 'Dynamic step of the tag''s last refill.';
COMMENT ON COLUMN leaf_id_catalog.leaf_alloc_tuning.update_time IS 'Time the step last changed.';
