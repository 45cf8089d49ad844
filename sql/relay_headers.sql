--
-- relay_headers: eo_relay_header_lines(headers), the lines eo_nats
-- forward carries as NATS headers, against the SQL form it used before
-- 0.4.0 (a subquery per event; here sorted by "C", as the function sorts
-- by the keys' bytes): the same for every kind of key and value.
--
CREATE TEMP TABLE hdr (n int, headers jsonb);
INSERT INTO hdr VALUES
 (1, '{"trace": "abc", "x-user": "u1"}'),
 (2, '{"Nats-Msg-Id": "x", "nats-expected": "y", "X-NATS-foo": "z", "eo-created": "w", "Eo-Headers": "v", "ok-eo-": "keep", "neo-x": "keep"}'),
 (3, '{"a b": 1, "a:b": 2, "tab\tkey": 3, "ü": 4, "": 5, "~!": 6, "new\nline": 7}'),
 (4, '{"n": 1.50, "t": true, "f": false, "z": null, "o": {"x": [1, "two"]}, "arr": [1, 2], "e": 1e3}'),
 (5, '{"crlf": "line1\nline2", "cr": "a\rb", "tab": "a\tb", "quote": "say \"hi\"", "uni": "caf\u00e9", "ctl": "\u0001", "empty": ""}'),
 (6, '{}'),
 (7, '[1, 2]'),
 (8, '"str"'),
 (9, 'null'),
 (10, '{"B": 1, "a": 2, "A": 3, "b": 4, "aa": 5, "a-": 6}'),
 (11, '{"only:bad": 1, "Nats-x": 2}');
SELECT n,
       eo_relay_header_lines(headers) IS NOT DISTINCT FROM
       CASE WHEN jsonb_typeof(headers) = 'object' THEN
         (SELECT string_agg(h.key || E'\t' || CASE WHEN jsonb_typeof(h.value) = 'string'
                   AND h.value #>> '{}' !~ E'[\r\n]' THEN h.value #>> '{}' ELSE h.value::text END,
                 E'\n' ORDER BY h.key COLLATE "C")
          FROM jsonb_each(headers) h
          WHERE h.key ~ '^[!-9;-~]+$' AND h.key !~* '(nats-|^eo-)') END AS same_as_sql
FROM hdr ORDER BY n;
SELECT n, replace(replace(eo_relay_header_lines(headers), E'\t', ' => '), E'\n', ' | ') AS lines
FROM hdr ORDER BY n;
SELECT eo_relay_header_lines(NULL) IS NULL AS strict,
       has_function_privilege('public', 'eo_relay_header_lines(jsonb)', 'EXECUTE') AS public_may;
