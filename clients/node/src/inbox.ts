/*
 * The inbox of a consumer: each message's effect and its claim (the
 * event id) in one transaction; the broker is acknowledged after COMMIT.
 */
import type { ClientLike, PoolLike } from './types';
import { claim, fail } from './claim';
import { EoError, RejectedError } from './errors';

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
export async function transaction<T>(pool: PoolLike, fn: (c: ClientLike) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  let broken: Error | undefined;
  try {
    await c.query('BEGIN');
    const v = await fn(c);
    await c.query('COMMIT');
    return v;
  } catch (e) {
    try {
      await c.query('ROLLBACK');
    } catch (re) {
      broken = re as Error;
    }
    throw e;
  } finally {
    c.release(broken);
  }
}

function sqlstateOf(err: unknown): string | null {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : null;
}

/**
 * Applies one message: BEGIN; eo_claim(eventId); if claimed, handler(client, message); COMMIT.
 * The handler's error is rethrown after the rollback (and recorded with eo_fail).
 */
export async function applyMessage<M extends InboxMessage>(
  pool: PoolLike,
  message: M,
  handler: (client: ClientLike, message: M) => Promise<unknown>,
  opts: ApplyOptions = {}
): Promise<InboxStatus> {
  try {
    return await transaction(pool, async (client) => {
      const c = await claim(client, message.eventId, { scope: message.scope, fingerprint: message.fingerprint });
      if (c.status === 'claimed') await handler(client, message);
      return c.status;
    });
  } catch (err) {
    if (err instanceof RejectedError) return 'rejected';
    if (err instanceof EoError) throw err;
    if (opts.recordFailure !== false) {
      await fail(pool, message.eventId, err instanceof Error ? err.message : String(err), {
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
export async function applyBatch<M extends InboxMessage>(
  pool: PoolLike,
  messages: M[],
  handler: (client: ClientLike, message: M) => Promise<unknown>
): Promise<InboxStatus[]> {
  const order = messages.map((m, i) => i);
  const sortKey = (m: M) => `${m.scope ?? ''}\u0000${m.eventId}`;
  order.sort((a, b) => (sortKey(messages[a]) < sortKey(messages[b]) ? -1 : sortKey(messages[a]) > sortKey(messages[b]) ? 1 : 0));
  return transaction(pool, async (client) => {
    const out: InboxStatus[] = new Array(messages.length);
    for (const i of order) {
      const m = messages[i];
      await client.query('SAVEPOINT eo_inbox_claim');
      let status: InboxStatus;
      try {
        status = (await claim(client, m.eventId, { scope: m.scope, fingerprint: m.fingerprint })).status;
        await client.query('RELEASE SAVEPOINT eo_inbox_claim');
      } catch (e) {
        if (!(e instanceof RejectedError)) throw e;
        await client.query('ROLLBACK TO SAVEPOINT eo_inbox_claim');
        await client.query('RELEASE SAVEPOINT eo_inbox_claim');
        status = 'rejected';
      }
      if (status === 'claimed') await handler(client, m);
      out[i] = status;
    }
    return out;
  });
}
