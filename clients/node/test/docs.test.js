'use strict';
// docs/node.md's examples are the files of examples/, word for word; this runs them.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const Module = require('node:module');
const { setup } = require('./helpers');

// the examples require('eo-client'), as an installed package is named
const origResolve = Module._resolveFilename;
Module._resolveFilename = function (req, ...rest) {
  return origResolve.call(this, req === 'eo-client' ? path.join(__dirname, '..') : req, ...rest);
};

let env, pool;
before(async () => {
  env = await setup('docs');
  pool = env.pool();
  await pool.query('CREATE TABLE orders (id bigserial PRIMARY KEY, item text, qty int); CREATE TABLE payments (order_id text PRIMARY KEY, amount int)');
  await env.su.query("SELECT eo_scope_create('billing', owner => 'eo_node_app')");
});
after(() => env.teardown());

test('docs/node.md shows examples/*.js as they are', () => {
  const doc = fs.readFileSync(path.join(__dirname, '../../../docs/node.md'), 'utf8');
  const re = /<!-- example: (examples\/[\w.]+) -->\n```js\n([\s\S]*?)```/g;
  const seen = [];
  for (const m of doc.matchAll(re)) {
    assert.equal(m[2], fs.readFileSync(path.join(__dirname, '..', m[1]), 'utf8'), m[1]);
    seen.push(m[1]);
  }
  assert.deepEqual(seen.sort(), ['examples/consumer.js', 'examples/handler.js', 'examples/lease.js']);
});

test('the handler: a retry replays', async () => {
  const { makeApp } = require('../examples/handler.js');
  const server = makeApp(pool).listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const url = `http://127.0.0.1:${server.address().port}/orders`;
  const send = () => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'doc-1', 'x-api-client': 'shop-7' }, body: '{"item":"tea","qty":2}' });
  const a = await send();
  const b = await send();
  assert.deepEqual([a.status, b.status, b.headers.get('idempotent-replayed')], [201, 201, 'true']);
  assert.equal(await a.text(), await b.text());
  server.close();
});

test('the consumer: a redelivery is acknowledged and applied once', async () => {
  const { onMessage } = require('../examples/consumer.js');
  let acks = 0;
  const msg = { id: 'evt-77', order: '77', amount: 5 };
  assert.equal(await onMessage(pool, msg, async () => acks++), 'claimed');
  assert.equal(await onMessage(pool, msg, async () => acks++), 'duplicate');
  assert.equal(acks, 2);
  assert.equal((await pool.query('SELECT count(*)::int AS n FROM payments')).rows[0].n, 1);
});

test('lease mode: the outside call is made once', async () => {
  const { refund } = require('../examples/lease.js');
  let calls = 0;
  const cards = { refund: async () => ({ id: `re_${++calls}` }) };
  assert.deepEqual(await refund(pool, cards, 42), { refund: 're_1' });
  assert.deepEqual(await refund(pool, cards, 42), { refund: 're_1' });
  assert.equal(calls, 1);
});
