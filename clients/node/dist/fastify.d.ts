import { IdempotencyOptions } from './http';
type Instance = any;
/**
 * Adds the hooks to `fastify` (the root instance, or the instance of a
 * plugin whose routes should have them): preHandler claims, onSend commits
 * (below 500) or rolls back, onError, onRequestAbort and onResponse roll
 * back whatever is still open.
 */
export declare function fastifyIdempotency(fastify: Instance, options: IdempotencyOptions): void;
export {};
