import { IdempotencyOptions } from './http';
type Req = any;
type Res = any;
type Next = (err?: unknown) => void;
export declare function expressIdempotency(options: IdempotencyOptions): (req: Req, res: Res, next: Next) => void;
/**
 * An Express error handler to place after your routes: rolls back the
 * request's transaction when a handler fails before answering, then passes
 * the error on. Express's own error answer (500) rolls back too; this one
 * also covers handlers whose errors your error handler answers with 4xx.
 */
export declare function expressIdempotencyErrors(): (err: unknown, req: Req, _res: Res, next: Next) => void;
export {};
