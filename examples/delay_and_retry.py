"""Delayed messages and retries: a delay level on send, a failing listener reaching its retries.

Run a name server and a broker first (``rocketflow dev``), then:

    python examples/delay_and_retry.py [--namesrv 127.0.0.1:9876] [--count 3] [--fail-times 2]

* ``Message(..., delay_level=1)`` is held by the broker for delay level 1 (1 s with the default
  ``messageDelayLevel`` "1s 5s 10s 30s 1m 2m ..." of the broker) before consumers can see it.
* The listener answers RECONSUME_LATER the first ``--fail-times`` times it sees a message: the
  consumer sends the message back, the broker re-delivers it through the group's retry topic
  ``%RETRY%<group>`` after a delay, with ``reconsume_times`` counting up. The delay is
  ``context.delay_level_when_next_consume`` (1 here, to keep the example short; leave it at 0 and the
  broker uses level 3 + reconsume_times, i.e. 10 s, 30 s, 1 min, ...). After
  ``max_reconsume_times`` failures (16 by default) a message goes to the dead-letter queue
  ``%DLQ%<group>`` instead.

Prints how long each message was delayed and on which delivery it succeeded.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid

from rocketflow import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer
from rocketflow.client import ConsumeConcurrentlyContext
from rocketflow.client.admin import Admin
from rocketflow.client.errors import MQError

DEFAULT_NAMESRV = os.environ.get("ROCKETFLOW_NAMESRV", "127.0.0.1:9876")


def ensure_topic(namesrv: str, topic: str, queues: int = 4) -> None:
    """Create ``topic`` unless the name server already routes it, then wait for its route."""
    with Admin(namesrv) as admin:
        admin.ensure_topic(topic, queues=queues)


def main() -> int:
    parser = argparse.ArgumentParser(description="A delayed message and a failing listener reaching retry.")
    parser.add_argument("--namesrv", default=DEFAULT_NAMESRV, help="name server(s), host:port[;host:port]")
    parser.add_argument("--topic", default="ExampleDelay")
    parser.add_argument("--group", default="example-retry-consumer")
    parser.add_argument("--count", type=int, default=3, help="messages to send")
    parser.add_argument("--delay-level", type=int, default=1, help="delay level of the sent messages")
    parser.add_argument("--fail-times", type=int, default=2, help="failed deliveries before success")
    parser.add_argument("--timeout", type=float, default=90.0, help="give up after this many seconds")
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    if args.delay_level < 0:
        parser.error("--delay-level must be 0 (none) or a level of the broker")
    if args.fail_times < 0:
        parser.error("--fail-times must be at least 0")
    ensure_topic(args.namesrv, args.topic)
    run_id = uuid.uuid4().hex[:12]

    lock = threading.Lock()
    first_seen: dict[str, float] = {}          # key -> delay between send and first delivery (s)
    deliveries: dict[str, list[int]] = {}      # key -> reconsume_times of each delivery
    succeeded: set[str] = set()
    done = threading.Event()

    def on_messages(messages: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        with lock:
            for message in messages:
                if message.properties.get("run") != run_id:
                    continue
                key = message.keys or ""
                first_seen.setdefault(key, time.time() - message.born_timestamp / 1000)
                deliveries.setdefault(key, []).append(message.reconsume_times)
                if message.reconsume_times < args.fail_times:
                    status = ConsumeConcurrentlyStatus.RECONSUME_LATER
                else:
                    succeeded.add(key)
            if len(succeeded) >= args.count:
                done.set()
        if status is ConsumeConcurrentlyStatus.RECONSUME_LATER:
            context.delay_level_when_next_consume = 1   # retry after 1 s (0 = the broker's 3 + reconsume_times)
        return status

    consumer = PushConsumer(args.group, namesrv=args.namesrv,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(args.topic)
    consumer.register_concurrent_listener(on_messages)
    with consumer:
        with Producer("example-delay-producer", namesrv=args.namesrv) as producer:
            for index in range(args.count):
                producer.send(Message(args.topic, b"job %d" % index, keys=f"job-{index}",
                                      delay_level=args.delay_level, properties={"run": run_id}))
        print(f"sent {args.count} messages with delay level {args.delay_level}")
        finished = done.wait(args.timeout)
    with lock:
        for key in sorted(deliveries):
            counts = deliveries[key]
            print(f"{key}: first delivered {first_seen[key]:.1f}s after sending; {len(counts)} deliveries "
                  f"(reconsume_times {', '.join(map(str, counts))})")
    if not finished:
        print(f"timed out: {len(succeeded)} of {args.count} messages succeeded", file=sys.stderr)
        return 1
    print(f"all {args.count} messages delayed, then succeeded after {args.fail_times} retries each")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MQError as exc:          # e.g. no name server at --namesrv
        sys.exit(f"error: {exc}")
