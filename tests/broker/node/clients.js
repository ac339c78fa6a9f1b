// The official Node.js client (rocketmq-client-nodejs) against `rocketstore serve`: normal, FIFO
// and delay sends, then a SimpleConsumer receives and acks them. Prints one JSON line.
// Usage: node clients.js HOST:PORT
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

async function main() {
  const endpoints = process.argv[2];
  const topic = 'NodeTopic';
  const consumer = new SimpleConsumer({
    consumerGroup: 'NodeGroup',
    endpoints,
    subscriptions: new Map().set(topic, '*'),
    awaitDuration: 2000,
  });
  await consumer.startup();
  await consumer.receive(16); // a new group starts at the end of the queues
  const producer = new Producer({ endpoints, topics: [topic] }); // waits for the settings answer
  await producer.startup();
  const sent = [];
  sent.push((await producer.send({ topic, tag: 'n', keys: ['node-key'], body: Buffer.from('node-normal') })).messageId);
  sent.push((await producer.send({ topic, messageGroup: 'node-group', body: Buffer.from('node-fifo') })).messageId);
  sent.push((await producer.send({ topic, delay: 1000, body: Buffer.from('node-delay') })).messageId);
  const received = [];
  const deadline = Date.now() + 60000;
  while (received.length < sent.length && Date.now() < deadline) {
    for (const message of await consumer.receive(16, 30000)) {
      received.push({ id: message.messageId, body: message.body.toString(), attempt: message.deliveryAttempt });
      await consumer.ack(message);
    }
  }
  await producer.shutdown();
  await consumer.shutdown();
  console.log(JSON.stringify({ sent, received }));
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
