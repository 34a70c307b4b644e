"""Orderly consumption: messages of one sharding key arrive in the order they were sent.

Run a name server and a broker first (``rocketflow dev``), then:

    python examples/push_orderly.py [--namesrv 127.0.0.1:9876] [--count 100] [--keys 10] [--rate 0]

The script sends ``--count`` messages spread over ``--keys`` order ids (``sharding_key`` = order id,
so one order stays on one queue), each carrying its per-order sequence number, at most ``--rate``
a second (0: as fast as it can; a progress bar shows sends that take a while). An orderly push
consumer (one queue consumed by one thread at a time, under the broker's queue lock) checks that
every order's sequence numbers arrive as 0, 1, 2, ... and prints
``consumed N messages in order``. Messages of earlier runs in the topic are skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rocketflow import ConsumeFromWhere, ConsumeOrderlyStatus, Message, MessageExt, Producer, PushConsumer
from rocketflow.client import ConsumeOrderlyContext
from rocketflow.client.admin import Admin
from rocketflow.client.errors import MQError

DEFAULT_NAMESRV = os.environ.get("ROCKETFLOW_NAMESRV", "127.0.0.1:9876")


def ensure_topic(namesrv: str, topic: str, queues: int = 4) -> None:
    """Create ``topic`` unless the name server already routes it, then wait for its route."""
    with Admin(namesrv) as admin:
        admin.ensure_topic(topic, queues=queues)


class OrderChecker:
    """Per order id, the last sequence number seen; counts what arrived out of order."""

    def __init__(self, run_id: str, expected: int) -> None:
        self.run_id = run_id
        self.expected = expected
        self.last_seq: dict[str, int] = {}
        self.consumed = 0
        self.duplicates = 0
        self.violations: list[str] = []
        self.queues: set[int] = set()
        self.done = threading.Event()
        self._lock = threading.Lock()   # the listener runs on several threads (one per queue at a time)

    def on_messages(self, messages: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        with self._lock:
            for message in messages:
                if message.properties.get("run") != self.run_id:
                    continue                        # left in the topic by an earlier run
                order_id, seq = message.keys or "", int(message.properties["seq"])
                last = self.last_seq.get(order_id, -1)
                if seq <= last:
                    self.duplicates += 1            # at-least-once: a redelivery, not a reordering
                    continue
                if seq != last + 1:
                    self.violations.append(f"{order_id}: got step {seq} after step {last}")
                self.last_seq[order_id] = seq
                self.queues.add(message.queue_id)
                self.consumed += 1
            if self.consumed >= self.expected:
                self.done.set()
        return ConsumeOrderlyStatus.SUCCESS


def main() -> int:
    parser = argparse.ArgumentParser(description="Orderly push consumer with a per-key order check.")
    parser.add_argument("--namesrv", default=DEFAULT_NAMESRV, help="name server(s), host:port[;host:port]")
    parser.add_argument("--topic", default="ExampleOrderly")
    parser.add_argument("--group", default="example-orderly-consumer")
    parser.add_argument("--count", type=int, default=100, help="messages to send and consume")
    parser.add_argument("--keys", type=int, default=10, help="distinct order ids (sharding keys)")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="messages per second at most (0 = as fast as it can); a low rate leaves time to watch "
                             "the group's lag grow with `rocketflow admin consumer-progress --watch`")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    if args.keys < 1:
        parser.error("--keys must be at least 1")
    if args.rate < 0:
        parser.error("--rate must be 0 (as fast as it can) or more")
    ensure_topic(args.namesrv, args.topic)
    run_id = uuid.uuid4().hex[:12]

    progress = Progress(TextColumn("sending"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        disable=args.count < 5000 and args.rate == 0)
    with Producer("example-orderly-producer", namesrv=args.namesrv) as producer, progress:
        task = progress.add_task("send", total=args.count)
        next_seq: dict[str, int] = {}
        started = time.monotonic()
        for index in range(args.count):
            if args.rate > 0:                       # pace: message i goes out no sooner than i / rate seconds in
                ahead = started + index / args.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            order_id = f"order-{run_id}-{index % args.keys}"
            seq = next_seq.get(order_id, 0)
            next_seq[order_id] = seq + 1
            message = Message(args.topic, b"step %d of %s" % (seq, order_id.encode()), tags="step", keys=order_id,
                              properties={"run": run_id, "seq": str(seq)})
            producer.send(message, sharding_key=order_id)
            progress.advance(task)
    print(f"sent {args.count} messages for {len(next_seq)} orders to {args.topic}")

    checker = OrderChecker(run_id, args.count)
    consumer = PushConsumer(args.group, namesrv=args.namesrv,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(args.topic, "step")
    consumer.register_orderly_listener(checker.on_messages)
    with consumer:
        finished = checker.done.wait(args.timeout)
    if not finished:
        print(f"timed out: consumed {checker.consumed} of {args.count} messages", file=sys.stderr)
        return 1
    if checker.violations:
        print(f"{len(checker.violations)} order violations, e.g. {checker.violations[:3]}", file=sys.stderr)
        return 1
    print(f"consumed {checker.consumed} messages in order ({len(checker.last_seq)} orders over "
          f"{len(checker.queues)} queues, {checker.duplicates} redelivered)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MQError as exc:          # e.g. no name server at --namesrv
        sys.exit(f"error: {exc}")
