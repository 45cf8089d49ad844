// The same small API under Express and under Fastify, for test/http.test.js.
'use strict';
const express = require('express');
const Fastify = require('fastify');
const eo = require('..');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A handler: given the transaction's client and the request's JSON body,
// returns [status, body, headers]. `slow` waits, `boom` throws after writing.
async function createOrder(client, body) {
  const { rows } = await client.query('INSERT INTO orders (item, qty) VALUES ($1, $2) RETURNING id', [body.item, body.qty]);
  if (body.slowMs) await sleep(body.slowMs);
  if (body.boom) throw new Error('handler failed');
  if (body.fail5xx) return [503, { error: 'upstream down' }, {}];
  if (body.status) return [body.status, { error: 'refused' }, {}];
  return [201, { id: Number(rows[0].id), item: body.item }, { location: `/orders/${rows[0].id}`, 'set-cookie': 'session=secret', 'x-internal': 'no' }];
}

async function expressServer(options) {
  const app = express();
  app.use(express.json({ limit: '2mb' }));
  app.use(eo.expressIdempotency(options));
  app.post('/orders', async (req, res) => {
    const [status, body, headers] = await createOrder(req.eo ? req.eo.client : options.pool, req.body);
    res.status(status).set(headers).json(body);
  });
  app.use(eo.expressIdempotencyErrors());
  return listen(app);
}

function listen(handler) {
  const http = require('node:http');
  const server = http.createServer(handler);
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }) })));
}

async function fastifyServer(options) {
  const app = Fastify({ bodyLimit: 2 * 1024 * 1024 });
  eo.fastifyIdempotency(app, options);
  app.post('/orders', async (request, reply) => {
    const [status, body, headers] = await createOrder(request.eoClient || options.pool, request.body);
    reply.code(status).headers(headers);
    return body;
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { url: `http://127.0.0.1:${app.server.address().port}`, close: () => app.close() };
}

module.exports = { expressServer, fastifyServer, sleep };
