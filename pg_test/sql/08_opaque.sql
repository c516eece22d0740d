-- opaque IDs: domains, the permutation, opaque tags, errors and privileges
\set VERBOSITY terse

-- domains: a width (default 63) and a secret key, never shown
SELECT leaf_opaque_create('regress_63');
SELECT leaf_opaque_create('regress_53', bits => 53);
-- (a 16-bit domain as 0.4.0 made them: leaf_opaque_create makes 20 bits and up)
INSERT INTO leaf_id_catalog.leaf_opaque_domain (name, bits, key) VALUES ('regress_16', 16, leaf_id_random_key());
SELECT name, bits, created <= now() AS created, tags FROM leaf_opaque_domains ORDER BY name;
SELECT bits, octet_length(key) AS key_bytes FROM leaf_id_catalog.leaf_opaque_domain ORDER BY name;
SELECT count(DISTINCT key) AS distinct_keys FROM leaf_id_catalog.leaf_opaque_domain;
SELECT attname FROM pg_attribute
 WHERE attrelid = 'leaf_opaque_domains'::regclass AND attnum > 0 ORDER BY attnum;

-- bad input
SELECT regress_sqlstate($$SELECT leaf_opaque_create('regress_63')$$) AS duplicate;
SELECT regress_sqlstate($$SELECT leaf_opaque_create('w15', 15)$$) AS width_15;
SELECT regress_sqlstate($$SELECT leaf_opaque_create('w16', 16)$$) AS width_16;
SELECT regress_sqlstate($$SELECT leaf_opaque_create('w19', 19)$$) AS width_19;
SELECT leaf_opaque_create('w20', 20), leaf_opaque_drop('w20');
SELECT regress_sqlstate($$SELECT leaf_opaque_create('w64', 64)$$) AS width_64;
SELECT regress_sqlstate($$SELECT leaf_opaque_create(NULL)$$) AS null_name;
SELECT regress_sqlstate($$SELECT leaf_opaque_create('w', NULL)$$) AS null_width;
SELECT regress_sqlstate($$SELECT leaf_opaque_create('')$$) AS empty_name;
SELECT regress_sqlstate($$SELECT leaf_opaque_encode('no such domain', 1)$$) AS unknown_encode;
SELECT regress_sqlstate($$SELECT leaf_opaque_decode('no such domain', 1)$$) AS unknown_decode;
SELECT regress_sqlstate($$SELECT leaf_opaque_encode('regress_53', -1)$$) AS below_range;
SELECT regress_sqlstate($$SELECT leaf_opaque_encode('regress_53', 9007199254740992)$$) AS above_range;
SELECT regress_sqlstate($$SELECT leaf_opaque_decode('regress_16', 65536)$$) AS decode_above_range;
SELECT regress_sqlstate($$SELECT leaf_opaque_encode(NULL, 1)$$) AS null_domain;
SELECT regress_sqlstate($$SELECT leaf_opaque_decode('regress_53', NULL)$$) AS null_id;
SELECT leaf_opaque_encode('regress_63', 9223372036854775807) >= 0 AS largest_bigint_encodes;

-- a permutation: every value of the 16-bit domain once, and back
SELECT count(DISTINCT e) AS distinct_ids, min(e) AS lowest, max(e) AS highest,
       bool_and(leaf_opaque_decode('regress_16', e) = v) AS decodes
FROM (SELECT v, leaf_opaque_encode('regress_16', v) AS e FROM generate_series(0, 65535) v) s;

-- an opaque tag: IDs unique, in range, not increasing, decoding to the counter
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('regress_opaque', 100, 'regress_53', leaf_opaque_grant('regress_53', 'regress_opaque', 1));
CREATE TEMP TABLE opaque_ids AS
  SELECT ord, id FROM leaf_segment_next('regress_opaque', 5000) WITH ORDINALITY AS t(id, ord);
