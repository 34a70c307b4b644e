"""The pull consumer: assign queues, seek, poll batches, commit offsets yourself.

Run a name server and a broker first (``rocketflow dev``), then:

    python examples/pull_consumer.py [--namesrv 127.0.0.1:9876] [--count 100]

`PullConsumer` (RocketMQ's lite pull consumer) pulls in the background and hands out batches from
`poll`. Here it is given every queue of the topic with `assign` (no rebalance), moved to the end of
each queue with `seek_to_end`, then the script sends ``--count`` messages and polls until it has
them all. ``auto_commit=False``: the script commits with `commit_sync` once it is done and prints
the committed offsets and ``polled N messages``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from rocketflow import Message, Producer, PullConsumer
from rocketflow.client.admin import Admin
from rocketflow.client.errors import MQError

DEFAULT_NAMESRV = os.environ.get("ROCKETFLOW_NAMESRV", "127.0.0.1:9876")


def ensure_topic(namesrv: str, topic: str, queues: int = 4) -> None:
    """Create ``topic`` unless the name server already routes it, then wait for its route."""
    with Admin(namesrv) as admin:
        admin.ensure_topic(topic, queues=queues)


def main() -> int:
    parser = argparse.ArgumentParser(description="Pull consumer: assign, seek, poll, commit.")
    parser.add_argument("--namesrv", default=DEFAULT_NAMESRV, help="name server(s), host:port[;host:port]")
    parser.add_argument("--topic", default="ExamplePull")
    parser.add_argument("--group", default="example-pull-consumer")
    parser.add_argument("--count", type=int, default=100, help="messages to send and poll")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    ensure_topic(args.namesrv, args.topic)

    with PullConsumer(args.group, namesrv=args.namesrv, auto_commit=False, pull_batch_size=16) as consumer:
        queues = consumer.fetch_message_queues(args.topic)
        consumer.assign(queues)
        for queue in queues:
            consumer.seek_to_end(queue)        # only what is sent from now on
        print(f"assigned {len(queues)} queues of {args.topic}")

        with Producer("example-pull-producer", namesrv=args.namesrv) as producer:
            for index in range(args.count):
                producer.send(Message(args.topic, b"record %d" % index, keys=f"record-{index}"))
        print(f"sent {args.count} messages")

        received: list[str] = []
        batches = 0
        deadline = time.monotonic() + args.timeout
        while len(received) < args.count and time.monotonic() < deadline:
            batch = consumer.poll(timeout=1.0)  # one queue's messages, in offset order
            if batch:
                batches += 1
                received.extend(message.keys or "" for message in batch)
        consumer.commit_sync()                  # the positions after the polled batches, to the broker
        committed = {queue.queue_id: consumer.committed(queue) for queue in queues}

    if sorted(received) != sorted(f"record-{index}" for index in range(args.count)):
        print(f"polled {len(received)} messages, expected the {args.count} sent", file=sys.stderr)
        return 1
    print(f"committed offsets by queue id: {committed}")
    print(f"polled {len(received)} messages in {batches} batches")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MQError as exc:          # e.g. no name server at --namesrv
        sys.exit(f"error: {exc}")
