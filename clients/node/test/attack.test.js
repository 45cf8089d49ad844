'use strict';
// An attack round: a hostile HTTP client, and a hostile database owner.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const pg = require('pg');
const eo = require('..');
const { setup, base, APP } = require('./helpers');
const { expressServer, fastifyServer } = require('./servers');

let env, pool, servers;
before(async () => {
  env = await setup('attack');
  pool = env.pool();
  await pool.query('CREATE TABLE orders (id bigserial PRIMARY KEY, item text, qty int)');
  servers = [await expressServer({ pool }), await fastifyServer({ pool })];
});
after(async () => {
  for (const s of servers) await s.close();
  await env.teardown();
});

// A caller by default (Bearer tester); a header given as undefined is not sent.
const post = async (url, body, headers) => {
  const h = { 'content-type': 'application/json', authorization: 'Bearer tester', ...headers };
  for (const k of Object.keys(h)) if (h[k] === undefined) delete h[k];
  const r = await fetch(url + '/orders', { method: 'POST', headers: h, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: r.status, headers: r.headers, text: await r.text() };
};

test("a caller's key never reaches another caller's result", async () => {
  for (const [i, s] of servers.entries()) {
    const alice = await post(s.url, { item: 'alice-secret', qty: 1 }, { 'idempotency-key': `shared-${i}`, authorization: 'Bearer alice' });
    assert.equal(alice.status, 201);
    // mallory uses alice's key, with alice's body: a new request of his own, not alice's answer
    const mallory = await post(s.url, { item: 'alice-secret', qty: 1 }, { 'idempotency-key': `shared-${i}`, authorization: 'Bearer mallory' });
    assert.equal(mallory.status, 201);
    assert.equal(mallory.headers.get('idempotent-replayed'), null);
    assert.notEqual(mallory.text, alice.text);
    // keys built to collide after a naive join ("a" + ":b" = "a:" + "b") do not
    const x = await post(s.url, { item: 'x', qty: 1 }, { 'idempotency-key': `:b-${i}`, authorization: 'a' });
    const y = await post(s.url, { item: 'x', qty: 1 }, { 'idempotency-key': `b-${i}`, authorization: 'a:' });
    assert.equal(y.headers.get('idempotent-replayed'), null);
    assert.notEqual(x.text, y.text);
  }
});

test('a key without a caller is 401: no anonymous namespace where one client reads another\'s response', async () => {
  for (const [i, s] of servers.entries()) {
    for (const who of [undefined, '']) {
      const a = await post(s.url, { item: 'anon-secret', qty: 1 }, { 'idempotency-key': `anon-${i}`, authorization: who });
      assert.equal(a.status, 401, a.text);
    }
  }
  assert.equal((await pool.query("SELECT count(*)::int AS n FROM orders WHERE item = 'anon-secret'")).rows[0].n, 0);
});

test('401, 403, 408, 425 and 429 answers are rolled back and not stored: the key is free for the retry', async () => {
  for (const [i, s] of servers.entries()) {
    for (const status of [401, 403, 408, 425, 429]) {
      const item = `released-${status}-${i}`;
      const a = await post(s.url, { item, qty: 1, status }, { 'idempotency-key': item });
      assert.equal(a.status, status);
      assert.equal(a.headers.get('idempotent-replayed'), null);
      assert.equal((await pool.query('SELECT count(*)::int AS n FROM orders WHERE item = $1', [item])).rows[0].n, 0);
      const b = await post(s.url, { item, qty: 1 }, { 'idempotency-key': item });
      assert.equal(b.status, 201, `${status} then ${b.status}: ${b.text}`);
      assert.equal(b.headers.get('idempotent-replayed'), null);
    }
  }
});

test('huge keys, huge bodies and key-shaped garbage get clear answers, never 500', async () => {
  for (const [i, s] of servers.entries()) {
    assert.equal((await post(s.url, { item: 'k', qty: 1 }, { 'idempotency-key': 'k'.repeat(8000) })).status, 400);
    // a body just under the parsers' limit: stored as a hash in the fingerprint, never in eo
    const big = { item: 'big', qty: 1, pad: 'p'.repeat(1500 * 1024) };
    const r = await post(s.url, big, { 'idempotency-key': `big-body-${i}` });
    assert.equal(r.status, 201);
    assert.equal((await post(s.url, big, { 'idempotency-key': `big-body-${i}` })).headers.get('idempotent-replayed'), 'true');
    // percent signs, quotes, NUL-looking text and SQL in the key are only bytes of a hash
    for (const k of ["'; DROP TABLE orders; --", '%00%27', 'é\u00e9\u{1F600}', '   ']) {
      const a = await post(s.url, { item: 'weird', qty: 1 }, { 'idempotency-key': encodeURIComponent(k) + i });
      assert.ok([201, 400].includes(a.status), `${k}: ${a.status}`);
    }
  }
  assert.ok((await pool.query('SELECT count(*) FROM orders')).rows[0].count > 0);
});

test("a request's headers are not replayed into a response; the stored headers are the allow-list's", async () => {
  for (const [i, s] of servers.entries()) {
    const h = { 'idempotency-key': `hdr-${i}`, 'set-cookie': 'session=evil', 'x-internal': 'evil', location: 'https://evil.example', 'idempotent-replayed': 'false' };
    const a = await post(s.url, { item: 'hdr', qty: 1 }, h);
    const b = await post(s.url, { item: 'hdr', qty: 1 }, h);
    assert.equal(b.headers.get('idempotent-replayed'), 'true');
    assert.equal(b.headers.get('set-cookie'), null);
    assert.equal(b.headers.get('x-internal'), null);
    assert.equal(b.headers.get('location'), a.headers.get('location'));
    assert.ok(!b.headers.get('location').includes('evil'));
  }
  // the options cannot put credentials on the allow-list
  const { resolve } = require('../dist/http');
  const o = resolve({ pool, replayHeaders: ['Set-Cookie', 'Authorization', 'WWW-Authenticate', 'X-Request-Id'] });
  assert.deepEqual(['set-cookie', 'authorization', 'www-authenticate'].filter((h) => o.replayHeaders.has(h)), []);
  assert.ok(o.replayHeaders.has('x-request-id'));
});

test("the database owner's search_path and look-alikes change nothing the client calls", async () => {
  // a database whose owner (not a superuser) fills search_path with look-alikes
  const db = env.db + '_owned';
  await env.su.query(`DO $$ BEGIN CREATE ROLE eo_node_owner LOGIN PASSWORD '${APP.password}'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
  await env.su.query(`DROP DATABASE IF EXISTS ${db}`);
  await env.su.query(`CREATE DATABASE ${db} OWNER eo_node_owner`);
  const su = new pg.Client({ ...base, database: db });
  await su.connect();
  await su.query(`CREATE SCHEMA eo; CREATE EXTENSION eo SCHEMA eo;
    GRANT USAGE ON SCHEMA eo TO ${APP.user};
    GRANT EXECUTE ON FUNCTION eo.eo_claim(text, text, interval, text), eo.eo_complete(text, jsonb, bigint, text),
      eo.eo_fail(text, text, bigint, interval, text, text, boolean), eo.eo_extend(text, bigint, interval, text),
      eo.eo_status(text, text), eo.eo_recovery_point(text, bigint, text, jsonb, text) TO ${APP.user}`);
  await su.end();
  const owner = new pg.Client({ ...base, user: 'eo_node_owner', password: APP.password, database: db });
  await owner.connect();
  await owner.query(`CREATE SCHEMA trap; GRANT USAGE ON SCHEMA trap TO PUBLIC;
    CREATE TABLE trap.calls (what text); GRANT INSERT ON trap.calls TO PUBLIC;
    CREATE FUNCTION trap.eo_claim(key text, fingerprint text DEFAULT NULL, lease interval DEFAULT NULL, scope text DEFAULT NULL)
      RETURNS TABLE (status text, result jsonb, attempts int, lease_token bigint, lease_expires_at timestamptz,
                     result_expired bool, recovery_point text, recovery_state jsonb)
      LANGUAGE sql AS $f$ INSERT INTO trap.calls VALUES ('eo_claim ' || key);
        SELECT 'duplicate', '{"stolen":true}'::jsonb, 1, NULL::bigint, NULL::timestamptz, false, NULL, NULL::jsonb $f$;
    CREATE FUNCTION trap.text_eq(text, text) RETURNS bool LANGUAGE sql AS $f$ INSERT INTO trap.calls VALUES ('=') RETURNING true $f$;
    CREATE OPERATOR trap.= (LEFTARG = text, RIGHTARG = text, FUNCTION = trap.text_eq);
    CREATE FUNCTION trap.make_interval(secs float8) RETURNS interval LANGUAGE sql AS $f$ INSERT INTO trap.calls VALUES ('make_interval') RETURNING interval '1 year' $f$;
    CREATE FUNCTION trap.quote_ident(text) RETURNS text LANGUAGE sql AS $f$ INSERT INTO trap.calls VALUES ('quote_ident') RETURNING 'trap' $f$;
    ALTER DATABASE ${db} SET search_path = trap, eo, public;
    ALTER DATABASE ${db} SET DateStyle = 'SQL, DMY'`);
  const p = new pg.Pool({ ...base, ...APP, database: db, max: 2 });
  try {
    const c = await eo.transaction(p, async (db) => {
      const c = await eo.claim(db, 'owned:1', { fingerprint: 'f' });
      await c.complete({ real: true });
      return c;
    });
    assert.equal(c.status, 'claimed');
    const l = await eo.claim(p, 'owned:2', { leaseMs: 30000 });
    assert.equal(l.status, 'claimed');
    assert.ok(l.leaseExpiresAt - Date.now() > 25000 && l.leaseExpiresAt - Date.now() < 35000, String(l.leaseExpiresAt));
    const s = await eo.status(p, 'owned:1');
    assert.deepEqual(s.result, { real: true });
    assert.ok(Math.abs(s.updatedAt - Date.now()) < 60000);
    assert.equal((await owner.query('SELECT count(*)::int AS n FROM trap.calls')).rows[0].n, 0);
    // a look-alike in eo's own schema: refused before any call (the client's own caches are per connection)
    await su.connect().catch(() => {});
    const su2 = new pg.Client({ ...base, database: db });
    await su2.connect();
    await su2.query("CREATE FUNCTION eo.eo_claim(key text, fingerprint text, lease interval, scope text, x int DEFAULT 0) RETURNS int LANGUAGE sql AS 'SELECT 1'");
    await su2.end();
    const fresh = new pg.Pool({ ...base, ...APP, database: db, max: 1 });
    await assert.rejects(eo.status(fresh, 'owned:1'), (e) => e instanceof eo.EoSetupError && /not eo's own/.test(e.message));
    await fresh.end();
  } finally {
    await p.end();
    await owner.end();
    const a = new pg.Client({ ...base, database: 'postgres' });
    await a.connect();
    await a.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    await a.end();
  }
});
