/*
 * Idempotency-Key hooks for Fastify (4 and 5). The handler gets the
 * request's transaction as request.eoClient; the claim and its work
 * commit together in onSend, before the reply goes out.
 */
import { begin, HeldRequest, IdempotencyOptions, resolve } from './http';

type Instance = any;

/**
 * Adds the hooks to `fastify` (the root instance, or the instance of a
 * plugin whose routes should have them): preHandler claims, onSend commits
 * (below 500) or rolls back, onError, onRequestAbort and onResponse roll
 * back whatever is still open.
 */
export function fastifyIdempotency(fastify: Instance, options: IdempotencyOptions): void {
  const o = resolve(options);
  const HELD = Symbol('eo.held');
  fastify.decorateRequest('eoClient', null);
  fastify.decorateRequest('eo', null);

  fastify.addHook('preHandler', async (request: any, reply: any) => {
    const b = await begin(o, { method: request.method, url: request.url, headers: request.headers, body: request.body }, request);
    if (b.kind === 'pass') return;
    if (b.kind === 'answer') {
      reply.code(b.answer.status).headers(b.answer.headers);
      return reply.send(b.answer.body);
    }
    request[HELD] = b.held;
    request.eoClient = b.held.client;
    request.eo = { client: b.held.client, key: b.held.key, claim: b.held.claim };
    const raw = request.raw;
    raw.socket?.once?.('close', () => {
      if (!reply.raw.writableFinished) b.held.aborted = true;
    });
  });

  fastify.addHook('onError', async (request: any) => {
    const held: HeldRequest | undefined = request[HELD];
    if (held) await held.abandon();
  });

  fastify.addHook('onSend', async (request: any, reply: any, payload: unknown) => {
    const held: HeldRequest | undefined = request[HELD];
    if (!held) return payload;
    let body: Buffer;
    if (payload === null || payload === undefined) body = Buffer.alloc(0);
    else if (Buffer.isBuffer(payload)) body = payload;
    else if (typeof payload === 'string') body = Buffer.from(payload, 'utf8');
    else {
      // a stream cannot be stored for a replay
      await held.abandon();
      reply.code(500).header('content-type', 'application/json; charset=utf-8');
      return JSON.stringify({ error: 'a streamed response cannot be stored for an Idempotency-Key replay; nothing was done' });
    }
    const a = await held.finish(reply.statusCode, reply.getHeaders(), body);
    if (!a) return payload;
    reply.code(a.status).headers(a.headers);
    return a.body;
  });

  const cleanup = async (request: any) => {
    const held: HeldRequest | undefined = request[HELD];
    if (held) {
      held.aborted = true;
      await held.abandon();
    }
  };
  fastify.addHook('onRequestAbort', cleanup);
  fastify.addHook('onResponse', cleanup);
}
