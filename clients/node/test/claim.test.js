'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const eo = require('..');
const { setup } = require('./helpers');

let env, pool;
before(async () => {
  env = await setup('claim');
  pool = env.pool();
});
after(() => env.teardown());

const tx = (fn, p = pool) => eo.transaction(p, fn);

test('claimed, complete, then duplicate with the result', async () => {
  const c = await tx(async (db) => {
    const c = await eo.claim(db, 'order:1', { fingerprint: 'fp1' });
    assert.equal(c.status, 'claimed');
    assert.equal(c.attempts, 1);
    await c.complete({ id: 7 });
    return c;
  });
  assert.equal(c.token, null);
  const d = await tx((db) => eo.claim(db, 'order:1', { fingerprint: 'fp1' }));
  assert.equal(d.status, 'duplicate');
  assert.deepEqual(d.result, { id: 7 });
  const s = await eo.status(pool, 'order:1');
  assert.equal(s.state, 'done');
  assert.equal(await eo.status(pool, 'never-seen'), null);
});

test('a transaction-mode claim outside BEGIN is refused before eo is called', async () => {
  const db = await pool.connect();
  try {
    await assert.rejects(eo.claim(db, 'no-tx'), (e) => e instanceof eo.EoError && /BEGIN/.test(e.message));
  } finally {
    db.release();
  }
  assert.equal(await eo.status(pool, 'no-tx'), null);
});

test('rollback leaves nothing: claimed again', async () => {
  await assert.rejects(tx(async (db) => {
    assert.equal((await eo.claim(db, 'rb:1')).status, 'claimed');
    throw new Error('boom');
  }), /boom/);
  assert.equal(await tx(async (db) => (await eo.claim(db, 'rb:1')).status), 'claimed');
});

test('fingerprint mismatch is FingerprintMismatchError', async () => {
  await tx((db) => eo.claim(db, 'fp:1', { fingerprint: 'a' }));
  await assert.rejects(tx((db) => eo.claim(db, 'fp:1', { fingerprint: 'b' })), (e) => e instanceof eo.FingerprintMismatchError && e.sqlstate === '22000');
});

test('bad keys are BadKeyError', async () => {
  for (const k of ['', 'x'.repeat(513), null]) {
    await assert.rejects(tx((db) => eo.claim(db, k)), (e) => e instanceof eo.BadKeyError, String(k).slice(0, 10));
  }
  await assert.rejects(tx((db) => eo.claim(db, 'k', { fingerprint: 'f'.repeat(513) })), eo.BadKeyError);
});

test('fail: retry, busy while retry_after, dead after max_attempts, DeadError in lease mode', async () => {
  assert.equal(await eo.fail(pool, 'f:1', 'upstream 503', { retryAfterMs: 60000 }), 'retry');
  const b = await tx((db) => eo.claim(db, 'f:1'));
  assert.equal(b.status, 'busy');
  assert.ok(b.leaseExpiresAt > new Date());
  for (let i = 0; i < 4; i++) await eo.fail(pool, 'f:2', 'no');
  assert.equal(await eo.fail(pool, 'f:2', 'no'), 'dead');
  assert.equal((await tx((db) => eo.claim(db, 'f:2'))).status, 'dead');
  await assert.rejects(eo.withLease(pool, 'f:2', { leaseMs: 5000 }, async () => 1), eo.DeadError);
});

test('a final failure is rejected, and the claim replays it as RejectedError', async () => {
  assert.equal(await eo.fail(pool, 'rej:1', 'amount must be positive', { sqlstate: '23514' }), 'rejected');
  await assert.rejects(tx((db) => eo.claim(db, 'rej:1')), (e) => e instanceof eo.RejectedError && e.sqlstate === '23514' && e.message === 'amount must be positive');
  // even with a SQLSTATE of eo's own refusals (class 22 is final): still RejectedError, not BadKeyError
  assert.equal(await eo.fail(pool, 'rej:2', 'bad input', { sqlstate: '22023' }), 'rejected');
  await assert.rejects(tx((db) => eo.claim(db, 'rej:2')), (e) => e instanceof eo.RejectedError && e.sqlstate === '22023');
});

