const { withLease } = require('eo-client');

// A card charge: the lease is committed before the call, a heartbeat
// renews it, and the charge id is stored only under a current token.
async function refund(pool, cards, orderId) {
  const key = `refund:${orderId}`;
  const out = await withLease(pool, key, { leaseMs: 30000 }, async (lease) => {
    lease.check(); // stale? stop before the outside call
    const r = await cards.refund({ order: orderId, idempotencyKey: key });
    return { refund: r.id };
  });
  return out.result; // the first call's answer, for a duplicate too
}
module.exports = { refund };
