// Acceptance with rocketmq-client-nodejs: tx commit/rollback/orphan check, SimpleConsumer redelivery, PushConsumer.
const { Producer, SimpleConsumer, PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');
const endpoints = process.argv[2];
const run = Math.random().toString(16).slice(2, 8);
const out = {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function drain(c, want, ms, ack = true, invisible = 10000) {
  const got = []; const end = Date.now() + ms;
  while (got.length < want && Date.now() < end) {
    for (const m of await c.receive(16, invisible)) { got.push(m); if (ack) await c.ack(m); }
  }
  return got;
}
async function main() {
  const T = `node_tx_${run}`, TR = `node_re_${run}`, TP = `node_push_${run}`;
  const asked = [];
  const ct = new SimpleConsumer({ consumerGroup: `NG_tx_${run}`, endpoints, subscriptions: new Map().set(T, '*'), awaitDuration: 3000 });
  console.error('ct start');await ct.startup();console.error('ct up'); await ct.receive(16);
  const cr = new SimpleConsumer({ consumerGroup: `NG_re_${run}`, endpoints, subscriptions: new Map().set(TR, '*'), awaitDuration: 3000 });
  await cr.startup(); await cr.receive(16);
  const p = new Producer({ endpoints, topics: [T], checker: { async check(mv) { asked.push(mv.body.toString()); return TransactionResolution.COMMIT; } } });
  console.error('p start');await p.startup();console.error('p up'); const p2 = new Producer({ endpoints }); await p2.startup();
  let tx = p.beginTransaction(); await p.send({ topic: T, body: Buffer.from('tx-commit') }, tx); await tx.commit();
  tx = p.beginTransaction(); await p.send({ topic: T, body: Buffer.from('tx-rollback') }, tx); await tx.rollback();
  tx = p.beginTransaction(); await p.send({ topic: T, body: Buffer.from('tx-unknown') }, tx);
  console.error('tx sent');const txGot = await drain(ct, 2, 45000);
  out.tx = { received: txGot.map((m) => m.body.toString()).sort(), asked };
  console.error('tx', JSON.stringify(out.tx));
  for (let i = 0; i < 4; i++) await p2.send({ topic: TR, body: Buffer.from(`r${i}`) });
  const first = await drain(cr, 4, 15000, false);
  for (const m of first) if (m.body.toString() !== 'r0') await cr.ack(m);
  const again = await drain(cr, 1, 30000, false);
  out.redelivery = { first: first.map((m) => [m.body.toString(), m.deliveryAttempt]), again: again.map((m) => [m.body.toString(), m.deliveryAttempt]) };
  for (const m of again) await cr.ack(m);
  console.error('re', JSON.stringify(out.redelivery));
  const seen = [];
  const pc = new PushConsumer({ consumerGroup: `NG_push_${run}`, endpoints, subscriptions: new Map().set(TP, '*'),
    messageListener: { consume(mv) { seen.push([mv.body.toString(), mv.deliveryAttempt]); return ConsumeResult.SUCCESS; } } });
  await pc.startup();
  await sleep(6000);
  for (let i = 0; i < 3; i++) await p2.send({ topic: TP, body: Buffer.from(`push${i}`) });
  const end = Date.now() + 30000;
  while (seen.length < 3 && Date.now() < end) await sleep(500);
  out.push = seen;
  await pc.shutdown().catch(() => {}); await p.shutdown(); await p2.shutdown(); await ct.shutdown(); await cr.shutdown();
  console.log(JSON.stringify(out));
  process.exit(0);
}
main().catch((e) => { console.error(e); console.log(JSON.stringify(out)); process.exit(1); });