test('complete of a key not held is NotHeldError; another role\'s key is ForbiddenKeyError; a huge result TooLargeError', async () => {
  await assert.rejects(tx((db) => eo.complete(db, 'nh:1', {})), eo.NotHeldError);
  await tx((db) => eo.claim(db, 'mine:1'));
  const other = env.pool({ user: 'eo_node_other' });
  await assert.rejects(tx((db) => eo.claim(db, 'mine:1'), other), eo.ForbiddenKeyError);
  await assert.rejects(tx(async (db) => {
    const c = await eo.claim(db, 'big:1');
    await c.complete({ s: 'x'.repeat(1100 * 1024) });
  }), eo.TooLargeError);
});

test('a claim that waits on a transaction holding the key: RetryableError after waitMs, then duplicate', async () => {
  const holder = await pool.connect();
  await holder.query('BEGIN');
  await eo.claim(holder, 'wait:1');
  await assert.rejects(tx((db) => eo.claim(db, 'wait:1', { waitMs: 200 })), (e) => e instanceof eo.RetryableError && e.sqlstate === '55P03');
  await holder.query('COMMIT');
  holder.release();
  assert.equal((await tx((db) => eo.claim(db, 'wait:1', { waitMs: 200 }))).status, 'duplicate');
});

test('eo_status waits at most waitMs for a claim in flight; lock_timeout is put back after a wait, with a row or none', async () => {
  const holder = await pool.connect();
  await holder.query('BEGIN');
  await eo.claim(holder, 'sw:1');
  const db = await pool.connect();
  try {
    await db.query("SET lock_timeout = '7s'");
    await assert.rejects(eo.status(db, 'sw:1', { waitMs: 200 }), (e) => e instanceof eo.RetryableError && e.sqlstate === '55P03');
    await db.query('BEGIN');
    assert.equal(await eo.status(db, 'sw:none', { waitMs: 200 }), null);
    assert.equal((await db.query('SHOW lock_timeout')).rows[0].lock_timeout, '7s');
    assert.equal((await eo.claim(db, 'sw:2', { waitMs: 200 })).status, 'claimed');
    assert.equal((await db.query('SHOW lock_timeout')).rows[0].lock_timeout, '7s');
    await db.query('ROLLBACK');
    await holder.query('COMMIT');
    assert.equal((await eo.status(db, 'sw:1', { waitMs: 200 })).state, 'done');
  } finally {
    await db.query('RESET lock_timeout');
    db.release();
    holder.release();
  }
});

test('lease mode: busy, takeover after expiry, the stale holder refused (StaleTokenError)', async () => {
  const first = await eo.claim(pool, 'lease:1', { leaseMs: 1000 });
  assert.equal(first.status, 'claimed');
  assert.ok(Number.isSafeInteger(first.token));
  const busy = await eo.claim(pool, 'lease:1', { leaseMs: 1000 });
  assert.equal(busy.status, 'busy');
  await new Promise((r) => setTimeout(r, 1300));
  const second = await eo.claim(pool, 'lease:1', { leaseMs: 60000 });
  assert.equal(second.status, 'claimed');
  assert.equal(second.attempts, 2);
  assert.ok(second.token > first.token);
  await assert.rejects(first.complete({ by: 'first' }), eo.StaleTokenError);
  await assert.rejects(first.extend(1000), eo.StaleTokenError);
  await assert.rejects(first.recoveryPoint('x'), eo.StaleTokenError);
  await second.recoveryPoint('charged', { charge: 'ch_1' });
  await second.extend(60000);
  await second.complete({ by: 'second' });
  const d = await eo.claim(pool, 'lease:1', { leaseMs: 1000 });
  assert.deepEqual([d.status, d.result], ['duplicate', { by: 'second' }]);
});

test('a lease-mode claim inside a transaction is refused', async () => {
  await assert.rejects(tx((db) => eo.claim(db, 'lease:tx', { leaseMs: 1000 })), /outside a transaction/);
});

test('withLease: heartbeat keeps the lease while the work outlasts it; BusyError meanwhile', async () => {
  let busyErr;
  const out = await eo.withLease(pool, 'wl:1', { leaseMs: 1000, heartbeatMs: 250 }, async (lease) => {
    await new Promise((r) => setTimeout(r, 1600));
    busyErr = await eo.withLease(pool, 'wl:1', { leaseMs: 1000 }, async () => 'never').catch((e) => e);
    lease.check();
    return { ok: lease.token };
  });
  assert.equal(out.status, 'done');
  assert.ok(busyErr instanceof eo.BusyError, String(busyErr));
  assert.ok(busyErr.retryAt instanceof Date);
  const d = await eo.withLease(pool, 'wl:1', { leaseMs: 1000 }, async () => 'never');
  assert.equal(d.status, 'duplicate');
  assert.deepEqual(d.result, out.result);
});

