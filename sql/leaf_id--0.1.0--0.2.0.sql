-- leaf_id 0.1.0 -> 0.2.0 (ALTER EXTENSION leaf_id UPDATE).
-- After this script the catalog equals a fresh install of 0.2.0
-- (tests/tap/056_extension_upgrade.pl compares both).
\echo Use "ALTER EXTENSION leaf_id UPDATE TO '0.2.0'" to load this file. \quit