INSERT INTO opaque_ids SELECT 5000 + g, leaf_segment_next('regress_opaque') FROM generate_series(1, 1000) g;
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids,
       bool_and(id BETWEEN 0 AND 9007199254740991) AS in_53_bits,
       count(*) FILTER (WHERE id > prev) BETWEEN 2000 AND 4000 AS about_half_increase
FROM (SELECT id, lag(id) OVER (ORDER BY ord) AS prev FROM opaque_ids) s;
SELECT count(DISTINCT leaf_opaque_decode('regress_53', id)) AS distinct_counters,
       min(leaf_opaque_decode('regress_53', id)) AS first_counter
FROM opaque_ids;
SELECT tag, opaque_bits FROM leaf_segment_status WHERE tag = 'regress_opaque';
SELECT opaque_check <> 0 AS check_recorded FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = 'regress_opaque';
SELECT tags FROM leaf_opaque_domains WHERE name = 'regress_53';

-- the domain of a tag with issued IDs cannot change: refused at the next refill (55000)
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('regress_plain', 10);
SELECT leaf_segment_next('regress_plain') AS first_plain;
SELECT tag, opaque_bits FROM leaf_segment_status WHERE tag = 'regress_plain';
UPDATE leaf_id_catalog.leaf_alloc SET opaque_domain = 'regress_53' WHERE biz_tag = 'regress_plain';
SELECT regress_sqlstate($$SELECT count(leaf_segment_next('regress_plain')) FROM generate_series(1, 100)$$)
  AS plain_made_opaque;
UPDATE leaf_id_catalog.leaf_alloc SET opaque_domain = NULL WHERE biz_tag = 'regress_plain';
SELECT count(DISTINCT leaf_segment_next('regress_plain')) AS plain_again FROM generate_series(1, 100);
-- nor can a domain's key: a tag's next refill refuses it (55000)
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('regress_rekeyed', 10, 'regress_63', leaf_opaque_grant('regress_63', 'regress_rekeyed', 1));
SELECT leaf_segment_next('regress_rekeyed') >= 0 AS first_opaque;
CREATE TEMP TABLE saved_key AS SELECT key FROM leaf_id_catalog.leaf_opaque_domain WHERE name = 'regress_63';
UPDATE leaf_id_catalog.leaf_opaque_domain SET key = leaf_id_random_key() WHERE name = 'regress_63';
SELECT regress_sqlstate($$SELECT count(leaf_segment_next('regress_rekeyed')) FROM generate_series(1, 100)$$)
  AS rekeyed;
UPDATE leaf_id_catalog.leaf_opaque_domain SET key = (SELECT key FROM saved_key) WHERE name = 'regress_63';
SELECT count(DISTINCT leaf_segment_next('regress_rekeyed')) AS key_back FROM generate_series(1, 100);
-- a tag whose domain is gone issues nothing (55000), and a used domain cannot be dropped (2BP01)
SELECT leaf_opaque_create('regress_gone', 20);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant) VALUES ('regress_orphan', 10, 'regress_gone', leaf_opaque_grant('regress_gone', 'regress_orphan', 1));
DELETE FROM leaf_id_catalog.leaf_opaque_domain WHERE name = 'regress_gone';
SELECT regress_sqlstate($$SELECT leaf_segment_next('regress_orphan')$$) AS domain_gone;
SELECT regress_sqlstate($$SELECT leaf_opaque_drop('regress_53')$$) AS drop_used;
SELECT leaf_opaque_drop('regress_16');
SELECT regress_sqlstate($$SELECT leaf_opaque_drop('regress_16')$$) AS drop_unknown;
-- a counter beyond the domain: 2200H
INSERT INTO leaf_id_catalog.leaf_opaque_domain (name, bits, key) VALUES ('regress_small', 16, leaf_id_random_key());
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id, opaque_domain, opaque_grant) VALUES ('regress_full', 10, 65530, 'regress_small', leaf_opaque_grant('regress_small', 'regress_full', 65530));
SELECT regress_sqlstate($$SELECT count(leaf_segment_next('regress_full')) FROM generate_series(1, 7)$$) AS past_the_end;
-- an opaque tag's segment is at most 1/64 of its domain (a restart throws up
-- to two away): a step of 100000 in a 20-bit domain reserves 16384
SELECT leaf_opaque_create('regress_20', 20);
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, opaque_domain, opaque_grant)
VALUES ('regress_capped', 100000, 'regress_20', leaf_opaque_grant('regress_20', 'regress_capped', 1));
SELECT leaf_segment_next('regress_capped') >= 0 AS drawn;
SELECT greatest(buffer0_end - buffer0_start, buffer1_end - buffer1_start) AS longest_segment
  FROM leaf_segment_status WHERE tag = 'regress_capped';

