/*
 * The Idempotency-Key semantics both middlewares share: the key per caller,
 * the fingerprint, what is stored and what is replayed.
 */
import { createHash } from 'node:crypto';
import type { ClientLike, PoolLike } from './types';
import { claim, complete, status, Claim, KeyStatus } from './claim';
import {
  BadKeyError,
  EoError,
  FingerprintMismatchError,
  RejectedError,
  RetryableError,
} from './errors';

/** The request as the middleware sees it (Express's and Fastify's both fit). */
export interface HttpRequestInfo {
  method: string;
  /** The path with the query string. */
  url: string;
  headers: Record<string, string | string[] | undefined>;
  /** The parsed body (object, string, Buffer) or undefined. */
  body: unknown;
}

export interface IdempotencyOptions {
  /** The pool the request's transaction comes from. */
  pool: PoolLike;
  /**
   * Who is asking: keys are hashed with it, so one caller's key never
   * reaches another's result. Default: a hash of the Authorization header.
   * Set it from your authentication (e.g. req => req.user?.id). No caller
   * (null, undefined or '', or no Authorization header by default): 401,
   * as an anonymous namespace would let anyone who guesses a key and a
   * body read another's response.
   */
  caller?: (req: any) => string | null | undefined;
  /** eo's scope the keys are claimed in (made with eo_scope_create); default none. */
  scope?: string | null;
  /** A prefix of the stored key, to keep APIs that share a database apart. Default "http". */
  namespace?: string;
  /** The request's fingerprint. Default: SHA-256 of method, path with query, and body. */
  fingerprint?: (req: any) => string;
  /** Methods the middleware acts on. Default POST and PATCH; others pass through. */
  methods?: string[];
  /** A request without the header: 400 (true) or passed through without idempotency (false, default). */
  required?: boolean;
  /** The request header. Default Idempotency-Key. */
  header?: string;
  /** Longest key accepted, in characters (default 255); longer is 400. */
  maxKeyLength?: number;
  /** Response headers stored and replayed (lower case), added to the defaults. Never Set-Cookie or credentials. */
  replayHeaders?: string[];
  /** Largest response body stored (bytes, default 512 KiB); a larger one is not committed: 500. */
  maxStoredBody?: number;
  /** How long a request waits for another in flight with the same key before 409 (ms, default 1000). */
  waitMs?: number;
  /** Retry-After (seconds) of a 409 when eo gives no lease end. Default 1. */
  retryAfterSeconds?: number;
  /**
   * Answers that say nothing was done for good (an auth check, a rate
   * limit): rolled back and not stored, like 5xx, so the key is free for
   * the retry. Default 401, 403, 408, 425, 429.
   */
  released?: number[];
}

export const DEFAULT_RELEASED = [401, 403, 408, 425, 429];

