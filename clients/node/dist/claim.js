"use strict";
var __createBinding = (this && this.__createBinding) || (Object.create ? (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    var desc = Object.getOwnPropertyDescriptor(m, k);
    if (!desc || ("get" in desc ? !m.__esModule : desc.writable || desc.configurable)) {
      desc = { enumerable: true, get: function() { return m[k]; } };
    }
    Object.defineProperty(o, k2, desc);
}) : (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    o[k2] = m[k];
}));
var __setModuleDefault = (this && this.__setModuleDefault) || (Object.create ? (function(o, v) {
    Object.defineProperty(o, "default", { enumerable: true, value: v });
}) : function(o, v) {
    o["default"] = v;
});
var __importStar = (this && this.__importStar) || (function () {
    var ownKeys = function(o) {
        ownKeys = Object.getOwnPropertyNames || function (o) {
            var ar = [];
            for (var k in o) if (Object.prototype.hasOwnProperty.call(o, k)) ar[ar.length] = k;
            return ar;
        };
        return ownKeys(o);
    };
    return function (mod) {
        if (mod && mod.__esModule) return mod;
        var result = {};
        if (mod != null) for (var k = ownKeys(mod), i = 0; i < k.length; i++) if (k[i] !== "default") __createBinding(result, mod, k[i]);
        __setModuleDefault(result, mod);
        return result;
    };
})();
Object.defineProperty(exports, "__esModule", { value: true });
exports.Claim = void 0;
exports.claim = claim;
exports.complete = complete;
exports.fail = fail;
exports.extend = extend;
exports.status = status;
const errors_1 = require("./errors");
const q = __importStar(require("./sql"));
/** The outcome of eo_claim, with the calls its holder may make next. */
class Claim {
    key;
    scope;
    status;
    /** The stored result (duplicate only). */
    result;
    attempts;
    /** The fencing token (claimed in lease mode only). */
    token;
    /** The lease's end (claimed in lease mode), or when to retry (busy). */
    leaseExpiresAt;
    /** Only a tombstone answered: duplicate or dead with no result kept. */
    resultExpired;
    /** The progress an earlier holder recorded (claimed only), to resume from. */
    recovery;
    db;
    constructor(db, key, scope, row) {
        this.db = db;
        this.key = key;
        this.scope = scope;
        this.status = row.status;
        this.result = q.toJson(row.result);
        this.attempts = q.toInt(row.attempts);
        this.token = q.toInt(row.lease_token);
        this.leaseExpiresAt = q.toDate(row.lease_expires_at);
        this.resultExpired = row.result_expired === 'true';
        this.recovery = row.recovery_point === null ? null : { point: row.recovery_point, state: q.toJson(row.recovery_state) };
    }
    get claimed() {
        return this.status === 'claimed';
    }
    /**
     * eo_complete: the key is done with `result` (any JSON value, up to 1 MB),
     * replayed to later claims. Transaction mode: in the claiming transaction,
     * done at its COMMIT. Lease mode: fenced by the token (StaleTokenError).
     * `db`: another connection to use (lease mode: the transaction that records the effect).
     */
    async complete(result, db = this.db) {
        await complete(db, this.key, result, { token: this.token, scope: this.scope });
    }
    /** eo_fail: a failed attempt (retry, dead) or a final failure (rejected). */
    async fail(error, opts = {}, db = this.db) {
        return fail(db, this.key, error, { ...opts, token: this.token, scope: this.scope });
    }
    /** eo_extend (lease mode): renews the lease; returns its new end. */
    async extend(leaseMs, db = this.db) {
        return extend(db, this.key, this.needToken('extend'), leaseMs, this.scope);
    }
    /**
     * eo_recovery_point (lease mode): records how far the work got, in the
     * transaction of `db` (commit it before the next outside call).
     */
    async recoveryPoint(point, state, db = this.db) {
        const s = await q.eoSchema(db);
        const token = this.needToken('recoveryPoint');
        try {
            await db.query(q.recoveryPointSql(s), [this.key, token, point, q.jsonParam(state), this.scope]);
        }
        catch (e) {
            throw (0, errors_1.translate)(e, this.key, 'complete');
        }
    }
    needToken(what) {
        if (this.token === null)
            throw new errors_1.EoError(`${what} needs a lease: claim with leaseMs`, null, this.key);
        return this.token;
    }
}
exports.Claim = Claim;
/**
 * eo_claim. Transaction mode (no leaseMs): `db` must be a client inside
 * BEGIN; the claim, the work and eo_complete commit together. Lease mode:
 * call it outside a transaction (autocommit), so the lease is durable
 * before the outside call.
 */