-- known answers through SQL (src/segment/opaque.rs has them for five widths):
-- key 00 01 .. 0f, 53 bits
INSERT INTO leaf_id_catalog.leaf_opaque_domain (name, bits, key) VALUES ('regress_kat', 53, '\x000102030405060708090a0b0c0d0e0f');
SELECT leaf_opaque_encode('regress_kat', 1000) AS kat_encode,
       leaf_opaque_decode('regress_kat', 8985185304152460) AS kat_decode;

-- a snowflake ID through a 63-bit domain: unique, unordered, and back (docs/opaque-ids.md)
SELECT leaf_opaque_create('regress_sf', 63);
CREATE TEMP TABLE sf_ids AS
  SELECT ord, id, leaf_opaque_encode('regress_sf', id) AS public_id
  FROM leaf_snowflake_next(1000) WITH ORDINALITY AS t(id, ord);
SELECT count(DISTINCT public_id) AS distinct_public_ids,
       bool_and(leaf_opaque_decode('regress_sf', public_id) = id) AS decodes,
       count(*) FILTER (WHERE public_id = id) AS unchanged,
       count(*) FILTER (WHERE public_id > prev) BETWEEN 350 AND 650 AS order_lost
FROM (SELECT id, public_id, lag(public_id) OVER (ORDER BY ord) AS prev FROM sf_ids) s;

-- privileges: drawing is as for any tag; the rest is not PUBLIC's (42501)
CREATE ROLE regress_opaque_app;
SET ROLE regress_opaque_app;
SELECT leaf_segment_next('regress_opaque') >= 0 AS app_draws;
SELECT regress_sqlstate($$SELECT leaf_opaque_create('mine')$$) AS app_create;
SELECT regress_sqlstate($$SELECT leaf_opaque_drop('regress_53')$$) AS app_drop;
SELECT regress_sqlstate($$SELECT leaf_opaque_encode('regress_53', 1)$$) AS app_encode;
SELECT regress_sqlstate($$SELECT leaf_opaque_decode('regress_53', 1)$$) AS app_decode;
SELECT regress_sqlstate($$SELECT * FROM leaf_opaque_domains$$) AS app_domains;
SELECT regress_sqlstate($$SELECT key FROM leaf_id_catalog.leaf_opaque_domain$$) AS app_keys;
SELECT regress_sqlstate($$SELECT leaf_id_random_key()$$) AS app_random_key;
SELECT regress_sqlstate($$SELECT leaf_id_opaque_permute(16, '\x00000000000000000000000000000000', 1, true)$$) AS app_permute;
RESET ROLE;
-- an explicit grant opens decoding, not the key
SELECT id AS first_opaque_id FROM opaque_ids WHERE ord = 1 \gset
GRANT EXECUTE ON FUNCTION leaf_opaque_decode(text, bigint) TO regress_opaque_app;
SET ROLE regress_opaque_app;
SELECT leaf_opaque_decode('regress_53', :first_opaque_id) AS granted_decode;
SELECT regress_sqlstate($$SELECT key FROM leaf_id_catalog.leaf_opaque_domain$$) AS still_no_keys;
RESET ROLE;
REVOKE EXECUTE ON FUNCTION leaf_opaque_decode(text, bigint) FROM regress_opaque_app;
DROP ROLE regress_opaque_app;
