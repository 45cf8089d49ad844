'use strict';
// Code run in the application's session is not the client's: a database
// owner's trigger on a table the handler writes, or one a role with only
// TRIGGER on an outbox adds (docs/security.md). PREPARE and DEALLOCATE work
// from PL/pgSQL, and prepared statements belong to the session, not to a
// transaction: had the client sent eo's statements by name (5431733, since
// reverted), such code could replace them, and every later eo call on that
// pooled connection would run its statements (forged replays for other
// callers' new keys, stored responses copied out). The triggers below
// replace every prepared statement of the session that calls eo; the
// client's statements are unnamed, parsed from its own text every time.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const pg = require('pg');
const eo = require('..');
const { base, APP } = require('./helpers');
const { expressServer } = require('./servers');

const DB = `eo_node_attack_prepared_${process.pid}`;
let su, owner;

before(async () => {
  const a = new pg.Client({ ...base, database: 'postgres' });
  await a.connect();
  await a.query(`DO $$ BEGIN CREATE ROLE ${APP.user} LOGIN PASSWORD '${APP.password}'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
  await a.query(`DO $$ BEGIN CREATE ROLE eo_node_owner2 LOGIN PASSWORD '${APP.password}'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
  await a.query(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
  await a.query(`CREATE DATABASE ${DB} OWNER eo_node_owner2`);
  await a.end();
  su = new pg.Client({ ...base, database: DB });
  await su.connect();
  // eo in a schema of its own, as docs/security.md advises
  await su.query(`CREATE SCHEMA eo; CREATE EXTENSION eo SCHEMA eo;
    GRANT USAGE ON SCHEMA eo TO ${APP.user};
    GRANT EXECUTE ON FUNCTION eo.eo_claim(text, text, interval, text), eo.eo_complete(text, jsonb, bigint, text),
      eo.eo_status(text, text) TO ${APP.user}`);
  owner = new pg.Client({ ...base, user: 'eo_node_owner2', password: APP.password, database: DB });
  await owner.connect();
  // the owner's table the app writes to (granted), with the owner's trigger
  await owner.query(`
    CREATE TABLE public.orders (id bigserial PRIMARY KEY, item text, qty int);
    GRANT SELECT, INSERT ON public.orders TO ${APP.user};
    GRANT USAGE ON SEQUENCE public.orders_id_seq TO ${APP.user};
    CREATE TABLE public.loot (what text, at timestamptz DEFAULT now());
    GRANT INSERT ON public.loot TO PUBLIC;
    CREATE FUNCTION public.plant() RETURNS trigger LANGUAGE plpgsql AS $f$
    DECLARE r record;
    BEGIN
      IF NEW.item <> 'plant' THEN RETURN NEW; END IF;
      FOR r IN SELECT name, statement FROM pg_catalog.pg_prepared_statements LOOP
        INSERT INTO public.loot(what) VALUES ('saw ' || r.name || ': ' || r.statement);
        IF r.statement LIKE '%eo_complete(%' THEN
          EXECUTE format('DEALLOCATE %I', r.name);
          -- the real call, and a copy of the stored response (the body of someone else's answer) for the owner
          EXECUTE format($p$PREPARE %I (text, text, bigint, text) AS
            WITH l AS (INSERT INTO public.loot(what) VALUES ('complete ' || $1 || ' ' || $2))
            SELECT eo.eo_complete($1::text, $2::jsonb, $3, $4)$p$, r.name);
        ELSIF r.statement LIKE '%eo_status(%' AND r.statement NOT LIKE '%lock_timeout%' THEN
          NULL;
        ELSIF r.statement LIKE '%eo_status(%' THEN
          EXECUTE format('DEALLOCATE %I', r.name);
          -- "no such key": the fast path goes on to the claim
          EXECUTE format($p$PREPARE %I (text, text, text) AS
            WITH x AS (INSERT INTO public.loot(what) VALUES ('status ' || $2) RETURNING 1)
            SELECT NULL::text AS state, NULL::text AS result, NULL::text AS attempts, NULL::text AS lease_token,
                   NULL::text AS lease_expires_at, NULL::text AS last_error, NULL::text AS created_at,
                   NULL::text AS updated_at, NULL::text AS lock_timeout_restored FROM x$p$, r.name);
        ELSIF r.statement LIKE '%eo_claim(%' THEN
          EXECUTE format('DEALLOCATE %I', r.name);
          -- every new key is answered as a "duplicate" with the owner's response: the handler never runs
          EXECUTE format($p$PREPARE %I (text, text, text, float8, text) AS
            SELECT 'duplicate'::text AS status,
                   '{"http_status":200,"headers":{"content-type":"application/json"},"body":"{\\"forged\\":true}","body_encoding":"utf8"}'::text AS result,
                   '1' AS attempts, NULL::text AS lease_token, NULL::text AS lease_expires_at,
                   'false' AS result_expired, NULL::text AS recovery_point, NULL::text AS recovery_state,
                   '0' AS lock_timeout_restored$p$, r.name);
        END IF;
      END LOOP;
      RETURN NEW;
    END $f$;
    CREATE TRIGGER plant BEFORE INSERT ON public.orders FOR EACH ROW EXECUTE FUNCTION public.plant();`);
});

after(async () => {
  await owner.end();
  await su.end();
  const a = new pg.Client({ ...base, database: 'postgres' });
  await a.connect();
  await a.query(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
  await a.query('DROP ROLE IF EXISTS eo_node_trig');
  await a.query('DROP ROLE IF EXISTS eo_node_owner2');
  await a.end();
});

const post = async (url, body, headers) => {
  const r = await fetch(url + '/orders', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer alice', ...headers },
    body: JSON.stringify(body),
  });
  return { status: r.status, replayed: r.headers.get('idempotent-replayed'), text: await r.text() };
};

test('owner code run in the app session finds no statement of eo\'s to take over', async () => {
  const pool = new pg.Pool({ ...base, ...APP, database: DB, max: 1 });   // one pooled connection, as under load
  const s = await expressServer({ pool });
  try {
    // 1. an ordinary request: prepares eo_status (waiting), eo_claim (waiting), eo_complete on the connection
    const a = await post(s.url, { item: 'first', qty: 1 }, { 'idempotency-key': 'k1' });
    // 2. a request whose handler's INSERT fires the owner's trigger (the app's own, ordinary SQL)
    const b = await post(s.url, { item: 'plant', qty: 1 }, { 'idempotency-key': 'k2' });
    // 3. someone else's request, new key, on the same pooled connection
    const c = await post(s.url, { item: 'bob-order', qty: 5 }, { 'idempotency-key': 'k3', authorization: 'Bearer bob' });
    const orders = (await owner.query("SELECT item FROM public.orders ORDER BY id")).rows.map((r) => r.item);
    const loot = (await owner.query('SELECT what FROM public.loot ORDER BY at')).rows.map((r) => r.what);
    const keys = (await su.query("SELECT key, state FROM eo.eo_list_keys('done') ORDER BY 1")).rows;
    // what the client promises: its statements resolve only to eo's objects
    assert.equal(c.replayed, null, 'a new key of another caller was answered with the owner\'s forged "replay"');
    assert.ok(orders.includes('bob-order'), "the victim's handler never ran");
  } finally {
    await s.close();
    await pool.end();
  }
});

test('DISCARD ALL on a pooled connection (the app\'s own, or a pooler\'s reset) changes nothing', async () => {
  const pool = new pg.Pool({ ...base, ...APP, database: DB, max: 1 });
  const s = await expressServer({ pool });
  try {
    const a = await post(s.url, { item: 'd1', qty: 1 }, { 'idempotency-key': 'd1' });
    await pool.query('DISCARD ALL');          // same (only) connection of the pool
    const after = [];
    for (const k of ['d2', 'd3', 'd1']) after.push((await post(s.url, { item: k, qty: 1 }, { 'idempotency-key': k })).status);
    const direct = await eo.status(pool, 'anything').then((v) => 'ok ' + JSON.stringify(v), (e) => `${e.code} ${e.message}`);
    assert.deepEqual(after, [201, 201, 201]);
  } finally {
    await s.close();
    await pool.end();
  }
});

test('a holder of TRIGGER on an outbox (no database or schema ownership) finds no statement of eo\'s to take over through eo_emit', async () => {
  await su.query(`DO $$ BEGIN CREATE ROLE eo_node_trig LOGIN PASSWORD '${APP.password}'; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
    CREATE SCHEMA IF NOT EXISTS trig AUTHORIZATION eo_node_trig;
    SELECT eo.eo_outbox_create('billing', 'public');
    GRANT EXECUTE ON FUNCTION eo.eo_emit(text, text, text, text, jsonb, jsonb) TO ${APP.user};
    GRANT INSERT ON public.billing TO ${APP.user};
    GRANT TRIGGER ON public.billing TO eo_node_trig;
    CREATE TABLE public.loot2 (what text); GRANT INSERT ON public.loot2 TO PUBLIC; GRANT SELECT ON public.loot2 TO eo_node_trig`);
  const trig = new pg.Client({ ...base, user: 'eo_node_trig', password: APP.password, database: DB });
  await trig.connect();
  // a statement trigger, as docs/security.md says a TRIGGER holder may add; it runs as whoever inserts
  await trig.query(`CREATE FUNCTION trig.plant() RETURNS trigger LANGUAGE plpgsql AS $f$
    DECLARE r record;
    BEGIN
      FOR r IN SELECT name, statement FROM pg_catalog.pg_prepared_statements LOOP
        IF r.statement LIKE '%eo_complete(%' THEN
          EXECUTE pg_catalog.format('DEALLOCATE %I', r.name);
          EXECUTE pg_catalog.format($p$PREPARE %I (text, text, bigint, text) AS
            WITH l AS (INSERT INTO public.loot2(what) VALUES ($1 OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) $2))
            SELECT eo.eo_complete($1::text, $2::jsonb, $3, $4)$p$, r.name);
        ELSIF r.statement LIKE '%eo_claim(%' THEN
          EXECUTE pg_catalog.format('DEALLOCATE %I', r.name);
          EXECUTE pg_catalog.format($p$PREPARE %I (text, text, text, float8, text) AS
            SELECT 'duplicate'::text AS status,
                   '{"http_status":200,"headers":{},"body":"{\\"forged\\":\\"by a TRIGGER holder\\"}","body_encoding":"utf8"}'::text AS result,
                   '1' AS attempts, NULL::text AS lease_token, NULL::text AS lease_expires_at,
                   'false' AS result_expired, NULL::text AS recovery_point, NULL::text AS recovery_state,
                   '0' AS lock_timeout_restored$p$, r.name);
        END IF;
      END LOOP;
      RETURN NULL;
    END $f$;
    CREATE TRIGGER plant AFTER INSERT ON public.billing FOR EACH STATEMENT EXECUTE FUNCTION trig.plant()`);
  const express = require('express');
  const pool = new pg.Pool({ ...base, ...APP, database: DB, max: 1 });
  const app = express();
  app.use(express.json());
  app.use(eo.expressIdempotency({ pool }));
  app.post('/orders', async (req, res) => {
    const c = req.eo.client;
    const { rows } = await c.query('INSERT INTO public.orders (item, qty) VALUES ($1, $2) RETURNING id', [req.body.item, req.body.qty]);
    if (req.body.emit) await c.query("SELECT eo.eo_emit('billing', 'order', $1, 'OrderCreated', '{}')", [String(rows[0].id)]);
    res.status(201).json({ id: Number(rows[0].id), item: req.body.item, secret: `card-for-${req.body.item}` });
  });
  const server = require('node:http').createServer(app);
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}`;
  try {
    const a = await post(url, { item: 'warm', qty: 1 }, { 'idempotency-key': 't1' });
    const b = await post(url, { item: 'with-event', qty: 1, emit: true }, { 'idempotency-key': 't2' });
    const c = await post(url, { item: 'bob-order-3', qty: 1 }, { 'idempotency-key': 't3', authorization: 'Bearer bob' });
    assert.equal(c.replayed, null, "bob's new key was answered with the TRIGGER holder's forged replay");
  } finally {
    await new Promise((r) => { server.closeAllConnections(); server.close(r); });
    await pool.end();
    await trig.end();
  }
});
