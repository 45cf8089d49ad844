'use strict';
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { setup } = require('./helpers');
const { expressServer, fastifyServer, sleep } = require('./servers');
const eo = require('..');

let env, pool;
before(async () => {
  env = await setup('http');
  pool = env.pool({ max: 10 });
  await pool.query('CREATE TABLE orders (id bigserial PRIMARY KEY, item text, qty int)');
});
after(() => env.teardown());

const count = async (item) => (await pool.query('SELECT count(*)::int AS n FROM orders WHERE item = $1', [item])).rows[0].n;
const claimed = async () => (await env.su.query("SELECT count(*)::int AS n FROM eo_keys() WHERE key LIKE 'http:%' AND state IN ('c','p')")).rows[0].n;

async function post(url, body, headers = {}) {
  const r = await fetch(url + '/orders', { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer tester', ...headers }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, headers: r.headers, text };
}

for (const [name, make] of [['express', expressServer], ['fastify', fastifyServer]]) {
  describe(name, () => {
    let srv, strict;
    before(async () => {
      srv = await make({ pool });
      strict = await make({ pool, required: true, waitMs: 100, namespace: 'http' });
    });
    after(async () => {
      await srv.close();
      await strict.close();
    });

    test('a retried request replays the first response and changes nothing', async () => {
      const item = `${name}-retry`;
      const a = await post(srv.url, { item, qty: 1 }, { 'idempotency-key': `${name}-k1` });
      assert.equal(a.status, 201);
      assert.equal(a.headers.get('idempotent-replayed'), null);
      const b = await post(srv.url, { item, qty: 1 }, { 'idempotency-key': `${name}-k1` });
      assert.equal(b.status, 201);
      assert.equal(b.text, a.text);
      assert.equal(b.headers.get('idempotent-replayed'), 'true');
      assert.equal(b.headers.get('location'), a.headers.get('location'));
      assert.equal(b.headers.get('content-type'), a.headers.get('content-type'));
      assert.equal(b.headers.get('set-cookie'), null, 'Set-Cookie is never replayed');
      assert.equal(b.headers.get('x-internal'), null, 'only allow-listed headers are replayed');
      assert.equal(await count(item), 1);
    });

    test('a changed body under the same key is 422', async () => {
      const item = `${name}-422`;
      assert.equal((await post(srv.url, { item, qty: 1 }, { 'idempotency-key': `${name}-k2` })).status, 201);
      const r = await post(srv.url, { item, qty: 2 }, { 'idempotency-key': `${name}-k2` });
      assert.equal(r.status, 422);
      assert.equal(await count(item), 1);
    });

    test('two concurrent requests with one key: one effect, and a 409 with Retry-After (or the replay)', async () => {
      const item = `${name}-race`;
      const first = post(strict.url, { item, qty: 1, slowMs: 600 }, { 'idempotency-key': `${name}-k3` });
      await sleep(150);
      const second = await post(strict.url, { item, qty: 1, slowMs: 600 }, { 'idempotency-key': `${name}-k3` });
      const a = await first;
      assert.equal(a.status, 201);
      assert.equal(second.status, 409);
      assert.ok(Number(second.headers.get('retry-after')) >= 1);
      const third = await post(strict.url, { item, qty: 1, slowMs: 600 }, { 'idempotency-key': `${name}-k3` });
      assert.equal(third.status, 201);
      assert.equal(third.headers.get('idempotent-replayed'), 'true');
      assert.equal(await count(item), 1);
    });

    test('a handler that throws leaves nothing behind; the retry does the work', async () => {
      const item = `${name}-throw`;
      const a = await post(srv.url, { item, qty: 1, boom: true }, { 'idempotency-key': `${name}-k4` });
      assert.equal(a.status, 500);
      assert.equal(await count(item), 0);
      const b = await post(srv.url, { item, qty: 1 }, { 'idempotency-key': `${name}-k4` });
      assert.equal(b.status, 201);
      assert.equal(b.headers.get('idempotent-replayed'), null);
      assert.equal(await count(item), 1);
    });

    test('a 5xx answer is not stored: rolled back, and the retry does the work', async () => {
      const item = `${name}-5xx`;
      assert.equal((await post(srv.url, { item, qty: 1, fail5xx: true }, { 'idempotency-key': `${name}-k5` })).status, 503);
      assert.equal(await count(item), 0);
      assert.equal((await post(srv.url, { item, qty: 1 }, { 'idempotency-key': `${name}-k5` })).status, 201);
      assert.equal(await count(item), 1);
    });

    test('a client that disconnects mid-request leaves nothing claimed', async () => {
      const item = `${name}-gone`;
      const body = JSON.stringify({ item, qty: 1, slowMs: 500 });
      await new Promise((resolve) => {
        const u = new URL(srv.url);
        const req = http.request({ host: u.hostname, port: u.port, path: '/orders', method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), authorization: 'Bearer tester', 'idempotency-key': `${name}-k6` } });
        req.on('error', () => resolve());
        req.end(body);
        setTimeout(() => { req.destroy(); resolve(); }, 200);
      });
      await sleep(900);
      assert.equal(await count(item), 0);
      assert.equal(await claimed(), 0);
      const r = await post(srv.url, { item, qty: 1 }, { 'idempotency-key': `${name}-k6` });
      assert.equal(r.status, 201);
      assert.equal(await count(item), 1);
    });

    test('no key: passed through, or 400 where a key is required; a key too long is 400', async () => {
      const item = `${name}-nokey`;
      assert.equal((await post(srv.url, { item, qty: 1 })).status, 201);
      assert.equal((await post(strict.url, { item, qty: 1 })).status, 400);
      assert.equal((await post(srv.url, { item, qty: 1 }, { 'idempotency-key': 'x'.repeat(256) })).status, 400);
      assert.equal(await count(item), 1);
    });

    test('a retry is answered from one eo_status, outside a transaction', async () => {
      const sent = [];
      const rec = await make({ pool: recording(pool, sent) });
      try {
        const item = `${name}-one`;
        assert.equal((await post(rec.url, { item, qty: 1 }, { 'idempotency-key': `${name}-k-one` })).status, 201);
        const first = sent.filter((q) => !q.includes('pg_extension'));
        assert.match(first[0], /eo_status\(/);
        assert.match(first[0], /lock_timeout/);
        assert.ok(first.includes('BEGIN') && first.some((q) => q.includes('eo_claim(')), first.join('\n'));
        sent.length = 0;
        const r = await post(rec.url, { item, qty: 1 }, { 'idempotency-key': `${name}-k-one` });
        assert.equal(r.status, 201);
        assert.equal(r.headers.get('idempotent-replayed'), 'true');
        assert.equal(sent.length, 1, sent.join('\n'));
        assert.match(sent[0], /eo_status\(/);
        assert.equal(await count(item), 1);
      } finally {
        await rec.close();
      }
    });

    test('a response stored without its fingerprint (as earlier builds stored them) replays through the claim; another body is 422', async () => {
      const raw = `${name}-k-old`;
      const key = storedKey(raw);
      const fingerprint = eo.defaultFingerprint({ method: 'POST', url: '/orders', headers: {}, body: { item: 'old', qty: 1 } });
      await eo.transaction(pool, async (db) => {
        await eo.claim(db, key, { fingerprint });
        await eo.complete(db, key, { http_status: 201, headers: { 'content-type': 'application/json' }, body: '{"id":99}', body_encoding: 'utf8' });
      });
      const r = await post(srv.url, { item: 'old', qty: 1 }, { 'idempotency-key': raw });
      assert.equal(r.status, 201);
      assert.equal(r.text, '{"id":99}');
      assert.equal(r.headers.get('idempotent-replayed'), 'true');
      assert.equal((await post(srv.url, { item: 'old', qty: 2 }, { 'idempotency-key': raw })).status, 422);
      assert.equal(await count('old'), 0);
    });

    test('a dead key is 410', async () => {
      const srvKey = await deadKey(name);
      const r = await post(srv.url, { item: 'dead', qty: 1 }, { 'idempotency-key': srvKey });
      assert.equal(r.status, 410);
    });
  });
}

// The stored key of (the caller of "Bearer tester", raw), through the client's own hashing.
function storedKey(raw) {
  const { createHash } = require('node:crypto');
  const h = createHash('sha256');
  for (const p of [eo.defaultCaller({ headers: { authorization: 'Bearer tester' } }), raw]) {
    const b = Buffer.from(p);
    h.update(`${b.length}:`);
    h.update(b);
  }
  return `http:${h.digest('hex')}`;
}

// Makes the stored key of raw dead.
async function deadKey(name) {
  const raw = `dead-${name}`;
  const key = storedKey(raw);
  for (let i = 0; i < 5; i++) await eo.fail(pool, key, 'failed');
  return raw;
}

// A pool whose clients note the text of every statement they send into `sent`.
function recording(inner, sent) {
  return {
    query: (...a) => inner.query(...a),
    connect: async () => {
      const c = await inner.connect();
      const { query, release } = c;
      c.query = function (text, ...rest) {
        sent.push(typeof text === 'string' ? text : text.text);
        return query.call(this, text, ...rest);
      };
      c.release = function (e) {
        c.query = query;
        c.release = release;
        return release.call(this, e);
      };
      return c;
    },
  };
}
