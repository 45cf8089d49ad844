"use strict";
Object.defineProperty(exports, "__esModule", { value: true });
exports.withLease = withLease;
const claim_1 = require("./claim");
const errors_1 = require("./errors");
/**
 * Claims `key` with a lease on a connection of `pool` (autocommit), runs
 * `work`, and completes with its return value under the token. Busy is
 * BusyError, dead DeadError. If the work throws, the attempt is recorded
 * with eo_fail (unless the token is stale) and the error rethrown. If the
 * heartbeat finds the token stale, the signal aborts, and nothing the work
 * returns is stored: StaleTokenError is thrown.
 */
async function withLease(pool, key, opts, work) {
    const c = await (0, claim_1.claim)(pool, key, { leaseMs: opts.leaseMs, fingerprint: opts.fingerprint, scope: opts.scope });
    if (c.status === 'duplicate')
        return { status: 'duplicate', result: c.result, claim: c };
    if (c.status === 'busy')
        throw new errors_1.BusyError(key, c.leaseExpiresAt);
    if (c.status === 'dead')
        throw new errors_1.DeadError(key);
    const ac = new AbortController();
    let stale = null;
    let completed = false;
    const markStale = (e) => {
        if (e instanceof errors_1.StaleTokenError && !stale) {
            stale = e;
            ac.abort(e);
        }
        throw e;
    };
    const every = opts.heartbeatMs ?? Math.max(100, Math.floor(opts.leaseMs / 3));
    let beat = Promise.resolve();
    const timer = every > 0
        ? setInterval(() => {
            beat = c.extend(opts.leaseMs, pool).catch((e) => {
                try {
                    markStale(e);
                }
                catch {
                    /* recorded in `stale`; other errors: the next beat tries again */
                }
            });
        }, every)
        : null;
    timer?.unref?.();
    const lease = {
        key,
        token: c.token,
        recovery: c.recovery,
        attempts: c.attempts,
        signal: ac.signal,
        check() {
            if (stale)
                throw stale;
        },
        async recoveryPoint(point, state, db = pool) {
            if (stale)
                throw stale;
            await c.recoveryPoint(point, state, db).catch(markStale);
        },
        async complete(result, db = pool) {
            if (stale)
                throw stale;
            await c.complete(result, db).catch(markStale);
            completed = true;
        },
    };
    let value;
    try {
        value = await work(lease);
    }
    catch (err) {
        if (timer)
            clearInterval(timer);
        await beat;
        if (!stale && !(err instanceof errors_1.StaleTokenError)) {
            const f = opts.failure?.(err) ?? null;
            const message = err instanceof Error ? err.message : String(err);
            await c.fail(message, { retryAfterMs: opts.retryAfterMs, ...(f ?? {}) }, pool).catch(() => undefined);
        }
        throw err;
    }
    if (timer)
        clearInterval(timer);
    await beat;
    if (stale)
        throw stale;
    if (!completed)
        await c.complete(value === undefined ? null : value, pool);
    return { status: 'done', result: value, claim: c };
}
