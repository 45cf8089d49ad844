"use strict";
Object.defineProperty(exports, "__esModule", { value: true });
exports.eoSchema = eoSchema;
exports.claimSql = claimSql;
exports.claimWaitSql = claimWaitSql;
exports.completeSql = completeSql;
exports.failSql = failSql;
exports.extendSql = extendSql;
exports.recoveryPointSql = recoveryPointSql;
exports.statusSql = statusSql;
exports.statusWaitSql = statusWaitSql;
exports.toDate = toDate;
exports.toInt = toInt;
exports.toJson = toJson;
exports.jsonParam = jsonParam;
exports.secondsParam = secondsParam;
const errors_1 = require("./errors");
/** eo's schema, quoted, with the functions this client calls verified. */
const schemaCache = new WeakMap();
/* The functions this client calls; each must be a member of extension eo. */
const FUNCTIONS = ['eo_claim', 'eo_complete', 'eo_fail', 'eo_extend', 'eo_status', 'eo_recovery_point'];
const FIND_EO = 'SELECT pg_catalog.quote_ident(n.nspname) AS schema,' +
    ' (SELECT pg_catalog.string_agg(p.oid::pg_catalog.regprocedure::pg_catalog.text, $2::pg_catalog.text)' +
    '    FROM pg_catalog.pg_proc p' +
    '   WHERE p.pronamespace OPERATOR(pg_catalog.=) n.oid' +
    '     AND p.proname OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.name[])' +
    '     AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d' +
    "       WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass" +
    '         AND d.objid OPERATOR(pg_catalog.=) p.oid' +
    "         AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass" +
    "         AND d.refobjid OPERATOR(pg_catalog.=) e.oid AND d.deptype OPERATOR(pg_catalog.=) 'e')) AS strangers" +
    ' FROM pg_catalog.pg_extension e' +
    ' JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace' +
    " WHERE e.extname OPERATOR(pg_catalog.=) 'eo'";
/**
 * eo's schema as an identifier, for this connection (cached per pg Client:
 * a PoolClient is the same object each time the pool hands it out).
 * Refuses when eo is not installed, or when eo's schema holds a function
 * under the name of one this client calls that is not eo's own (a
 * look-alike someone put beside eo's, which a call could resolve to).
 */
function eoSchema(db) {
    const owner = db;
    let p = schemaCache.get(owner);
    if (!p) {
        p = findSchema(db);
        schemaCache.set(owner, p);
        p.catch(() => schemaCache.delete(owner));
    }
    return p;
}
async function findSchema(db) {
    const r = await db.query(FIND_EO, [FUNCTIONS, ', ']);
    if (r.rows.length === 0) {
        throw new errors_1.EoSetupError('extension "eo" is not installed in this database');
    }
    const row = r.rows[0];
    if (row.strangers) {
        throw new errors_1.EoSetupError(`eo's schema ${row.schema} holds functions that are not eo's own: ${row.strangers}; ` +
            'refusing to call eo there (drop them, or move eo to a schema only its owner can create in)');
    }
    return row.schema;
}
const CLAIM_COLUMNS = 'SELECT c.status, c.result::pg_catalog.text AS result, c.attempts::pg_catalog.text AS attempts,' +
    ' c.lease_token::pg_catalog.text AS lease_token,' +
    ' (EXTRACT(EPOCH FROM c.lease_expires_at))::pg_catalog.text AS lease_expires_at,' +
    ' c.result_expired::pg_catalog.text AS result_expired, c.recovery_point,' +
    ' c.recovery_state::pg_catalog.text AS recovery_state';
/* eo_claim(key, $n fingerprint, $n+1 lease, $n+2 scope) */
const claimCall = (s, key, n) => `${s}.eo_claim(${key}, $${n}::pg_catalog.text,` +
    ` pg_catalog.make_interval(secs => $${n + 1}::pg_catalog.float8), $${n + 2}::pg_catalog.text)`;
