// Shared test setup: a database of its own per test file, made by the
// superuser (PGHOST/PGPORT/PGUSER), with eo and an ordinary role "app"
// granted what docs/security.md says; the tests connect as that role.
'use strict';
const pg = require('pg');

const base = { host: process.env.PGHOST, port: Number(process.env.PGPORT || 5432), user: process.env.PGUSER || 'postgres' };
const APP = { user: 'eo_node_app', password: 'eo-node-app-pw' };

async function setup(name) {
  const db = `eo_node_${name}_${process.pid}`;
  const admin = new pg.Client({ ...base, database: 'postgres' });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${db}`);
  await admin.query(`DO $$ BEGIN CREATE ROLE ${APP.user} LOGIN PASSWORD '${APP.password}'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
  await admin.query(`DO $$ BEGIN CREATE ROLE eo_node_other LOGIN PASSWORD '${APP.password}'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
  await admin.query(`CREATE DATABASE ${db}`);
  await admin.end();
  const su = new pg.Client({ ...base, database: db });
  await su.connect();
  await su.query(`CREATE EXTENSION eo;
    GRANT EXECUTE ON FUNCTION eo_claim(text, text, interval, text), eo_complete(text, jsonb, bigint, text),
      eo_fail(text, text, bigint, interval, text, text, boolean), eo_extend(text, bigint, interval, text),
      eo_status(text, text), eo_recovery_point(text, bigint, text, jsonb, text) TO ${APP.user}, eo_node_other;
    GRANT ALL ON SCHEMA public TO ${APP.user}, eo_node_other`);
  const pools = [];
  const pool = (opts = {}) => {
    const p = new pg.Pool({ ...base, ...APP, database: db, max: 8, ...opts });
    pools.push(p);
    return p;
  };
  return {
    db,
    su,
    pool,
    async teardown() {
      for (const p of pools) await p.end().catch(() => {});
      await su.end();
      const a = new pg.Client({ ...base, database: 'postgres' });
      await a.connect();
      await a.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
      await a.end();
    },
  };
}

module.exports = { setup, base, APP };
