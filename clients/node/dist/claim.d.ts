import type { Queryable } from './types';
export type ClaimStatus = 'claimed' | 'duplicate' | 'busy' | 'dead';
export interface ClaimOptions {
    /** A hash of what makes two requests the same; a different one later is FingerprintMismatchError. */
    fingerprint?: string | null;
    /** Lease mode: the lease in milliseconds. Omitted: transaction mode (the claim belongs to the caller's transaction). */
    leaseMs?: number | null;
    /** eo's scope (a namespace of keys owned by a role), made with eo_scope_create. */
    scope?: string | null;
    /**
     * Transaction mode only: how long to wait for another transaction that holds
     * the key (milliseconds) before RetryableError (55P03). Omitted: as the session's lock_timeout.
     */
    waitMs?: number | null;
}
export interface FailOptions {
    /** No claims (busy) until this long from now, in milliseconds. */
    retryAfterMs?: number | null;
    /** The failure's SQLSTATE; one that eo.final_sqlstates lists makes it final (rejected). */
    sqlstate?: string | null;
    /** true: the failure is final whatever the SQLSTATE (one is needed); false: never final. */
    final?: boolean | null;
}
export type FailOutcome = 'retry' | 'dead' | 'rejected';
/** eo_status's row. */
export interface KeyStatus {
    state: 'processing' | 'done' | 'failed' | 'dead' | 'rejected' | 'in_doubt';
    result: unknown;
    attempts: number | null;
    token: number | null;
    leaseExpiresAt: Date | null;
    lastError: string | null;
    createdAt: Date | null;
    updatedAt: Date | null;
}
/** The outcome of eo_claim, with the calls its holder may make next. */
export declare class Claim {
    readonly key: string;
    readonly scope: string | null;
    readonly status: ClaimStatus;
    /** The stored result (duplicate only). */
    readonly result: unknown;
    readonly attempts: number | null;
    /** The fencing token (claimed in lease mode only). */
    readonly token: number | null;
    /** The lease's end (claimed in lease mode), or when to retry (busy). */
    readonly leaseExpiresAt: Date | null;
    /** Only a tombstone answered: duplicate or dead with no result kept. */
    readonly resultExpired: boolean;
    /** The progress an earlier holder recorded (claimed only), to resume from. */
    readonly recovery: {
        point: string;
        state: unknown;
    } | null;
    private readonly db;
    constructor(db: Queryable, key: string, scope: string | null, row: Record<string, string | null>);
    get claimed(): boolean;
    /**
     * eo_complete: the key is done with `result` (any JSON value, up to 1 MB),
     * replayed to later claims. Transaction mode: in the claiming transaction,
     * done at its COMMIT. Lease mode: fenced by the token (StaleTokenError).
     * `db`: another connection to use (lease mode: the transaction that records the effect).
     */
    complete(result?: unknown, db?: Queryable): Promise<void>;
    /** eo_fail: a failed attempt (retry, dead) or a final failure (rejected). */
    fail(error?: string | null, opts?: FailOptions, db?: Queryable): Promise<FailOutcome>;
    /** eo_extend (lease mode): renews the lease; returns its new end. */
    extend(leaseMs: number, db?: Queryable): Promise<Date>;
    /**
     * eo_recovery_point (lease mode): records how far the work got, in the
     * transaction of `db` (commit it before the next outside call).
     */
    recoveryPoint(point: string, state?: unknown, db?: Queryable): Promise<void>;
    private needToken;
}
/**
 * eo_claim. Transaction mode (no leaseMs): `db` must be a client inside
 * BEGIN; the claim, the work and eo_complete commit together. Lease mode:
 * call it outside a transaction (autocommit), so the lease is durable
 * before the outside call.
 */
export declare function claim(db: Queryable, key: string, opts?: ClaimOptions): Promise<Claim>;
export declare function complete(db: Queryable, key: string, result?: unknown, opts?: {
    token?: number | null;
    scope?: string | null;
}): Promise<void>;
export declare function fail(db: Queryable, key: string, error?: string | null, opts?: FailOptions & {
    token?: number | null;
    scope?: string | null;
}): Promise<FailOutcome>;
export declare function extend(db: Queryable, key: string, token: number, leaseMs: number, scope?: string | null): Promise<Date>;
/**
 * eo_status: the key's state without claiming it, or null for a key eo does
 * not know. eo_status waits for a claim of the key in flight to end; `waitMs`
 * bounds that as for claim (RetryableError, 55P03).
 */
export declare function status(db: Queryable, key: string, opts?: {
    scope?: string | null;
    waitMs?: number | null;
}): Promise<KeyStatus | null>;