test('withLease: a holder taken over is aborted and its result is not stored', async () => {
  let aborted = false;
  const p = eo.withLease(pool, 'wl:2', { leaseMs: 1000, heartbeatMs: 1500 }, async (lease) => {
    lease.signal.addEventListener('abort', () => (aborted = true));
    // stalls past its lease (its heartbeat is late); another worker takes over
    await new Promise((r) => setTimeout(r, 1200));
    const other = await eo.claim(pool, 'wl:2', { leaseMs: 60000 });
    assert.equal(other.status, 'claimed');
    await other.complete({ by: 'taker' });
    await new Promise((r) => setTimeout(r, 700)); // the heartbeat (at 1.5 s) is refused now
    return { by: 'stalled' };
  });
  await assert.rejects(p, eo.StaleTokenError);
  assert.ok(aborted);
  assert.deepEqual((await eo.status(pool, 'wl:2')).result, { by: 'taker' });
});

test('withLease: recovery point survives a failed attempt; the next holder resumes', async () => {
  await assert.rejects(eo.withLease(pool, 'wl:3', { leaseMs: 5000 }, async (lease) => {
    assert.equal(lease.recovery, null);
    await lease.recoveryPoint('charged', { charge: 'ch_9' });
    throw new Error('mail service down');
  }), /mail service down/);
  const s = await eo.status(pool, 'wl:3');
  assert.equal(s.state, 'failed');
  assert.equal(s.lastError, 'mail service down');
  const out = await eo.withLease(pool, 'wl:3', { leaseMs: 5000 }, async (lease) => {
    assert.deepEqual(lease.recovery, { point: 'charged', state: { charge: 'ch_9' } });
    return 'mailed';
  });
  assert.equal(out.result, 'mailed');
});

test('inbox: redelivery is a duplicate, a crash before commit is redone, a final error is rejected', async () => {
  await pool.query('CREATE TABLE inbox_payments (order_id text PRIMARY KEY, amount int NOT NULL CHECK (amount > 0))');
  const handler = (db, m) => db.query('INSERT INTO inbox_payments VALUES ($1, $2)', [m.order, m.amount]);
  const m1 = { eventId: 'evt-1', order: '42', amount: 100 };
  assert.equal(await eo.applyMessage(pool, m1, handler), 'claimed');
  assert.equal(await eo.applyMessage(pool, m1, handler), 'duplicate');
  let crash = true;
  const flaky = async (db, m) => {
    await handler(db, m);
    if (crash) {
      crash = false;
      throw new Error('consumer crashed');
    }
  };
  const m2 = { eventId: 'evt-2', order: '43', amount: 5 };
  await assert.rejects(eo.applyMessage(pool, m2, flaky), /consumer crashed/);
  assert.equal(await eo.applyMessage(pool, m2, flaky), 'claimed');
  const bad = { eventId: 'evt-3', order: '44', amount: -1 };
  await assert.rejects(eo.applyMessage(pool, bad, handler), (e) => e.code === '23514');
  assert.equal(await eo.applyMessage(pool, bad, handler), 'rejected');
  // a batch with a redelivered, a repeated and a rejected message
  const batch = [
    { eventId: 'evt-5', order: '46', amount: 1 },
    m1,
    { eventId: 'evt-4', order: '45', amount: 1 },
    bad,
    { eventId: 'evt-5', order: '46', amount: 1 },
  ];
  assert.deepEqual(await eo.applyBatch(pool, batch, handler), ['claimed', 'duplicate', 'claimed', 'rejected', 'duplicate']);
  assert.deepEqual(await eo.applyBatch(pool, batch, handler), ['duplicate', 'duplicate', 'duplicate', 'rejected', 'duplicate']);
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM inbox_payments');
  assert.equal(rows[0].n, 4);
});

test('inbox with scopes: one event, two consumers', async () => {
  await env.su.query("SELECT eo_scope_create('billing', owner => 'eo_node_app'); SELECT eo_scope_create('mailer', owner => 'eo_node_app')");
  let n = 0;
  const h = async () => n++;
  assert.equal(await eo.applyMessage(pool, { eventId: 'e-9', scope: 'billing' }, h), 'claimed');
  assert.equal(await eo.applyMessage(pool, { eventId: 'e-9', scope: 'mailer' }, h), 'claimed');
  assert.equal(await eo.applyMessage(pool, { eventId: 'e-9', scope: 'mailer' }, h), 'duplicate');
  assert.equal(n, 2);
});