/* The key of a call under waiting(): $2, passed through w so that the call is joined after w. */
const WAITING_KEY = 'CASE WHEN w.new IS NOT NULL THEN $2::pg_catalog.text END';
/** The claim's columns, every one as text. */
function claimSql(s) {
    return `${CLAIM_COLUMNS} FROM ${claimCall(s, '$1::pg_catalog.text', 2)} c`;
}
/** claimSql waiting at most $1 for a key in flight: key, fingerprint, lease, scope are $2..$5. */
function claimWaitSql(s) {
    return waiting(CLAIM_COLUMNS, claimCall(s, WAITING_KEY, 3), 'c');
}
function completeSql(s) {
    return (`SELECT ${s}.eo_complete($1::pg_catalog.text, $2::pg_catalog.jsonb,` +
        ' $3::pg_catalog.int8, $4::pg_catalog.text)');
}
function failSql(s) {
    return (`SELECT ${s}.eo_fail($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8,` +
        ' pg_catalog.make_interval(secs => $4::pg_catalog.float8), $5::pg_catalog.text,' +
        ' $6::pg_catalog.text, $7::pg_catalog.bool) AS outcome');
}
function extendSql(s) {
    return (`SELECT (EXTRACT(EPOCH FROM ${s}.eo_extend($1::pg_catalog.text, $2::pg_catalog.int8,` +
        ' pg_catalog.make_interval(secs => $3::pg_catalog.float8), $4::pg_catalog.text)))::pg_catalog.text AS expires');
}
function recoveryPointSql(s) {
    return (`SELECT ${s}.eo_recovery_point($1::pg_catalog.text, $2::pg_catalog.int8, $3::pg_catalog.text,` +
        ' $4::pg_catalog.jsonb, $5::pg_catalog.text)');
}
const STATUS_COLUMNS = 'SELECT t.state, t.result::pg_catalog.text AS result, t.attempts::pg_catalog.text AS attempts,' +
    ' t.lease_token::pg_catalog.text AS lease_token,' +
    ' (EXTRACT(EPOCH FROM t.lease_expires_at))::pg_catalog.text AS lease_expires_at, t.last_error,' +
    ' (EXTRACT(EPOCH FROM t.created_at))::pg_catalog.text AS created_at,' +
    ' (EXTRACT(EPOCH FROM t.updated_at))::pg_catalog.text AS updated_at';
/* eo_status(key, $n scope) */
const statusCall = (s, key, n) => `${s}.eo_status(${key}, $${n}::pg_catalog.text)`;
function statusSql(s) {
    return `${STATUS_COLUMNS} FROM ${statusCall(s, '$1::pg_catalog.text', 2)} t`;
}
/** statusSql waiting at most $1 for a claim in flight (eo_status waits for it): key and scope are $2, $3. */
function statusWaitSql(s) {
    return waiting(STATUS_COLUMNS, statusCall(s, WAITING_KEY, 3), 't');
}
/*
 * A call of eo_claim or eo_status under a lock_timeout of $1, in one
 * statement (one round trip): w sets it before the call (the key, the
 * call's first argument, passes through w, so the call is joined after
 * it), and the select list puts the old value back once the call has
 * answered, also when eo_status has no row (the LEFT JOIN gives one of
 * NULLs). An error aborts the transaction, which undoes the setting too.
 */
function waiting(columns, call, alias) {
    return (`${columns}, pg_catalog.set_config('lock_timeout', w.old, true) AS lock_timeout_restored` +
        " FROM (SELECT pg_catalog.current_setting('lock_timeout') AS old," +
        " pg_catalog.set_config('lock_timeout', $1::pg_catalog.text, true) AS new OFFSET 0) w" +
        ` LEFT JOIN LATERAL ${call} ${alias} ON true`);
}
/* Parsers of the text columns. */
function toDate(epoch) {
    return epoch === null ? null : new Date(Math.round(Number(epoch) * 1000));
}
function toInt(s) {
    if (s === null)
        return null;
    const n = Number(s);
    if (!Number.isSafeInteger(n))
        throw new errors_1.EoSetupError(`eo returned ${s}, not an integer JavaScript can hold`);
    return n;
}
function toJson(s) {
    return s === null ? null : JSON.parse(s);
}
/** A JS value as jsonb text; undefined is SQL NULL. */
function jsonParam(v) {
    if (v === undefined || v === null)
        return v === null ? 'null' : null;
    return JSON.stringify(v);
}
/** A lease or delay in milliseconds, as the seconds make_interval takes. */
function secondsParam(ms) {
    if (ms === undefined || ms === null)
        return null;
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
        throw new RangeError(`a duration in milliseconds is a finite number >= 0, not ${String(ms)}`);
    }
    return ms / 1000;
}
