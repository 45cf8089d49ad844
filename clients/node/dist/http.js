"use strict";
Object.defineProperty(exports, "__esModule", { value: true });
exports.HeldRequest = exports.DEFAULT_REPLAY_HEADERS = exports.DEFAULT_RELEASED = void 0;
exports.bodyBytes = bodyBytes;
exports.defaultFingerprint = defaultFingerprint;
exports.defaultCaller = defaultCaller;
exports.resolve = resolve;
exports.begin = begin;
/*
 * The Idempotency-Key semantics both middlewares share: the key per caller,
 * the fingerprint, what is stored and what is replayed.
 */
const node_crypto_1 = require("node:crypto");
const claim_1 = require("./claim");
const errors_1 = require("./errors");
exports.DEFAULT_RELEASED = [401, 403, 408, 425, 429];
exports.DEFAULT_REPLAY_HEADERS = [
    'content-type',
    'content-language',
    'content-location',
    'location',
    'etag',
    'last-modified',
    'cache-control',
    'vary',
];
/** Never stored, whatever the options say: credentials, cookies, and what is computed per response. */
const NEVER_STORED = new Set([
    'set-cookie',
    'set-cookie2',
    'authorization',
    'proxy-authorization',
    'www-authenticate',
    'proxy-authenticate',
    'cookie',
    'content-length',
    'transfer-encoding',
    'connection',
    'keep-alive',
    'upgrade',
    'trailer',
    'te',
    'date',
    'idempotent-replayed',
]);
const sha256 = (...parts) => {
    const h = (0, node_crypto_1.createHash)('sha256');
    for (const p of parts) {
        const b = typeof p === 'string' ? Buffer.from(p, 'utf8') : p;
        // each part with its length first: ("ab","c") and ("a","bc") differ
        h.update(`${b.length}:`);
        h.update(b);
    }
    return h.digest('hex');
};
function headerValue(h) {
    return Array.isArray(h) ? h.join(', ') : h;
}
function bodyBytes(body) {
    if (body === undefined || body === null)
        return Buffer.alloc(0);
    if (Buffer.isBuffer(body))
        return body;
    if (typeof body === 'string')
        return Buffer.from(body, 'utf8');
    return Buffer.from(JSON.stringify(body), 'utf8');
}
function defaultFingerprint(req) {
    return sha256(req.method.toUpperCase(), req.url, bodyBytes(req.body));
}
function defaultCaller(req) {
    const auth = headerValue(req.headers['authorization']);
    return auth ? 'auth:' + sha256(auth) : undefined;
}
function resolve(o) {
    if (!o || !o.pool)
        throw new TypeError('idempotency middleware: options.pool (a pg.Pool) is required');
    const replay = new Set(exports.DEFAULT_REPLAY_HEADERS);
    for (const h of o.replayHeaders ?? []) {
        const l = h.toLowerCase();
        if (!NEVER_STORED.has(l))
            replay.add(l);
    }
    const maxStoredBody = o.maxStoredBody ?? 512 * 1024;
    if (maxStoredBody > 900 * 1024)
        throw new RangeError('maxStoredBody: eo stores results of at most 1 MB; keep it under 900 KiB');
    return {
        pool: o.pool,
        caller: o.caller ?? defaultCaller,
        scope: o.scope ?? null,
        namespace: o.namespace ?? 'http',
        fingerprint: o.fingerprint ?? defaultFingerprint,
        methods: new Set((o.methods ?? ['POST', 'PATCH']).map((m) => m.toUpperCase())),
        required: o.required ?? false,
        header: (o.header ?? 'idempotency-key').toLowerCase(),
        maxKeyLength: o.maxKeyLength ?? 255,
        replayHeaders: replay,
        maxStoredBody,
        waitMs: o.waitMs ?? 1000,
        retryAfterSeconds: o.retryAfterSeconds ?? 1,
        released: new Set(o.released ?? exports.DEFAULT_RELEASED),
    };
}
const json = (status, body, headers = {}) => ({
    status,
    headers: { 'content-type': 'application/json; charset=utf-8', ...headers },
    body: Buffer.from(JSON.stringify(body)),
});
/** A request the middleware holds a claim for: the transaction's client and the key. */
class HeldRequest {
    client;
    key;
    claim;
    o;
    fingerprint;
    finished = false;
    aborted = false;
    constructor(o, client, key, c, fingerprint) {
        this.o = o;
        this.client = client;
        this.key = key;
        this.claim = c;
        this.fingerprint = fingerprint;
    }
    /**
     * The handler's response is ready: below 500, store it with eo_complete and
     * COMMIT; 5xx, a `released` status (401, 403, 408, 425, 429), or the
     * client gone: ROLLBACK (nothing claimed, nothing stored). Returns the answer to send: the handler's, or a 500 if the
     * commit failed or the body is too large to store.
     */
    async finish(status, headers, body) {
        if (this.finished)
            return null;
        this.finished = true;
        if (this.aborted || status >= 500 || this.o.released.has(status)) {
            await this.end('ROLLBACK');
            return null;
        }
        if (body.length > this.o.maxStoredBody) {
            await this.end('ROLLBACK');
            return json(500, { error: 'the response is too large to store for an Idempotency-Key replay; nothing was done' });
        }
        const stored = { http_status: status, headers: {}, ...encodeBody(body), request_fingerprint: this.fingerprint };
        for (const [name, v] of Object.entries(headers)) {
            const l = name.toLowerCase();
            if (!this.o.replayHeaders.has(l) || NEVER_STORED.has(l) || v === undefined)
                continue;
            stored.headers[l] = Array.isArray(v) ? v.map(String) : String(v);
        }
        try {
            await (0, claim_1.complete)(this.client, this.key, stored, { scope: this.o.scope });
            if (this.aborted)
                throw new Error('the client went away');
            await this.client.query('COMMIT');
        }
        catch (e) {
            await this.end('ROLLBACK');
            return json(500, { error: 'the request was not committed; nothing was done' });
        }
        this.client.release();
        return null;
    }
    /** The handler threw, or the request ended without a response: roll back. */
    async abandon() {
        if (this.finished)
            return;
        this.finished = true;
        await this.end('ROLLBACK');
    }
    async end(sql) {
        try {
            await this.client.query(sql);
            this.client.release();
        }
        catch (e) {
            this.client.release(e); // a broken connection is not given back to the pool
        }
    }
}
exports.HeldRequest = HeldRequest;
function encodeBody(body) {
    const text = body.toString('utf8');
    // jsonb holds valid UTF-8 without NUL; anything else goes as base64
    if (!text.includes('\u0000') && Buffer.from(text, 'utf8').equals(body))
        return { body: text, body_encoding: 'utf8' };
    return { body: body.toString('base64'), body_encoding: 'base64' };
}
/** A stored response, replayed, with Idempotent-Replayed: true. */
function replay(result) {
    const r = (result ?? {});
    const status = Number.isInteger(r.http_status) && r.http_status >= 100 && r.http_status <= 599 ? r.http_status : 200;
    const headers = {};
    for (const [k, v] of Object.entries(r.headers ?? {})) {
        if (!NEVER_STORED.has(k.toLowerCase()))
            headers[k] = Array.isArray(v) ? v.join(', ') : String(v);
    }
    headers['idempotent-replayed'] = 'true';
    const body = typeof r.body === 'string' ? Buffer.from(r.body, r.body_encoding === 'base64' ? 'base64' : 'utf8') : Buffer.alloc(0);
    return { status, headers, body };
}
/**
 * Before the handler: the key from the header; eo_status, which answers a
 * retry of a done request; else BEGIN and the claim. Returns
 * what to do: pass the request on untouched, answer it here (replay, 409,
 * 422, 400, 410), or run the handler with the held transaction.
 */
