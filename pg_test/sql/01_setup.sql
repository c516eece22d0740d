-- leaf_id: extension objects, comments and settings
CREATE EXTENSION leaf_id;

SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args,
       p.proretset, p.prorettype::regtype AS result, p.provolatile, p.proparallel, p.proisstrict,
       obj_description(p.oid, 'pg_proc') IS NOT NULL AS has_comment
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leaf_id'
ORDER BY 1, 2;

SELECT c.relname, c.relkind, obj_description(c.oid, 'pg_class') IS NOT NULL AS has_comment
FROM pg_class c JOIN pg_depend d ON d.objid = c.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leaf_id'
ORDER BY 1;

-- tables are dumped with their rows
SELECT unnest(extconfig)::regclass FROM pg_extension WHERE extname = 'leaf_id' ORDER BY 1;

-- every setting is visible with a description
SELECT name, setting, unit, context, short_desc <> '' AS described
FROM pg_settings WHERE name LIKE 'leaf_id.%' ORDER BY name;

-- leaf_id.synchronized_standby_slots takes slot names, or '*' alone
ALTER SYSTEM SET leaf_id.synchronized_standby_slots = 's1, Bad-Name';
ALTER SYSTEM SET leaf_id.synchronized_standby_slots = 's1, *';
ALTER SYSTEM SET leaf_id.synchronized_standby_slots = 's1,,s2';

-- the later files show SQLSTATEs with this helper
CREATE FUNCTION regress_sqlstate(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;
END $$;
