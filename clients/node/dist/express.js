"use strict";
Object.defineProperty(exports, "__esModule", { value: true });
exports.expressIdempotency = expressIdempotency;
exports.expressIdempotencyErrors = expressIdempotencyErrors;
/*
 * Idempotency-Key middleware for Express (4 and 5). Put it after the body
 * parser (express.json()). The handler gets the request's transaction
 * as req.eo.client; the claim and its work commit together just before
 * the response is sent.
 */
const http_1 = require("./http");
function send(res, a, end) {
    res.statusCode = a.status;
    for (const [k, v] of Object.entries(a.headers))
        res.setHeader(k, v);
    res.setHeader('content-length', String(a.body.length));
    end.call(res, a.body);
}
function expressIdempotency(options) {
    const o = (0, http_1.resolve)(options);
    return function eoIdempotency(req, res, next) {
        const info = { method: req.method, url: req.originalUrl ?? req.url, headers: req.headers, body: req.body };
        (0, http_1.begin)(o, info, req).then((b) => {
            if (b.kind === 'pass')
                return next();
            if (b.kind === 'answer') {
                res.removeHeader?.('set-cookie');
                return send(res, b.answer, res.end);
            }
            hold(b.held, req, res, next);
        }, (err) => next(err));
    };
}
function hold(held, req, res, next) {
    req.eo = { client: held.client, key: held.key, claim: held.claim, held };
    const origWrite = res.write;
    const origEnd = res.end;
    const chunks = [];
    const take = (chunk, encoding) => {
        if (chunk === undefined || chunk === null || typeof chunk === 'function')
            return;
        chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8'));
    };
    // The body is kept until the handler ends the response: the commit comes
    // before anything reaches the client.
    res.write = function (chunk, encoding, cb) {
        take(chunk, encoding);
        const done = typeof encoding === 'function' ? encoding : cb;
        if (typeof done === 'function')
            process.nextTick(done);
        return true;
    };
    res.end = function (chunk, encoding, cb) {
        take(chunk, encoding);
        res.write = origWrite;
        res.end = origEnd;
        const body = Buffer.concat(chunks);
        const status = res.statusCode;
        held
            .finish(status, res.getHeaders(), body)
            .then((a) => (a ? send(res, { ...a }, origEnd) : sendBody(res, body, origEnd)), () => sendBody(res, body, origEnd));
        void cb;
        return res;
    };
    // The client went away before the response: nothing is committed.
    res.on('close', () => {
        if (!res.writableFinished) {
            held.aborted = true;
            // The handler may still run on the client: it is rolled back when it
            // answers or throws.
        }
    });
    req.on?.('error', () => (held.aborted = true));
    next();
}
function sendBody(res, body, end) {
    if (!res.headersSent)
        res.setHeader('content-length', String(body.length));
    end.call(res, body);
}
/**
 * An Express error handler to place after your routes: rolls back the
 * request's transaction when a handler fails before answering, then passes
 * the error on. Express's own error answer (500) rolls back too; this one
 * also covers handlers whose errors your error handler answers with 4xx.
 */
function expressIdempotencyErrors() {
    return function eoIdempotencyErrors(err, req, _res, next) {
        const held = req.eo?.held;
        if (held)
            held.abandon().then(() => next(err), () => next(err));
        else
            next(err);
    };
}
