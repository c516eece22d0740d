-- leaf_id privileges, checked as an unprivileged role
\set VERBOSITY terse

CREATE ROLE regress_leaf_app;
CREATE ROLE regress_leaf_monitor IN ROLE pg_monitor;
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('priv', 10);

-- the catalog: who may do what
SELECT p.oid::regprocedure AS function, has_function_privilege('regress_leaf_app', p.oid, 'EXECUTE') AS app,
       has_function_privilege('regress_leaf_monitor', p.oid, 'EXECUTE') AS monitor
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leaf_id'
ORDER BY p.oid::regprocedure::text;

SET ROLE regress_leaf_app;
-- drawing IDs is open to PUBLIC (column defaults need it)
SELECT leaf_segment_next('priv') > 0 AS segment_ok;
SELECT leaf_snowflake_next() > 0 AS snowflake_ok;
SELECT worker_id >= 0 AS decode_ok FROM leaf_snowflake_decode(leaf_snowflake_next());
-- changing state is not (42501)
SELECT regress_sqlstate('SELECT leaf_id_reset_cache()') AS reset_cache;
-- tag names, ranges and the registry are not for everyone (42501)
SELECT regress_sqlstate('SELECT * FROM leaf_segment_status') AS segment_status_view;
SELECT regress_sqlstate('SELECT * FROM leaf_segment_status()') AS segment_status_function;
SELECT regress_sqlstate('SELECT * FROM leaf_snowflake_status') AS snowflake_status_view;
SELECT regress_sqlstate('SELECT * FROM leaf_snowflake_status()') AS snowflake_status_function;
SELECT regress_sqlstate('SELECT * FROM leaf_id_worker_status') AS worker_status_view;
SELECT regress_sqlstate('SELECT * FROM leaf_id_worker_status()') AS worker_status_function;
-- the tables are the superuser's (42501)
SELECT regress_sqlstate('SELECT * FROM leaf_id_catalog.leaf_alloc') AS read_alloc;
SELECT regress_sqlstate($$UPDATE leaf_id_catalog.leaf_alloc SET max_id = 1 WHERE biz_tag = 'priv'$$) AS rewind_alloc;
SELECT regress_sqlstate($$INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('mine', 1)$$) AS add_tag;
SELECT regress_sqlstate('DELETE FROM leaf_id_catalog.leaf_worker') AS delete_worker;
SELECT regress_sqlstate($$INSERT INTO leaf_id_catalog.leaf_worker (worker_id, node_name) VALUES (1000, 'evil')$$) AS add_worker;
-- test-only and node settings are superuser settings (42501)
SELECT regress_sqlstate('SET leaf_id.test_clock_offset_ms = -100000') AS clock_offset;
SELECT regress_sqlstate('SET leaf_id.worker_id = 3') AS worker_id;
SELECT regress_sqlstate($$SET leaf_id.node_name = 'x'$$) AS node_name;
RESET ROLE;

-- pg_monitor members may look
SET ROLE regress_leaf_monitor;
SELECT count(*) >= 1 AS sees_tags FROM leaf_segment_status WHERE tag = 'priv';
SELECT state FROM leaf_snowflake_status;
SELECT mode, standby_wait, standby_wait_since, standby_lag_bytes FROM leaf_id_worker_status ORDER BY mode;
SELECT regress_sqlstate('SELECT leaf_id_reset_cache()') AS monitor_reset_cache;
RESET ROLE;

-- drawing can be restricted per function, as with sequences
REVOKE EXECUTE ON FUNCTION leaf_segment_next(text) FROM PUBLIC;
SET ROLE regress_leaf_app;
SELECT regress_sqlstate($$SELECT leaf_segment_next('priv')$$) AS revoked_segment;
RESET ROLE;
GRANT EXECUTE ON FUNCTION leaf_segment_next(text) TO regress_leaf_app;
SET ROLE regress_leaf_app;
SELECT leaf_segment_next('priv') > 0 AS granted_segment;
RESET ROLE;
GRANT EXECUTE ON FUNCTION leaf_segment_next(text) TO PUBLIC;
REVOKE EXECUTE ON FUNCTION leaf_segment_next(text) FROM regress_leaf_app;

-- an installing superuser's ALTER DEFAULT PRIVILEGES gives nothing of leaf_id
-- to anyone, and an explicit grant does not open the state-changing functions
CREATE DATABASE regress_leaf_defaults;
\c regress_leaf_defaults
ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO regress_leaf_app;
ALTER DEFAULT PRIVILEGES GRANT ALL ON FUNCTIONS TO regress_leaf_app;
CREATE EXTENSION leaf_id;
SELECT c.relname, pg_catalog.has_table_privilege('regress_leaf_app', c.oid, 'SELECT') AS app_can_read
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_depend d ON d.objid = c.oid AND d.deptype = 'e'
 WHERE d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'leaf_id')
 ORDER BY c.relname COLLATE "C";
SELECT p.oid::regprocedure AS function,
       pg_catalog.has_function_privilege('regress_leaf_app', p.oid, 'EXECUTE') AS app_can_run
  FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
 WHERE d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'leaf_id')
 ORDER BY p.oid::regprocedure::text COLLATE "C";
GRANT EXECUTE ON FUNCTION leaf_id_reset_cache(), leaf_snowflake_release_worker_id(integer) TO regress_leaf_app;
SET ROLE regress_leaf_app;
\set VERBOSITY default
SELECT leaf_id_reset_cache();
SELECT leaf_snowflake_release_worker_id(0);
\set VERBOSITY terse
RESET ROLE;
\c leaf_regress
DROP DATABASE regress_leaf_defaults;

DROP ROLE regress_leaf_app;
DROP ROLE regress_leaf_monitor;
