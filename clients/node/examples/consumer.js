const { applyMessage } = require('eo-client');

// For each message the broker delivers: the effect and the claim of its
// event id commit together; acknowledge only after that.
async function onMessage(pool, msg, ack) {
  const status = await applyMessage(pool, { eventId: msg.id, scope: 'billing' }, (client) =>
    client.query('INSERT INTO payments (order_id, amount) VALUES ($1, $2)', [msg.order, msg.amount]));
  if (status !== 'busy') await ack(); // claimed, duplicate: done; dead, rejected: also alert
  return status;
}
module.exports = { onMessage };
