--
-- comments: what \df+, \dv+, \dT+, \dn+ and \dd show.  Every member of
-- the extension (pg_depend deptype 'e') that users call or read has a
-- one-line COMMENT: the functions and views of the extension's schema and
-- of eo_metrics, eo_claim_result and schema eo_metrics.  Objects in schema
-- eo_internal (eo's own tables and the functions eo itself calls) are
-- skipped on purpose, and so are array types and the row types of views
-- (members on PostgreSQL 17 and later only).  The view lists every other
-- member whose comment is missing or more than one line: it must list
-- none, and a failure names them (add the COMMENT to the update script's
-- comments section).
--
CREATE TEMP VIEW eo_uncommented AS
SELECT i.type, i.identity,
       CASE WHEN c.description IS NULL THEN 'no comment'
            ELSE 'more than one line' END AS problem
FROM pg_depend d
CROSS JOIN LATERAL pg_identify_object(d.classid, d.objid, d.objsubid) i
LEFT JOIN pg_description c
       ON c.classoid = d.classid AND c.objoid = d.objid AND c.objsubid = 0
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'eo')
  AND d.deptype = 'e'
  AND i.schema IS DISTINCT FROM 'eo_internal'
  -- array types and the row types of views and tables, which PostgreSQL
  -- 17 and later make members too (\dv+ shows the view's comment)
  AND NOT EXISTS (SELECT FROM pg_type t LEFT JOIN pg_class r ON r.oid = t.typrelid
                  WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                    AND (t.typcategory = 'A' OR r.relkind IN ('v', 'r', 'm', 'p')))
  AND (c.description IS NULL OR c.description ~ '[\n\r]');

SELECT * FROM eo_uncommented ORDER BY 1, 2;

-- The view does catch them: a function and a view without a comment, a
-- comment of two lines.
BEGIN;
COMMENT ON FUNCTION eo_relay_wait(text, interval) IS NULL;
COMMENT ON VIEW eo_metrics.keys IS NULL;
COMMENT ON FUNCTION eo_metrics.keys() IS E'two\nlines';
SELECT * FROM eo_uncommented ORDER BY 1, 2;
ROLLBACK;

-- The extension's own comment (\dx) names the outbox too; a fresh install
-- and an update from 0.2.0 give the same one.
SELECT obj_description(oid, 'pg_extension') AS comment
FROM pg_extension WHERE extname = 'eo';
