const express = require('express');
const { Pool } = require('pg');
const { expressIdempotency } = require('eo-client');

function makeApp(pool = new Pool()) {
  const app = express();
  app.use(express.json());
  app.use(expressIdempotency({ pool, required: true, caller: (req) => req.get('x-api-client') }));
  app.post('/orders', async (req, res) => {
    const { rows } = await req.eo.client.query('INSERT INTO orders (item, qty) VALUES ($1, $2) RETURNING id', [req.body.item, req.body.qty]);
    res.status(201).json({ id: Number(rows[0].id) });
  });
  return app;
}
module.exports = { makeApp };
