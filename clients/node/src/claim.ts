/*
 * eo_claim and what follows it, on the caller's connection and in the
 * caller's transaction.
 */
import type { Queryable } from './types';
import { EoError, translate } from './errors';
import * as q from './sql';

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
export class Claim {
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
  readonly recovery: { point: string; state: unknown } | null;
  private readonly db: Queryable;

  constructor(db: Queryable, key: string, scope: string | null, row: Record<string, string | null>) {
    this.db = db;
    this.key = key;
    this.scope = scope;
    this.status = row.status as ClaimStatus;
    this.result = q.toJson(row.result);
    this.attempts = q.toInt(row.attempts);
    this.token = q.toInt(row.lease_token);
    this.leaseExpiresAt = q.toDate(row.lease_expires_at);
    this.resultExpired = row.result_expired === 'true';
    this.recovery = row.recovery_point === null ? null : { point: row.recovery_point, state: q.toJson(row.recovery_state) };
  }

  get claimed(): boolean {
    return this.status === 'claimed';
  }

  /**
   * eo_complete: the key is done with `result` (any JSON value, up to 1 MB),
   * replayed to later claims. Transaction mode: in the claiming transaction,
   * done at its COMMIT. Lease mode: fenced by the token (StaleTokenError).
   * `db`: another connection to use (lease mode: the transaction that records the effect).
   */
  async complete(result?: unknown, db: Queryable = this.db): Promise<void> {
    await complete(db, this.key, result, { token: this.token, scope: this.scope });
  }

  /** eo_fail: a failed attempt (retry, dead) or a final failure (rejected). */
  async fail(error?: string | null, opts: FailOptions = {}, db: Queryable = this.db): Promise<FailOutcome> {
    return fail(db, this.key, error, { ...opts, token: this.token, scope: this.scope });
  }

  /** eo_extend (lease mode): renews the lease; returns its new end. */
  async extend(leaseMs: number, db: Queryable = this.db): Promise<Date> {
    return extend(db, this.key, this.needToken('extend'), leaseMs, this.scope);
  }

  /**
   * eo_recovery_point (lease mode): records how far the work got, in the
   * transaction of `db` (commit it before the next outside call).
   */
  async recoveryPoint(point: string, state?: unknown, db: Queryable = this.db): Promise<void> {
    const s = await q.eoSchema(db);
    const token = this.needToken('recoveryPoint');
    try {
      await db.query(q.recoveryPointSql(s), [this.key, token, point, q.jsonParam(state), this.scope]);
    } catch (e) {
      throw translate(e, this.key, 'complete');
    }
  }

  private needToken(what: string): number {
    if (this.token === null) throw new EoError(`${what} needs a lease: claim with leaseMs`, null, this.key);
    return this.token;
  }
}

interface ClientWithTxStatus {
  getTransactionStatus?: () => string | null;
}

/**
 * eo_claim. Transaction mode (no leaseMs): `db` must be a client inside
 * BEGIN; the claim, the work and eo_complete commit together. Lease mode:
 * call it outside a transaction (autocommit), so the lease is durable
 * before the outside call.
 */
export async function claim(db: Queryable, key: string, opts: ClaimOptions = {}): Promise<Claim> {
  const leaseMs = opts.leaseMs ?? null;
  const txStatus = (db as ClientWithTxStatus).getTransactionStatus?.call(db);
  if (leaseMs === null && txStatus === 'I') {
    // node-postgres knows the session is not in a transaction block: a
    // transaction-mode claim would commit at once, done with no work.
    throw new EoError('a transaction-mode claim needs a transaction: run BEGIN on this client first (or pass leaseMs)', null, key);
  }
  if (leaseMs !== null && txStatus === 'T') {
    throw new EoError('a lease-mode claim must commit before the outside call: claim outside a transaction', null, key);
  }
  const s = await q.eoSchema(db);
  const scope = opts.scope ?? null;
  const params = [key, opts.fingerprint ?? null, q.secondsParam(leaseMs), scope];
  const wait = leaseMs === null ? waitParam(opts.waitMs) : null;
  let row: Record<string, string | null>;
  try {
    const r = wait === null ? await db.query(q.claimSql(s), params) : await db.query(q.claimWaitSql(s), [wait, ...params]);
    row = r.rows[0];
  } catch (e) {
    throw translate(e, key, 'claim');
  }
  return new Claim(db, key, scope, row);
}

export async function complete(
  db: Queryable,
  key: string,
  result?: unknown,
  opts: { token?: number | null; scope?: string | null } = {}
): Promise<void> {
  const s = await q.eoSchema(db);
  try {
    await db.query(q.completeSql(s), [key, q.jsonParam(result), opts.token ?? null, opts.scope ?? null]);
  } catch (e) {
    throw translate(e, key, 'complete');
  }
}

export async function fail(
  db: Queryable,
  key: string,
  error?: string | null,
  opts: FailOptions & { token?: number | null; scope?: string | null } = {}
): Promise<FailOutcome> {
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
    return r.rows[0].outcome as FailOutcome;
  } catch (e) {
    throw translate(e, key, 'other');
  }
}

export async function extend(db: Queryable, key: string, token: number, leaseMs: number, scope: string | null = null): Promise<Date> {
  const s = await q.eoSchema(db);
  try {
    const r = await db.query(q.extendSql(s), [key, token, q.secondsParam(leaseMs), scope]);
    return q.toDate(r.rows[0].expires) as Date;
  } catch (e) {
    throw translate(e, key, 'other');
  }
}

/** A wait in milliseconds as lock_timeout's text, or null for none. */
function waitParam(ms: number | null | undefined): string | null {
  return ms === undefined || ms === null ? null : `${Math.max(1, Math.round(ms))}ms`;
}

/**
 * eo_status: the key's state without claiming it, or null for a key eo does
 * not know. eo_status waits for a claim of the key in flight to end; `waitMs`
 * bounds that as for claim (RetryableError, 55P03).
 */
export async function status(
  db: Queryable,
  key: string,
  opts: { scope?: string | null; waitMs?: number | null } = {}
): Promise<KeyStatus | null> {
  const s = await q.eoSchema(db);
  const wait = waitParam(opts.waitMs);
  const params = [key, opts.scope ?? null];
  let r;
  try {
    r = wait === null ? await db.query(q.statusSql(s), params) : await db.query(q.statusWaitSql(s), [wait, ...params]);
  } catch (e) {
    throw translate(e, key, 'other');
  }
  // no row, or statusWaitSql's row of NULLs
  if (r.rows.length === 0 || r.rows[0].state === null) return null;
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
