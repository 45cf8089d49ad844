import type { PoolLike, Queryable } from './types';
import { Claim, FailOptions } from './claim';
export interface LeaseOptions {
    /** The lease, in milliseconds (at most eo.max_lease). */
    leaseMs: number;
    fingerprint?: string | null;
    scope?: string | null;
    /** How often the heartbeat renews the lease (default leaseMs / 3). 0: no heartbeat. */
    heartbeatMs?: number;
    /** On a failure of the work: no claims until this long from now (default: at once). */
    retryAfterMs?: number | null;
    /** A failure of the work: its SQLSTATE and whether it is final (see eo_fail). Default: a retryable failure. */
    failure?: (err: unknown) => Pick<FailOptions, 'sqlstate' | 'final'> | null;
}
/** What the work is given. */
export interface Lease {
    readonly key: string;
    readonly token: number;
    /** The progress an earlier holder recorded, to resume from. */
    readonly recovery: {
        point: string;
        state: unknown;
    } | null;
    readonly attempts: number | null;
    /** Aborted when the token is found stale (the heartbeat was refused): stop, make no further outside call. */
    readonly signal: AbortSignal;
    /** Throws StaleTokenError if the heartbeat found the token stale. Call before each outside call. */
    check(): void;
    /** Records a recovery point; with `db` in the transaction of that step's database work. */
    recoveryPoint(point: string, state?: unknown, db?: Queryable): Promise<void>;
    /** Completes in `db`'s transaction (with the effect's own writes); the work's return value is then not stored again. */
    complete(result: unknown, db?: Queryable): Promise<void>;
}
export type LeaseOutcome<T> = {
    status: 'done';
    result: T;
    claim: Claim;
} | {
    status: 'duplicate';
    result: unknown;
    claim: Claim;
};
/**
 * Claims `key` with a lease on a connection of `pool` (autocommit), runs
 * `work`, and completes with its return value under the token. Busy is
 * BusyError, dead DeadError. If the work throws, the attempt is recorded
 * with eo_fail (unless the token is stale) and the error rethrown. If the
 * heartbeat finds the token stale, the signal aborts, and nothing the work
 * returns is stored: StaleTokenError is thrown.
 */
export declare function withLease<T>(pool: PoolLike, key: string, opts: LeaseOptions, work: (lease: Lease) => Promise<T>): Promise<LeaseOutcome<T>>;
