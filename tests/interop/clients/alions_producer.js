'use strict';
// Producer on the ali-ons 3.12.0 client (npm) for rocketflow's interop tests.
//
// Usage: node alions_producer.js --namesrv HOST:PORT --topic T --group G --messages FILE [--probe]
//        [--probe-interval SECONDS] [--access-key AK --secret-key SK]
//
// Sends the messages of a JSON-lines file ({"body", "keys", "tags", "props"} per line) one by one and
// prints one JSON line per event: "sent" (index, status, msg_id, queue_id, queue offset, and the body,
// keys, tags and properties sent), "error", "done".
// With --probe it first sends probe rounds (tags "rf-probe", body "probe <pid> <round> <n>"), one
// message per queue per round (the client picks queues round-robin), until a line "go" arrives on stdin.

const fs = require('fs');
const { Producer, Message } = require('ali-ons');

const PROBE_TAGS = 'rf-probe';

function parseArgs(argv) {
  const args = { probe: false, probeInterval: 0.3 };
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${name} needs a value`);
      return argv[++i];
    };
    switch (name) {
      case '--namesrv': args.namesrv = next(); break;
      case '--topic': args.topic = next(); break;
      case '--group': args.group = next(); break;
      case '--messages': args.messages = next(); break;
      case '--probe': args.probe = true; break;
      case '--probe-interval': args.probeInterval = Number(next()); break;
      case '--access-key': args.accessKey = next(); break;
      case '--secret-key': args.secretKey = next(); break;
      default: throw new Error(`unknown argument ${name}`);
    }
  }
  for (const required of [ 'namesrv', 'topic', 'group', 'messages' ]) {
    if (!args[required]) throw new Error(`--${required} is required`);
  }
  return args;
}

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ event }, fields)) + '\n');
}

function buildMessage(topic, spec) {
  const message = new Message(topic, spec.tags || null, Buffer.from(spec.body, 'utf8'));
  if (spec.keys && spec.keys.length) message.keys = spec.keys;
  for (const [ name, value ] of Object.entries(spec.props || {})) message.properties[name] = value;
  return message;
}

function queueCount(producer, topic) {
  const info = producer._topicPublishInfoTable.get(topic);
  return info && info.messageQueueList.length ? info.messageQueueList.length : 0;
}

async function sendProbes(producer, topic, interval) {
  let go = false;
  let buffered = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', chunk => {
    buffered += chunk;
    if (buffered.split('\n').some(line => line.trim() === 'go')) go = true;
  });
  process.stdin.on('end', () => { go = true; });
  for (let round = 0; !go; round++) {
    let sent = 0;
    do {
      const result = await producer.send(buildMessage(topic, { body: `probe ${process.pid} ${round} ${sent}`, tags: PROBE_TAGS }));
      emit('probe', { round, queue_id: Number(result.messageQueue.queueId), offset: Number(result.queueOffset),
        queue_count: queueCount(producer, topic) });
      sent++;
    } while (sent < queueCount(producer, topic));
    await new Promise(resolve => setTimeout(resolve, interval * 1000));
  }
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const specs = fs.readFileSync(args.messages, 'utf8').split('\n').filter(line => line.trim()).map(JSON.parse);
  const options = { httpclient: {}, nameSrv: args.namesrv, producerGroup: args.group };
  // ACL keys (ali-ons signs every request with them when both are set)
  if (args.accessKey) Object.assign(options, { accessKeyId: args.accessKey, accessKeySecret: args.secretKey });
  const producer = new Producer(options);
  producer.on('error', error => process.stderr.write(`producer error: ${error.stack || error}\n`));
  await producer.ready();
  emit('started', {});
  let status = 0;
  try {
    if (args.probe) await sendProbes(producer, args.topic, args.probeInterval);
    for (let index = 0; index < specs.length; index++) {
      const spec = specs[index];
      const result = await producer.send(buildMessage(args.topic, spec));
      // ext-field values arrive as strings; report numbers like the other scripts
      emit('sent', { index, status: result.sendStatus, msg_id: result.msgId,
        queue_id: Number(result.messageQueue.queueId), offset: Number(result.queueOffset),
        body: spec.body, keys: (spec.keys || []).join(' '), tags: spec.tags || null, props: spec.props || {} });
    }
  } catch (error) {
    emit('error', { error: String(error && error.stack || error) });
    status = 1;
  }
  await producer.close();
  process.stdout.write(JSON.stringify({ event: 'done', sent: status === 0 ? specs.length : null }) + '\n',
    () => process.exit(status));
}

main().catch(error => {
  process.stderr.write(`FAILED: ${error.stack || error}\n`);
  process.exit(2);
});
