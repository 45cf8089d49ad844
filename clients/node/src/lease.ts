/*
 * Lease mode for work with outside effects: the claim commits on its own
 * before the work starts, a heartbeat renews the lease while the work
 * runs, and the result is stored only under a token that is still current.
 */
import type { PoolLike, Queryable } from './types';
import { claim, Claim, FailOptions } from './claim';
import { BusyError, DeadError, StaleTokenError } from './errors';

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
  readonly recovery: { point: string; state: unknown } | null;
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

export type LeaseOutcome<T> = { status: 'done'; result: T; claim: Claim } | { status: 'duplicate'; result: unknown; claim: Claim };

/**
 * Claims `key` with a lease on a connection of `pool` (autocommit), runs
 * `work`, and completes with its return value under the token. Busy is
 * BusyError, dead DeadError. If the work throws, the attempt is recorded
 * with eo_fail (unless the token is stale) and the error rethrown. If the
 * heartbeat finds the token stale, the signal aborts, and nothing the work
 * returns is stored: StaleTokenError is thrown.
 */
export async function withLease<T>(pool: PoolLike, key: string, opts: LeaseOptions, work: (lease: Lease) => Promise<T>): Promise<LeaseOutcome<T>> {
  const c = await claim(pool, key, { leaseMs: opts.leaseMs, fingerprint: opts.fingerprint, scope: opts.scope });
  if (c.status === 'duplicate') return { status: 'duplicate', result: c.result, claim: c };
  if (c.status === 'busy') throw new BusyError(key, c.leaseExpiresAt);
  if (c.status === 'dead') throw new DeadError(key);

  const ac = new AbortController();
  let stale: StaleTokenError | null = null;
  let completed = false;
  const markStale = (e: unknown): never => {
    if (e instanceof StaleTokenError && !stale) {
      stale = e;
      ac.abort(e);
    }
    throw e;
  };
  const every = opts.heartbeatMs ?? Math.max(100, Math.floor(opts.leaseMs / 3));
  let beat: Promise<unknown> = Promise.resolve();
  const timer =
    every > 0
      ? setInterval(() => {
          beat = c.extend(opts.leaseMs, pool).catch((e) => {
            try {
              markStale(e);
            } catch {
              /* recorded in `stale`; other errors: the next beat tries again */
            }
          });
        }, every)
      : null;
  timer?.unref?.();

  const lease: Lease = {
    key,
    token: c.token as number,
    recovery: c.recovery,
    attempts: c.attempts,
    signal: ac.signal,
    check() {
      if (stale) throw stale;
    },
    async recoveryPoint(point, state, db = pool) {
      if (stale) throw stale;
      await c.recoveryPoint(point, state, db).catch(markStale);
    },
    async complete(result, db = pool) {
      if (stale) throw stale;
      await c.complete(result, db).catch(markStale);
      completed = true;
    },
  };

  let value: T;
  try {
    value = await work(lease);
  } catch (err) {
    if (timer) clearInterval(timer);
    await beat;
    if (!stale && !(err instanceof StaleTokenError)) {
      const f = opts.failure?.(err) ?? null;
      const message = err instanceof Error ? err.message : String(err);
      await c.fail(message, { retryAfterMs: opts.retryAfterMs, ...(f ?? {}) }, pool).catch(() => undefined);
    }
    throw err;
  }
  if (timer) clearInterval(timer);
  await beat;
  if (stale) throw stale;
  if (!completed) await c.complete(value === undefined ? null : value, pool);
  return { status: 'done', result: value, claim: c };
}
