import type { ClientLike, PoolLike } from './types';
import { Claim } from './claim';
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
export declare const DEFAULT_RELEASED: number[];
export declare const DEFAULT_REPLAY_HEADERS: string[];
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
export declare function bodyBytes(body: unknown): Buffer;
export declare function defaultFingerprint(req: HttpRequestInfo): string;
export declare function defaultCaller(req: HttpRequestInfo): string | undefined;
export declare function resolve(o: IdempotencyOptions): Resolved;
/** An answer the middleware gives itself (not the handler's). */
export interface Answer {
    status: number;
    headers: Record<string, string>;
    body: Buffer;
}
/** A request the middleware holds a claim for: the transaction's client and the key. */
export declare class HeldRequest {
    readonly client: ClientLike;
    readonly key: string;
    readonly claim: Claim;
    private readonly o;
    private readonly fingerprint;
    private finished;
    aborted: boolean;
    constructor(o: Resolved, client: ClientLike, key: string, c: Claim, fingerprint: string);
    /**
     * The handler's response is ready: below 500, store it with eo_complete and
     * COMMIT; 5xx, a `released` status (401, 403, 408, 425, 429), or the
     * client gone: ROLLBACK (nothing claimed, nothing stored). Returns the answer to send: the handler's, or a 500 if the
     * commit failed or the body is too large to store.
     */
    finish(status: number, headers: Record<string, unknown>, body: Buffer): Promise<Answer | null>;
    /** The handler threw, or the request ended without a response: roll back. */
    abandon(): Promise<void>;
    private end;
}
export type Begin = {
    kind: 'pass';
} | {
    kind: 'answer';
    answer: Answer;
} | {
    kind: 'held';
    held: HeldRequest;
};
/**
 * Before the handler: the key from the header; eo_status, which answers a
 * retry of a done request; else BEGIN and the claim. Returns
 * what to do: pass the request on untouched, answer it here (replay, 409,
 * 422, 400, 410), or run the handler with the held transaction.
 */
export declare function begin(o: Resolved, req: HttpRequestInfo & {
    raw?: unknown;
}, original: any): Promise<Begin>;
