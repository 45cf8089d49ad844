import type { ClientLike, PoolLike } from './types';
export interface InboxMessage {
    /** The producer's id of the message (the outbox's event id, a CloudEvents id), not the broker's delivery id. */
    eventId: string;
    /** eo's scope of this consumer (see docs/guides.md, Scopes). */
    scope?: string | null;
    fingerprint?: string | null;
}
/**
 * What to do with the message: `claimed` (the effect committed) and
 * `duplicate` (done before): acknowledge. `busy`: do not acknowledge (it
 * comes back). `dead`, `rejected`: acknowledge or dead-letter, and alert.
 */
export type InboxStatus = 'claimed' | 'duplicate' | 'busy' | 'dead' | 'rejected';
export interface ApplyOptions {
    /**
     * After the handler threw (the transaction rolled back), record the
     * attempt with eo_fail in a new transaction (its SQLSTATE, if the error
     * has one: a final one makes the key rejected). Default true.
     */
    recordFailure?: boolean;
    retryAfterMs?: number | null;
}
/** Runs fn(client) between BEGIN and COMMIT on a client of the pool (ROLLBACK if it throws). */
export declare function transaction<T>(pool: PoolLike, fn: (c: ClientLike) => Promise<T>): Promise<T>;
/**
 * Applies one message: BEGIN; eo_claim(eventId); if claimed, handler(client, message); COMMIT.
 * The handler's error is rethrown after the rollback (and recorded with eo_fail).
 */
export declare function applyMessage<M extends InboxMessage>(pool: PoolLike, message: M, handler: (client: ClientLike, message: M) => Promise<unknown>, opts?: ApplyOptions): Promise<InboxStatus>;
/**
 * Applies a batch in one transaction: the messages' keys are claimed in a
 * fixed order (sorted, so two batches cannot deadlock), the handler runs
 * for each claimed one, and one COMMIT covers them all. A message twice in
 * the batch is applied once. A rejected key is skipped (its claim is in a
 * savepoint). If the handler throws, the whole batch rolls back and the
 * error is rethrown: apply its messages one by one (applyMessage) to find
 * and record the bad one. Returns each message's status, in input order.
 */
export declare function applyBatch<M extends InboxMessage>(pool: PoolLike, messages: M[], handler: (client: ClientLike, message: M) => Promise<unknown>): Promise<InboxStatus[]>;