export const DEFAULT_REPLAY_HEADERS = [
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

export interface Resolved {
  pool: PoolLike;
  caller: (req: any) => string | null | undefined;
  scope: string | null;
  namespace: string;
  fingerprint: (req: any) => string;
  methods: Set<string>;
  required: boolean;
  header: string;
  maxKeyLength: number;
  replayHeaders: Set<string>;
  maxStoredBody: number;
  waitMs: number;
  retryAfterSeconds: number;
  released: Set<number>;
}

const sha256 = (...parts: (string | Buffer)[]) => {
  const h = createHash('sha256');
  for (const p of parts) {
    const b = typeof p === 'string' ? Buffer.from(p, 'utf8') : p;
    // each part with its length first: ("ab","c") and ("a","bc") differ
    h.update(`${b.length}:`);
    h.update(b);
  }
  return h.digest('hex');
};

function headerValue(h: string | string[] | undefined): string | undefined {
  return Array.isArray(h) ? h.join(', ') : h;
}

export function bodyBytes(body: unknown): Buffer {
  if (body === undefined || body === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(body)) return body;
  if (typeof body === 'string') return Buffer.from(body, 'utf8');
  return Buffer.from(JSON.stringify(body), 'utf8');
}

export function defaultFingerprint(req: HttpRequestInfo): string {
  return sha256(req.method.toUpperCase(), req.url, bodyBytes(req.body));
}

export function defaultCaller(req: HttpRequestInfo): string | undefined {
  const auth = headerValue(req.headers['authorization']);
  return auth ? 'auth:' + sha256(auth) : undefined;
}

export function resolve(o: IdempotencyOptions): Resolved {
  if (!o || !o.pool) throw new TypeError('idempotency middleware: options.pool (a pg.Pool) is required');
  const replay = new Set(DEFAULT_REPLAY_HEADERS);
  for (const h of o.replayHeaders ?? []) {
    const l = h.toLowerCase();
    if (!NEVER_STORED.has(l)) replay.add(l);
  }
  const maxStoredBody = o.maxStoredBody ?? 512 * 1024;
  if (maxStoredBody > 900 * 1024) throw new RangeError('maxStoredBody: eo stores results of at most 1 MB; keep it under 900 KiB');
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
    released: new Set(o.released ?? DEFAULT_RELEASED),
  };
}

/** An answer the middleware gives itself (not the handler's). */
export interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}): Answer => ({
  status,
  headers: { 'content-type': 'application/json; charset=utf-8', ...headers },
  body: Buffer.from(JSON.stringify(body)),
});

/** The stored form of a response: eo_http_answer reads http_status. */
interface Stored {
  http_status: number;
  headers: Record<string, string | string[]>;
  body: string;
  body_encoding: 'utf8' | 'base64';
  /** The request's fingerprint, for replayDone (absent from what earlier builds of the client stored). */
  request_fingerprint?: string;
}

/** A request the middleware holds a claim for: the transaction's client and the key. */
export class HeldRequest {
  readonly client: ClientLike;
  readonly key: string;
  readonly claim: Claim;
  private readonly o: Resolved;
  private readonly fingerprint: string;
  private finished = false;
  aborted = false;

  constructor(o: Resolved, client: ClientLike, key: string, c: Claim, fingerprint: string) {
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
  async finish(status: number, headers: Record<string, unknown>, body: Buffer): Promise<Answer | null> {
    if (this.finished) return null;
    this.finished = true;
    if (this.aborted || status >= 500 || this.o.released.has(status)) {
      await this.end('ROLLBACK');
      return null;
    }
    if (body.length > this.o.maxStoredBody) {
      await this.end('ROLLBACK');
      return json(500, { error: 'the response is too large to store for an Idempotency-Key replay; nothing was done' });
    }
    const stored: Stored = { http_status: status, headers: {}, ...encodeBody(body), request_fingerprint: this.fingerprint };
    for (const [name, v] of Object.entries(headers)) {
      const l = name.toLowerCase();
      if (!this.o.replayHeaders.has(l) || NEVER_STORED.has(l) || v === undefined) continue;
      stored.headers[l] = Array.isArray(v) ? v.map(String) : String(v);
    }
    try {
      await complete(this.client, this.key, stored, { scope: this.o.scope });
      if (this.aborted) throw new Error('the client went away');
      await this.client.query('COMMIT');
    } catch (e) {
      await this.end('ROLLBACK');
      return json(500, { error: 'the request was not committed; nothing was done' });
    }
    this.client.release();
    return null;
  }

  /** The handler threw, or the request ended without a response: roll back. */
  async abandon(): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    await this.end('ROLLBACK');
  }

  private async end(sql: 'ROLLBACK'): Promise<void> {
    try {
      await this.client.query(sql);
      this.client.release();
    } catch (e) {
      this.client.release(e as Error); // a broken connection is not given back to the pool
    }
  }
}

