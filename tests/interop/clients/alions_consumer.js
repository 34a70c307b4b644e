'use strict';
// Push consumer on the ali-ons 3.12.0 client (npm) for rocketflow's interop tests.
//
// Usage: node alions_consumer.js --namesrv HOST:PORT --topic T --group G [--broadcast] [--instance NAME]
//        [--from last|first] [--delay-ms N] [--sql EXPRESSION]
//
// Subscribes to one topic with "*" (or, with --sql, an SQL92 selector) and prints one JSON line per received message: body, keys, tags,
// every property (user and system), queue id, queue offset, msg id, reconsume times, and the
// monotonic times the handler started and ended. Closes cleanly (committing its offsets) when stdin
// ends, a line "stop" arrives, or on SIGTERM; prints "started" and "stopped" around its life.

const { Consumer } = require('ali-ons');

function parseArgs(argv) {
  const args = { broadcast: false, from: 'last', delayMs: 0 };
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
      case '--broadcast': args.broadcast = true; break;
      case '--instance': args.instance = next(); break;
      case '--from': args.from = next(); break;
      case '--delay-ms': args.delayMs = Number(next()); break;
      case '--sql': args.sql = next(); break;
      default: throw new Error(`unknown argument ${name}`);
    }
  }
  for (const required of [ 'namesrv', 'topic', 'group' ]) {
    if (!args[required]) throw new Error(`--${required} is required`);
  }
  if (![ 'last', 'first' ].includes(args.from)) throw new Error(`--from must be last or first, got ${args.from}`);
  return args;
}

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ event }, fields)) + '\n');
}

function monotonicNs() {
  return process.hrtime.bigint().toString();
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const options = {
    httpclient: {},
    nameSrv: args.namesrv,
    consumerGroup: args.group,
    isBroadcast: args.broadcast,
    consumeFromWhere: args.from === 'first' ? 'CONSUME_FROM_FIRST_OFFSET' : 'CONSUME_FROM_LAST_OFFSET',
  };
  if (args.instance) options.instanceName = args.instance;
  const consumer = new Consumer(options);
  consumer.on('error', error => process.stderr.write(`consumer error: ${error.stack || error}\n`));

  const selector = args.sql ? { expressionType: 'SQL92', subString: args.sql } : '*';
  consumer.subscribe(args.topic, selector, async message => {
    const started = monotonicNs();
    if (args.delayMs) await new Promise(resolve => setTimeout(resolve, args.delayMs));
    emit('recv', {
      body: message.body.toString('utf8'),
      keys: message.keys === undefined ? null : message.keys,
      tags: message.tags === undefined ? null : message.tags,
      props: message.properties,
      topic: message.topic,
      queue_id: message.queueId,
      offset: message.queueOffset,
      msg_id: message.msgId,
      reconsume_times: message.reconsumeTimes,
      started_ns: started,
      ended_ns: monotonicNs(),
    });
  });

  await consumer.ready();
  emit('started', {});

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await consumer.close();
    process.stdout.write(JSON.stringify({ event: 'stopped' }) + '\n', () => process.exit(0));
  };
  let buffered = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', chunk => {
    buffered += chunk;
    if (buffered.split('\n').some(line => line.trim() === 'stop')) stop();
  });
  process.stdin.on('end', stop);
  process.on('SIGTERM', stop);
}

main().catch(error => {
  process.stderr.write(`FAILED: ${error.stack || error}\n`);
  process.exit(2);
});
