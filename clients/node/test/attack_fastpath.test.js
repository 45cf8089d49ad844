'use strict';
// Attacks on 40ea3fe's one-read replay (eo_status before BEGIN) and the
// lock_timeout set and restored inside the claim's / eo_status's statement.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');
const eo = require('..');
const { setup } = require('./helpers');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let env, pool, srv, quick;

async function server(options) {
  const app = express();
  app.use(express.json());
  app.use(eo.expressIdempotency(options));
  app.post('/orders', async (req, res) => {
    const c = req.eo.client;
    const lt = (await c.query('SHOW lock_timeout')).rows[0].lock_timeout;
    const { rows } = await c.query('INSERT INTO orders (item, qty) VALUES ($1, $2) RETURNING id', [req.body.item, req.body.qty]);
    if (req.body.slowMs) await sleep(req.body.slowMs);
    res.status(201).json({ id: Number(rows[0].id), item: req.body.item, handler_lock_timeout: lt });
  });
  const http = require('node:http');
  const s = http.createServer(app);
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${s.address().port}`, close: () => new Promise((r) => { s.closeAllConnections(); s.close(r); }) };
}

before(async () => {
  env = await setup('attackfp');
  await env.su.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, item text, qty int);
    GRANT ALL ON orders, orders_id_seq TO eo_node_app;
    ALTER ROLE eo_node_app IN DATABASE ${env.db} SET lock_timeout = '7s'`);
  pool = env.pool({ max: 6 });
  srv = await server({ pool, waitMs: 3000 });
  quick = await server({ pool, waitMs: 100 });
});
after(async () => {
  await srv.close();
  await quick.close();
  await env.su.query(`ALTER ROLE eo_node_app IN DATABASE ${env.db} RESET lock_timeout`);
  await env.teardown();
});

const post = async (url, body, headers = {}) => {
  const r = await fetch(url + '/orders', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer alice', ...headers },
    body: JSON.stringify(body),
  });
  return { status: r.status, replayed: r.headers.get('idempotent-replayed'), text: await r.text() };
};
const count = async (item) => (await pool.query('SELECT count(*)::int AS n FROM orders WHERE item = $1', [item])).rows[0].n;

test('race: a retry while the first is in flight waits and replays; another body is 422; short wait is 409', async () => {
  const first = post(srv.url, { item: 'race', qty: 1, slowMs: 1200 }, { 'idempotency-key': 'race-1' });
  await sleep(200);
  const [same, other, short] = await Promise.all([
    post(srv.url, { item: 'race', qty: 1, slowMs: 1200 }, { 'idempotency-key': 'race-1' }),
    post(srv.url, { item: 'race', qty: 2, slowMs: 1200 }, { 'idempotency-key': 'race-1' }),
    post(quick.url, { item: 'race', qty: 1, slowMs: 1200 }, { 'idempotency-key': 'race-1' }),
  ]);
  const a = await first;
  assert.equal(a.status, 201);
  assert.equal(same.replayed, 'true');
  assert.equal(same.text, a.text);
  assert.equal(other.status, 422);
  assert.equal(short.status, 409);
  assert.equal(await count('race'), 1);
  // the handler's own statements ran under the role's lock_timeout, not the claim's wait
  assert.equal(JSON.parse(a.text).handler_lock_timeout, '7s');
});

test('after done: same body replays from the fast path; another caller with the same key and body is a new request', async () => {
  const a = await post(srv.url, { item: 'done', qty: 1 }, { 'idempotency-key': 'done-1' });
  const b = await post(srv.url, { item: 'done', qty: 1 }, { 'idempotency-key': 'done-1' });
  const c = await post(srv.url, { item: 'done', qty: 1 }, { 'idempotency-key': 'done-1', authorization: 'Bearer mallory' });
  const d = await post(srv.url, { item: 'done', qty: 1, extra: 'x' }, { 'idempotency-key': 'done-1' });
  // a query string is part of the fingerprint
  const e = await fetch(srv.url + '/orders?x=1', { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer alice', 'idempotency-key': 'done-1' }, body: JSON.stringify({ item: 'done', qty: 1 }) });
  assert.equal(b.replayed, 'true');
  assert.equal(b.text, a.text);
  assert.equal(c.replayed, null);
  assert.notEqual(c.text, a.text);
  assert.equal(d.status, 422);
  assert.equal(e.status, 422);
  assert.equal(await count('done'), 2);
});

test('lock_timeout: every connection of the pool is back at the role\'s value after waits, replays and refusals', async () => {
  const rows = [];
  const clients = [];
  for (let i = 0; i < 6; i++) clients.push(await pool.connect());
  for (const c of clients) rows.push((await c.query('SHOW lock_timeout')).rows[0].lock_timeout);
  for (const c of clients) c.release();
  assert.deepEqual([...new Set(rows)], ['7s']);
});
