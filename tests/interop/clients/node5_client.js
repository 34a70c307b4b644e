// Drives Apache's official RocketMQ 5.x Node.js client (npm rocketmq-client-nodejs) for the interop tests.
// Same roles, options and JSON-lines events as py5_client.py: produce | simple | push.
'use strict';

const fs = require('node:fs');
const { Producer, SimpleConsumer, PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n');
}

function parseArgs(argv) {
  const args = { role: argv[0], filter: '*', batch: 16, invisibleS: 10, awaitS: 2, skipAcks: 0, group: '' };
  for (let i = 1; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    args[key] = argv[i + 1];
  }
  for (const key of [ 'batch', 'invisibleS', 'awaitS', 'skipAcks' ]) args[key] = Number(args[key]);
  return args;
}

function describe(view) {
  return {
    body: view.body.toString(), tag: view.tag ?? null, keys: [ ...(view.keys ?? []) ].sort(),
    props: Object.fromEntries(view.properties ?? new Map()), group: view.messageGroup ?? null,
    id: view.messageId, attempt: view.deliveryAttempt, at: Date.now() / 1000,
  };
}

function stdinClosed() {
  return new Promise(resolve => {
    process.stdin.on('data', () => {});
    process.stdin.on('end', resolve);
    process.stdin.on('close', resolve);
  });
}

async function produce(args) {
  const items = fs.readFileSync(args.messages, 'utf8').split('\n').filter(Boolean).map(line => JSON.parse(line));
  const answers = new Map(items.filter(item => (item.tx || '').startsWith('check'))
    .map(item => [ item.body, item.tx.split('-').pop() ]));
  const producer = new Producer({
    endpoints: args.endpoint, topic: args.topic,
    checker: {
      async check(view) {
        const answer = answers.get(view.body.toString()) || 'commit';
        emit('checked', { body: view.body.toString(), answer });
        return answer === 'commit' ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
      },
    },
  });
  await producer.startup();
  emit('started');
  for (const item of items) {
    const message = { topic: args.topic, body: Buffer.from(item.body) };
    if (item.tag) message.tag = item.tag;
    if (item.keys) message.keys = item.keys;
    if (item.props) message.properties = new Map(Object.entries(item.props));
    if (item.group) message.messageGroup = item.group;
    if (item.delay_ms) message.delay = item.delay_ms;
    try {
      let receipt;
      if (item.tx) {
        const transaction = producer.beginTransaction();
        receipt = await producer.send(message, transaction);
        if (item.tx === 'commit') await transaction.commit();
        if (item.tx === 'rollback') await transaction.rollback();
      } else {
        receipt = await producer.send(message);
      }
      emit('sent', { body: item.body, id: receipt.messageId, at: Date.now() / 1000 });
    } catch (err) {
      emit('send-error', { body: item.body, error: String(err) });
    }
  }
  if (answers.size > 0) await stdinClosed();
  await producer.shutdown().catch(() => {});
  emit('stopped');
}

async function simple(args) {
  const consumer = new SimpleConsumer({
    endpoints: args.endpoint, consumerGroup: args.group, awaitDuration: args.awaitS * 1000,
    subscriptions: new Map([ [ args.topic, args.filter ] ]),
  });
  await consumer.startup();
  emit('started');
  let stopped = false;
  stdinClosed().then(() => { stopped = true; });
  const skipped = new Map();
  while (!stopped) {
    let messages = [];
    try {
      messages = await consumer.receive(args.batch, args.invisibleS * 1000);
    } catch (err) {
      emit('error', { error: String(err) });
      await new Promise(resolve => setTimeout(resolve, 500));
      continue;
    }
    for (const view of messages) {
      emit('recv', describe(view));
      const body = view.body.toString();
      if ((skipped.get(body) || 0) < args.skipAcks) {
        skipped.set(body, (skipped.get(body) || 0) + 1);
        continue;
      }
      try {
        await consumer.ack(view);
        emit('acked', { body, at: Date.now() / 1000 });
      } catch (err) {
        emit('error', { body, error: String(err) });
      }
    }
  }
  await consumer.shutdown().catch(() => {});
  emit('stopped');
}

async function push(args) {
  const seen = new Map();
  const consumer = new PushConsumer({
    endpoints: args.endpoint, consumerGroup: args.group,
    subscriptions: new Map([ [ args.topic, args.filter ] ]),
    messageListener: {
      async consume(view) {
        emit('recv', describe(view));
        const body = view.body.toString();
        seen.set(body, (seen.get(body) || 0) + 1);
        return seen.get(body) <= args.skipAcks ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
      },
    },
  });
  await consumer.startup();
  emit('started');
  await stdinClosed();
  await consumer.shutdown().catch(() => {});
  emit('stopped');
}

const args = parseArgs(process.argv.slice(2));
({ produce, simple, push })[args.role](args).then(() => process.exit(0)).catch(err => {
  emit('error', { error: String(err && err.stack || err) });
  process.exit(1);
});
