-- eo_http_answer and eo_http_error_status: what an HTTP API answers for
-- each outcome of eo_claim, as the IETF Idempotency-Key draft
-- asks: a replay as the first answer, 409 in flight, 422 for a key reused
-- with another request, 400 for a missing key; 410 for a dead key.

-- claimed: no answer yet, the handler does the work and stores its answer
BEGIN;
SELECT c.status, a.* FROM eo_claim('http:1') c,
       eo_http_answer(c.status, c.result, c.lease_expires_at) a;
SELECT eo_complete('http:1', '{"http_status": 201, "body": {"id": 42}}');
COMMIT;

-- a replay answers with the status stored in the result ...
SELECT c.status, c.result -> 'body' AS body, a.*
FROM eo_claim('http:1') c, eo_http_answer(c.status, c.result, c.lease_expires_at) a;
-- ... or 200 when it stores none, or none that is a status
SELECT s, eo_http_answer('duplicate', r) FROM (VALUES
    ('no result', NULL::jsonb), ('no status', '{"body": 1}'), ('a string', '{"http_status": "201"}'),
    ('out of range', '{"http_status": 99}'), ('huge', '{"http_status": 1e30}'),
    ('an array', '[1, 2]'), ('202', '{"http_status": 202}')) v(s, r);

-- busy: 409, and Retry-After in whole seconds, at least 1
SELECT status FROM eo_claim('http:lease', lease => '1 min');
SELECT c.status, a.http_status, a.retry_after BETWEEN 58 AND 61 AS about_a_minute
FROM eo_claim('http:lease', lease => '1 min') c,
     eo_http_answer(c.status, c.result, c.lease_expires_at) a;
SELECT * FROM eo_http_answer('busy', NULL, now() - interval '1 s');
SELECT * FROM eo_http_answer('busy');

-- dead: 410
SET eo.max_attempts = 1;
SELECT eo_fail('http:dead', 'boom');
SELECT c.status, a.* FROM eo_claim('http:dead') c, eo_http_answer(c.status, c.result, c.lease_expires_at) a;
RESET eo.max_attempts;

-- anything else is a mistake of the caller
SELECT eo_http_answer('done');
SELECT eo_http_answer(NULL);

-- errors about the key, by SQLSTATE; NULL for the rest
SELECT s, eo_http_error_status(s) FROM unnest(ARRAY['22004', '22023', '54000', '22000',
    '40001', '40P01', '55P03', '57014', '42501', '55006', 'XX000', NULL]) s;