async function claim(db, key, opts = {}) {
    const leaseMs = opts.leaseMs ?? null;
    const txStatus = db.getTransactionStatus?.call(db);
    if (leaseMs === null && txStatus === 'I') {
        // node-postgres knows the session is not in a transaction block: a
        // transaction-mode claim would commit at once, done with no work.
        throw new errors_1.EoError('a transaction-mode claim needs a transaction: run BEGIN on this client first (or pass leaseMs)', null, key);
    }
    if (leaseMs !== null && txStatus === 'T') {
        throw new errors_1.EoError('a lease-mode claim must commit before the outside call: claim outside a transaction', null, key);
    }
    const s = await q.eoSchema(db);
    const scope = opts.scope ?? null;
    const params = [key, opts.fingerprint ?? null, q.secondsParam(leaseMs), scope];
    const wait = leaseMs === null ? waitParam(opts.waitMs) : null;
    let row;
    try {
        const r = wait === null ? await db.query(q.claimSql(s), params) : await db.query(q.claimWaitSql(s), [wait, ...params]);
        row = r.rows[0];
    }
    catch (e) {
        throw (0, errors_1.translate)(e, key, 'claim');
    }
    return new Claim(db, key, scope, row);
}
async function complete(db, key, result, opts = {}) {
    const s = await q.eoSchema(db);
    try {
        await db.query(q.completeSql(s), [key, q.jsonParam(result), opts.token ?? null, opts.scope ?? null]);
    }
    catch (e) {
        throw (0, errors_1.translate)(e, key, 'complete');
    }
}
async function fail(db, key, error, opts = {}) {
    const s = await q.eoSchema(db);
    try {
        const r = await db.query(q.failSql(s), [
            key,
            error ?? null,
            opts.token ?? null,
            q.secondsParam(opts.retryAfterMs),
            opts.scope ?? null,
            opts.sqlstate ?? null,
            opts.final ?? null,
        ]);
        return r.rows[0].outcome;
    }
    catch (e) {
        throw (0, errors_1.translate)(e, key, 'other');
    }
}
async function extend(db, key, token, leaseMs, scope = null) {
    const s = await q.eoSchema(db);
    try {
        const r = await db.query(q.extendSql(s), [key, token, q.secondsParam(leaseMs), scope]);
        return q.toDate(r.rows[0].expires);
    }
    catch (e) {
        throw (0, errors_1.translate)(e, key, 'other');
    }
}
/** A wait in milliseconds as lock_timeout's text, or null for none. */
function waitParam(ms) {
    return ms === undefined || ms === null ? null : `${Math.max(1, Math.round(ms))}ms`;
}
/**
 * eo_status: the key's state without claiming it, or null for a key eo does
 * not know. eo_status waits for a claim of the key in flight to end; `waitMs`
 * bounds that as for claim (RetryableError, 55P03).
 */
async function status(db, key, opts = {}) {
    const s = await q.eoSchema(db);
    const wait = waitParam(opts.waitMs);
    const params = [key, opts.scope ?? null];
    let r;
    try {
        r = wait === null ? await db.query(q.statusSql(s), params) : await db.query(q.statusWaitSql(s), [wait, ...params]);
    }
    catch (e) {
        throw (0, errors_1.translate)(e, key, 'other');
    }
    // no row, or statusWaitSql's row of NULLs
    if (r.rows.length === 0 || r.rows[0].state === null)
        return null;
    const row = r.rows[0];
    return {
        state: row.state,
        result: q.toJson(row.result),
        attempts: q.toInt(row.attempts),
        token: q.toInt(row.lease_token),
        leaseExpiresAt: q.toDate(row.lease_expires_at),
        lastError: row.last_error,
        createdAt: q.toDate(row.created_at),
        updatedAt: q.toDate(row.updated_at),
    };
}