async function begin(o, req, original) {
    if (!o.methods.has(req.method.toUpperCase()))
        return { kind: 'pass' };
    const raw = headerValue(req.headers[o.header]);
    if (raw === undefined) {
        return o.required ? { kind: 'answer', answer: json(400, { error: `this request needs an ${o.header} header` }) } : { kind: 'pass' };
    }
    if (raw.length === 0 || raw.length > o.maxKeyLength) {
        return { kind: 'answer', answer: json(400, { error: `the ${o.header} header must be 1 to ${o.maxKeyLength} characters` }) };
    }
    const caller = o.caller(original);
    if (caller === undefined || caller === null || caller === '') {
        return { kind: 'answer', answer: json(401, { error: `an ${o.header} request needs an identified caller` }) };
    }
    // The stored key: a hash of caller and key, fixed length (eo's limit is
    // 512 bytes), so no choice of key reaches another caller's record.
    const key = `${o.namespace}:${sha256(String(caller), raw)}`;
    const fingerprint = o.fingerprint(original);
    const client = await o.pool.connect();
    let c;
    try {
        const done = replayDone(await (0, claim_1.status)(client, key, { scope: o.scope, waitMs: o.waitMs }), fingerprint);
        if (done !== null) {
            client.release();
            return { kind: 'answer', answer: done };
        }
        await client.query('BEGIN');
        c = await (0, claim_1.claim)(client, key, { fingerprint, scope: o.scope, waitMs: o.waitMs });
    }
    catch (e) {
        try {
            await client.query('ROLLBACK');
            client.release();
        }
        catch (re) {
            client.release(re);
        }
        return { kind: 'answer', answer: refusal(o, e) };
    }
    if (c.status === 'claimed')
        return { kind: 'held', held: new HeldRequest(o, client, key, c, fingerprint) };
    try {
        await client.query('ROLLBACK');
        client.release();
    }
    catch (re) {
        client.release(re);
    }
    switch (c.status) {
        case 'duplicate':
            return { kind: 'answer', answer: replay(c.result) };
        case 'busy': {
            const secs = c.leaseExpiresAt ? Math.max(1, Math.ceil((c.leaseExpiresAt.getTime() - Date.now()) / 1000)) : o.retryAfterSeconds;
            return { kind: 'answer', answer: inFlight(secs) };
        }
        case 'dead':
            return { kind: 'answer', answer: json(410, { error: 'this Idempotency-Key failed too often and is not tried again; use a new key' }) };
        default:
            throw new errors_1.EoError(`eo_claim answered "${String(c.status)}", a status this client does not know`);
    }
}
/**
 * The replay, if eo_status found the key done with a response stored for this
 * very request: a retry is answered from one eo_status outside any
 * transaction, as a processed-keys table answers it from one SELECT.
 * Anything else (no key, in flight, failed, dead, a result gone or stored by
 * an older client, another request's fingerprint) goes to the claim, which
 * decides.
 */
