"use strict";
Object.defineProperty(exports, "__esModule", { value: true });
exports.transaction = transaction;
exports.applyMessage = applyMessage;
exports.applyBatch = applyBatch;
const claim_1 = require("./claim");
const errors_1 = require("./errors");
/** Runs fn(client) between BEGIN and COMMIT on a client of the pool (ROLLBACK if it throws). */
async function transaction(pool, fn) {
    const c = await pool.connect();
    let broken;
    try {
        await c.query('BEGIN');
        const v = await fn(c);
        await c.query('COMMIT');
        return v;
    }
    catch (e) {
        try {
            await c.query('ROLLBACK');
        }
        catch (re) {
            broken = re;
        }
        throw e;
    }
    finally {
        c.release(broken);
    }
}
function sqlstateOf(err) {
    const code = err?.code;
    return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : null;
}
/**
 * Applies one message: BEGIN; eo_claim(eventId); if claimed, handler(client, message); COMMIT.
 * The handler's error is rethrown after the rollback (and recorded with eo_fail).
 */
async function applyMessage(pool, message, handler, opts = {}) {
    try {
        return await transaction(pool, async (client) => {
            const c = await (0, claim_1.claim)(client, message.eventId, { scope: message.scope, fingerprint: message.fingerprint });
            if (c.status === 'claimed')
                await handler(client, message);
            return c.status;
        });
    }
    catch (err) {
        if (err instanceof errors_1.RejectedError)
            return 'rejected';
        if (err instanceof errors_1.EoError)
            throw err;
        if (opts.recordFailure !== false) {
            await (0, claim_1.fail)(pool, message.eventId, err instanceof Error ? err.message : String(err), {
                scope: message.scope,
                sqlstate: sqlstateOf(err),
                retryAfterMs: opts.retryAfterMs,
            });
        }
        throw err;
    }
}
/**
 * Applies a batch in one transaction: the messages' keys are claimed in a
 * fixed order (sorted, so two batches cannot deadlock), the handler runs
 * for each claimed one, and one COMMIT covers them all. A message twice in
 * the batch is applied once. A rejected key is skipped (its claim is in a
 * savepoint). If the handler throws, the whole batch rolls back and the
 * error is rethrown: apply its messages one by one (applyMessage) to find
 * and record the bad one. Returns each message's status, in input order.
 */
async function applyBatch(pool, messages, handler) {
    const order = messages.map((m, i) => i);
    const sortKey = (m) => `${m.scope ?? ''}\u0000${m.eventId}`;
    order.sort((a, b) => (sortKey(messages[a]) < sortKey(messages[b]) ? -1 : sortKey(messages[a]) > sortKey(messages[b]) ? 1 : 0));
    return transaction(pool, async (client) => {
        const out = new Array(messages.length);
        for (const i of order) {
            const m = messages[i];
            await client.query('SAVEPOINT eo_inbox_claim');
            let status;
            try {
                status = (await (0, claim_1.claim)(client, m.eventId, { scope: m.scope, fingerprint: m.fingerprint })).status;
                await client.query('RELEASE SAVEPOINT eo_inbox_claim');
            }
            catch (e) {
                if (!(e instanceof errors_1.RejectedError))
                    throw e;
                await client.query('ROLLBACK TO SAVEPOINT eo_inbox_claim');
                await client.query('RELEASE SAVEPOINT eo_inbox_claim');
                status = 'rejected';
            }
            if (status === 'claimed')
                await handler(client, m);
            out[i] = status;
        }
        return out;
    });
}
