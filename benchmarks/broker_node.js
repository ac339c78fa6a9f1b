// One load process of benchmarks/broker.py: the official Node.js client (rocketmq-client-nodejs,
// installed by `make node` into tests/broker/node) sends SHARE 1 KiB messages with WINDOW sends in
// flight, and a SimpleConsumer receives 32 per call and acks each message (one AckMessage each, as
// the client does), WINDOW acks in flight. Protocol on stdio, one line each: it prints "ready" once
// started, waits for "go" on stdin, prints "acked N" per acked batch, and stops when stdin says
// "stop"; then it prints one JSON line: send start and end (ms since the epoch), send latencies (ms)
// and its CPU seconds since "go".
// Usage: node broker_node.js HOST:PORT TOPIC GROUP SHARE WINDOW
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');
const readline = require('readline');

async function main() {
  const [endpoints, topic, consumerGroup, shareText, windowText] = process.argv.slice(2);
  const share = Number(shareText);
  const window = Number(windowText);
  const consumer = new SimpleConsumer({
    consumerGroup,
    endpoints,
    subscriptions: new Map().set(topic, '*'),
    awaitDuration: 1000,
  });
  await consumer.startup();
  const producer = new Producer({ endpoints, topics: [topic] });
  await producer.startup();
  const lines = readline.createInterface({ input: process.stdin });
  let stopped = false;
  const go = new Promise((resolve) => {
    lines.on('line', (line) => {
      if (line === 'go') resolve();
      if (line === 'stop') stopped = true;
    });
  });
  console.log('ready');
  await go;
  const cpu0 = process.cpuUsage();
  const body = Buffer.alloc(1024, 'x');
  const latencies = [];
  let sendStart = 0;
  let sendEnd = 0;

  async function produce() {
    sendStart = Date.now();
    let next = 0;
    async function worker() {
      while (next < share) {
        next += 1;
        const t0 = performance.now();
        await producer.send({ topic, body });
        latencies.push(performance.now() - t0);
      }
    }
    await Promise.all(Array.from({ length: window }, worker));
    sendEnd = Date.now();
  }

  async function consume() {
    while (!stopped) {
      const messages = await consumer.receive(32, 30000);
      let next = 0;
      async function acker() {
        while (next < messages.length) {
          const message = messages[next];
          next += 1;
          await consumer.ack(message);
        }
      }
      await Promise.all(Array.from({ length: Math.min(window, messages.length) }, acker));
      if (messages.length) console.log(`acked ${messages.length}`);
    }
  }

  await Promise.all([produce(), consume()]);
  const cpu = process.cpuUsage(cpu0);
  console.log(JSON.stringify({ sendStart, sendEnd, latencies, cpu: (cpu.user + cpu.system) / 1e6 }));
  // no shutdown: the client's logger throws when both close it, and the run is measured already
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
