// bench/http/express_app.js -- the Express contenders of bench/http.sh.
//
//   EO_BENCH_CONTENDER=bare|eo|hand EO_BENCH_CLIENT=.../clients/node \
//   EO_BENCH_POOL=4 PGHOST=... node express_app.js PORT
//
// POST /orders, body {"item": ..., "qty": ...}: one INSERT of an order in a
// transaction, answered 201 {"id": ...}. The same handler three ways, each
// on a pg Pool of EO_BENCH_POOL connections (PGHOST, PGPORT, PGUSER,
// PGDATABASE from the environment):
//
// bare  the handler alone, no idempotency: BEGIN, INSERT, COMMIT.
// eo    the handler under expressIdempotency (docs/node.md): BEGIN, the
//       claim, the INSERT, eo_complete with the response, COMMIT.
// hand  the processed-keys table as the Idempotency-Key packages keep it,
//       outside the handler's transaction: SELECT the (caller, key) row;
//       none: INSERT it 'started' (committed on its own), BEGIN, the INSERT,
//       COMMIT, UPDATE the row with the response (committed on its own);
//       done: the stored response; another request's hash: 422; started: 409.
'use strict';
const crypto = require('crypto');
const path = require('path');
const express = require('express');
const { Pool } = require('pg');
const { expressIdempotency } = require(path.join(process.env.EO_BENCH_CLIENT, 'dist', 'index.js'));

const contender = process.env.EO_BENCH_CONTENDER;
const size = Number(process.env.EO_BENCH_POOL || 4);
const pool = new Pool({ max: size, min: size });
const app = express();
app.use(express.json());

const INSERT = 'INSERT INTO orders (item, qty) VALUES ($1, $2) RETURNING id';

// The handler's work, the same for every contender.
async function create(client, req, res) {
  const { rows } = await client.query(INSERT, [req.body.item, req.body.qty]);
  res.status(201).json({ id: Number(rows[0].id) });
}

if (contender === 'bare') {
  app.post('/orders', async (req, res) => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const { rows } = await client.query(INSERT, [req.body.item, req.body.qty]);
      await client.query('COMMIT');
      res.status(201).json({ id: Number(rows[0].id) });
    } catch (e) {
      await client.query('ROLLBACK');
      throw e;
    } finally {
      client.release();
    }
  });
} else if (contender === 'eo') {
  app.use(expressIdempotency({ pool, required: true, caller: (req) => req.get('x-api-client') }));
  app.post('/orders', (req, res) => create(req.eo.client, req, res));
} else if (contender === 'hand') {
  const LOOKUP = 'SELECT state, request_hash, response_status, response_body FROM idempotency_keys WHERE caller = $1 AND key = $2';
  const START = 'INSERT INTO idempotency_keys (caller, key, request_hash) VALUES ($1, $2, $3) ON CONFLICT (caller, key) DO NOTHING RETURNING id';
  const FINISH = "UPDATE idempotency_keys SET state = 'done', response_status = $1, response_headers = $2, response_body = $3, updated_at = now() WHERE caller = $4 AND key = $5";
  const FORGET = 'DELETE FROM idempotency_keys WHERE caller = $1 AND key = $2';
  const problem = (res, status, error) => res.status(status).json({ error });
  app.post('/orders', async (req, res) => {
    const key = req.get('idempotency-key');
    const caller = req.get('x-api-client');
    if (!key || !caller) return problem(res, 400, 'Idempotency-Key and a caller are required');
    const digest = crypto.createHash('sha256').update(`POST\0${req.path}\0${JSON.stringify(req.body)}`).digest('hex');
    const client = await pool.connect();
    try {
      const found = await client.query(LOOKUP, [caller, key]);
      if (found.rows.length) {
        const r = found.rows[0];
        if (r.request_hash !== digest) return problem(res, 422, 'this key was used with another request');
        if (r.state !== 'done') return problem(res, 409, 'a request with this key is in progress');
        return res.status(r.response_status).set('idempotent-replayed', 'true').type('application/json').send(r.response_body);
      }
      const started = await client.query(START, [caller, key, digest]);
      if (!started.rows.length) return problem(res, 409, 'a request with this key is in progress');
      let body;
      try {
        await client.query('BEGIN');
        const { rows } = await client.query(INSERT, [req.body.item, req.body.qty]);
        await client.query('COMMIT');
        body = { id: Number(rows[0].id) };
      } catch (e) {
        await client.query('ROLLBACK');
        await client.query(FORGET, [caller, key]);
        throw e;
      }
      const text = JSON.stringify(body);
      await client.query(FINISH, [201, '{"content-type": "application/json"}', text, caller, key]);
      res.status(201).type('application/json').send(text);
    } finally {
      client.release();
    }
  });
} else {
  throw new Error(`EO_BENCH_CONTENDER: bare, eo or hand, not ${contender}`);
}

const server = app.listen(Number(process.argv[2]), '127.0.0.1', () => {
  console.log(`express ${contender} listening on ${server.address().port}`);
});
process.on('SIGTERM', () => server.close(() => pool.end().then(() => process.exit(0))));