function replayDone(st, fingerprint) {
    if (st === null || st.state !== 'done' || typeof st.result !== 'object' || st.result === null)
        return null;
    if (st.result.request_fingerprint !== fingerprint)
        return null;
    return replay(st.result);
}
function inFlight(secs) {
    return json(409, { error: 'a request with this Idempotency-Key is in flight; retry later' }, { 'retry-after': String(secs) });
}
/** eo_claim's errors as answers (eo_http_error_status's mapping); others are rethrown. */
function refusal(o, e) {
    if (e instanceof errors_1.FingerprintMismatchError) {
        return json(422, { error: 'this Idempotency-Key was used with a different request' });
    }
    if (e instanceof errors_1.BadKeyError)
        return json(400, { error: 'the Idempotency-Key was refused: ' + e.message });
    if (e instanceof errors_1.RejectedError) {
        return json(422, { error: 'the request with this Idempotency-Key failed for good', sqlstate: e.sqlstate }, { 'idempotent-replayed': 'true' });
    }
    if (e instanceof errors_1.RetryableError) {
        // 55P03: waited waitMs for a request in flight with this key
        if (e.sqlstate === '55P03')
            return inFlight(o.retryAfterSeconds);
        return json(503, { error: 'try again' }, { 'retry-after': String(o.retryAfterSeconds) });
    }
    throw e;
}
