// bench/http/load.js -- the load generator of bench/http.sh: closed-loop
// HTTP/1.1 clients on keep-alive connections, one request in flight per
// client, the latency of every request measured.
//
//   node load.js URL CLIENTS WARMUP_S SECS WORKLOAD KEY_PREFIX
//
// Every request: POST URL, body {"item":"book","qty":1}, headers
// Content-Type: application/json, X-Api-Client: bench (the caller),
// Idempotency-Key. WORKLOAD new: a new key for every request (the common
// case). WORKLOAD retry: REPLAY_KEYS (200) keys sent once each during the
// warm-up, then only those keys again, round robin (every measured request
// a retry of a completed one: the replay path). Requests of the first
// WARMUP_S s are not counted. Prints one JSON line: requests, rps, p50,
// p90, p99, max (ms), the counts by status and of Idempotent-Replayed
// answers, and `created`: the 201s not replayed of the whole run (warm-up
// and retry keys included), the orders it should have left; `all`: every
// response of the run.
'use strict';
const http = require('http');

const [url, clientsArg, warmArg, secsArg, workload, prefix] = process.argv.slice(2);
const clients = Number(clientsArg);
const warmMs = Number(warmArg) * 1000;
const secsMs = Number(secsArg) * 1000;
const replayKeys = Number(process.env.REPLAY_KEYS || 200);
const u = new URL(url);
const body = Buffer.from(JSON.stringify({ item: 'book', qty: 1 }));
const agent = new http.Agent({ keepAlive: true, maxSockets: clients });

let created = 0; // every 201 not replayed, warm-up included: the orders the run should leave
let all = 0;     // every response, warm-up included

function post(key) {
  return new Promise((resolve, reject) => {
    const req = http.request({
      agent, host: u.hostname, port: u.port, path: u.pathname, method: 'POST',
      headers: {
        'content-type': 'application/json', 'content-length': body.length,
        'x-api-client': 'bench', 'idempotency-key': key,
      },
    }, (res) => {
      res.on('data', () => {});
      res.on('end', () => {
        all++;
        const replayed = res.headers['idempotent-replayed'] === 'true';
        if (res.statusCode === 201 && !replayed) created++;
        resolve([res.statusCode, replayed]);
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function main() {
  const t0 = process.hrtime.bigint();
  const warmEnd = t0 + BigInt(warmMs) * 1000000n;
  const end = warmEnd + BigInt(secsMs) * 1000000n;
  const lat = [];
  const statuses = {};
  let replayed = 0;
  let seq = 0;
  let errors = 0;
  if (workload === 'retry') {
    // The keys to retry: sent once each, first, by CLIENTS clients.
    let i = 0;
    await Promise.all(Array.from({ length: clients }, async () => {
      while (i < replayKeys) await post(`${prefix}-r${i++}`);
    }));
  }
  const newKey = workload === 'retry' ? () => `${prefix}-r${seq++ % replayKeys}` : () => `${prefix}-${seq++}`;
  async function loop() {
    for (;;) {
      const start = process.hrtime.bigint();
      if (start >= end) return;
      let st, rep;
      try {
        [st, rep] = await post(newKey());
      } catch (e) {
        errors++;
        if (errors > 100) throw e;
        continue;
      }
      const stop = process.hrtime.bigint();
      if (start >= warmEnd && stop <= end) {
        lat.push(Number(stop - start) / 1e6);
        statuses[st] = (statuses[st] || 0) + 1;
        if (rep) replayed++;
      }
    }
  }
  await Promise.all(Array.from({ length: clients }, loop));
  agent.destroy();
  lat.sort((a, b) => a - b);
  const q = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.ceil(p * lat.length) - 1)] : null);
  const r3 = (x) => (x === null ? null : Math.round(x * 1000) / 1000);
  console.log(JSON.stringify({
    requests: lat.length, secs: secsMs / 1000,
    rps: Math.round((lat.length / (secsMs / 1000)) * 10) / 10,
    p50: r3(q(0.5)), p90: r3(q(0.9)), p99: r3(q(0.99)), max: r3(lat[lat.length - 1] ?? null),
    statuses, replayed, errors, created, all,
  }));
}

main().catch((e) => { console.error(e); process.exit(1); });
