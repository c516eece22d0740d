-- leaf_id 0.1.0 -> 0.2.0 (ALTER EXTENSION leaf_id UPDATE).
-- After this script the catalog equals a fresh install of 0.2.0
-- (tests/tap/056_extension_upgrade.pl compares both).
\echo Use "ALTER EXTENSION leaf_id UPDATE TO '0.2.0'" to load this file. \quit

-- Snowflake mode: the owner token of the server lifetime holding a worker id.
ALTER TABLE leaf_worker ADD COLUMN owner_token bigint;
COMMENT ON COLUMN leaf_worker.owner_token IS 'Random token of the server lifetime that holds the id (NULL: closed cleanly or released); tells apart servers with one node name, such as a physical copy.';

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