function encodeBody(body: Buffer): Pick<Stored, 'body' | 'body_encoding'> {
  const text = body.toString('utf8');
  // jsonb holds valid UTF-8 without NUL; anything else goes as base64
  if (!text.includes('\u0000') && Buffer.from(text, 'utf8').equals(body)) return { body: text, body_encoding: 'utf8' };
  return { body: body.toString('base64'), body_encoding: 'base64' };
}

/** A stored response, replayed, with Idempotent-Replayed: true. */
function replay(result: unknown): Answer {
  const r = (result ?? {}) as Partial<Stored>;
  const status = Number.isInteger(r.http_status) && (r.http_status as number) >= 100 && (r.http_status as number) <= 599 ? (r.http_status as number) : 200;
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(r.headers ?? {})) {
    if (!NEVER_STORED.has(k.toLowerCase())) headers[k] = Array.isArray(v) ? v.join(', ') : String(v);
  }
  headers['idempotent-replayed'] = 'true';
  const body = typeof r.body === 'string' ? Buffer.from(r.body, r.body_encoding === 'base64' ? 'base64' : 'utf8') : Buffer.alloc(0);
  return { status, headers, body };
}

export type Begin = { kind: 'pass' } | { kind: 'answer'; answer: Answer } | { kind: 'held'; held: HeldRequest };

/**
 * Before the handler: the key from the header; eo_status, which answers a
 * retry of a done request; else BEGIN and the claim. Returns
 * what to do: pass the request on untouched, answer it here (replay, 409,
 * 422, 400, 410), or run the handler with the held transaction.
 */
export async function begin(o: Resolved, req: HttpRequestInfo & { raw?: unknown }, original: any): Promise<Begin> {
  if (!o.methods.has(req.method.toUpperCase())) return { kind: 'pass' };
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
  let c: Claim;
  try {
    const done = replayDone(await status(client, key, { scope: o.scope, waitMs: o.waitMs }), fingerprint);
    if (done !== null) {
      client.release();
      return { kind: 'answer', answer: done };
    }
    await client.query('BEGIN');
    c = await claim(client, key, { fingerprint, scope: o.scope, waitMs: o.waitMs });
  } catch (e) {
    try {
      await client.query('ROLLBACK');
      client.release();
    } catch (re) {
      client.release(re as Error);
    }
    return { kind: 'answer', answer: refusal(o, e) };
  }
  if (c.status === 'claimed') return { kind: 'held', held: new HeldRequest(o, client, key, c, fingerprint) };
  try {
    await client.query('ROLLBACK');
    client.release();
  } catch (re) {
    client.release(re as Error);
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
      throw new EoError(`eo_claim answered "${String(c.status)}", a status this client does not know`);
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
function replayDone(st: KeyStatus | null, fingerprint: string): Answer | null {
  if (st === null || st.state !== 'done' || typeof st.result !== 'object' || st.result === null) return null;
  if ((st.result as Partial<Stored>).request_fingerprint !== fingerprint) return null;
  return replay(st.result);
}

function inFlight(secs: number): Answer {
  return json(409, { error: 'a request with this Idempotency-Key is in flight; retry later' }, { 'retry-after': String(secs) });
}

/** eo_claim's errors as answers (eo_http_error_status's mapping); others are rethrown. */
function refusal(o: Resolved, e: unknown): Answer {
  if (e instanceof FingerprintMismatchError) {
    return json(422, { error: 'this Idempotency-Key was used with a different request' });
  }
  if (e instanceof BadKeyError) return json(400, { error: 'the Idempotency-Key was refused: ' + e.message });
  if (e instanceof RejectedError) {
    return json(422, { error: 'the request with this Idempotency-Key failed for good', sqlstate: e.sqlstate }, { 'idempotent-replayed': 'true' });
  }
  if (e instanceof RetryableError) {
    // 55P03: waited waitMs for a request in flight with this key
    if (e.sqlstate === '55P03') return inFlight(o.retryAfterSeconds);
    return json(503, { error: 'try again' }, { 'retry-after': String(o.retryAfterSeconds) });
  }
  throw e;
}
