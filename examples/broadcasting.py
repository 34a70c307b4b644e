"""Broadcasting: every consumer of the group gets every message.

Run a name server and a broker first (``rocketflow dev``), then:

    python examples/broadcasting.py [--namesrv 127.0.0.1:9876] [--count 50] [--consumers 2]

In the default CLUSTERING model a group's consumers share the queues, so each message reaches one
of them. With ``message_model=MessageModel.BROADCASTING`` each consumer reads every queue and keeps
its own offsets in a local file (``local_offset_store_dir``, default ``~/.rocketmq_offsets``; a
temporary directory here). Two consumers in one process need distinct ``instance_name`` values
(in separate processes they differ anyway). Prints ``each of 2 consumers received all N messages``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid

from rocketflow import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageExt,
    MessageModel,
    Producer,
    PushConsumer,
)
from rocketflow.client import ConsumeConcurrentlyContext
from rocketflow.client.admin import Admin
from rocketflow.client.errors import MQError

DEFAULT_NAMESRV = os.environ.get("ROCKETFLOW_NAMESRV", "127.0.0.1:9876")


def ensure_topic(namesrv: str, topic: str, queues: int = 4) -> None:
    """Create ``topic`` unless the name server already routes it, then wait for its route."""
    with Admin(namesrv) as admin:
        admin.ensure_topic(topic, queues=queues)


class Inbox:
    """What one consumer received (of this run)."""

    def __init__(self, name: str, run_id: str, expected: int) -> None:
        self.name = name
        self.run_id = run_id
        self.expected = expected
        self.keys: set[str] = set()
        self.done = threading.Event()
        self._lock = threading.Lock()

    def on_messages(self, messages: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with self._lock:
            self.keys.update(message.keys or "" for message in messages if message.properties.get("run") == self.run_id)
            if len(self.keys) >= self.expected:
                self.done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def main() -> int:
    parser = argparse.ArgumentParser(description="Broadcasting consumers: each one gets every message.")
    parser.add_argument("--namesrv", default=DEFAULT_NAMESRV, help="name server(s), host:port[;host:port]")
    parser.add_argument("--topic", default="ExampleBroadcast")
    parser.add_argument("--group", default="example-broadcast-consumer")
    parser.add_argument("--count", type=int, default=50, help="messages to send")
    parser.add_argument("--consumers", type=int, default=2, help="consumers in the group")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    if args.consumers < 1:
        parser.error("--consumers must be at least 1")
    ensure_topic(args.namesrv, args.topic)
    run_id = uuid.uuid4().hex[:12]

    with Producer("example-broadcast-producer", namesrv=args.namesrv) as producer:
        for index in range(args.count):
            producer.send(Message(args.topic, b"notice %d" % index, keys=f"notice-{index}",
                                  properties={"run": run_id}))
    print(f"sent {args.count} messages to {args.topic}")

    with tempfile.TemporaryDirectory(prefix="rocketflow-offsets-") as offsets_dir:
        inboxes = [Inbox(f"consumer-{number}", run_id, args.count) for number in range(args.consumers)]
        consumers = []
        for inbox in inboxes:
            consumer = PushConsumer(args.group, namesrv=args.namesrv, message_model=MessageModel.BROADCASTING,
                                    consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                    instance_name=f"example-{inbox.name}", local_offset_store_dir=offsets_dir)
            consumer.subscribe(args.topic)
            consumer.register_concurrent_listener(inbox.on_messages)
            consumer.start()
            consumers.append(consumer)
        try:
            deadline = time.monotonic() + args.timeout
            finished = all(inbox.done.wait(max(0.0, deadline - time.monotonic())) for inbox in inboxes)
        finally:
            for consumer in consumers:
                consumer.shutdown()
    for inbox in inboxes:
        print(f"{inbox.name} received {len(inbox.keys)} messages")
    if not finished:
        print("timed out before every consumer had every message", file=sys.stderr)
        return 1
    print(f"each of {len(inboxes)} consumers received all {args.count} messages")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MQError as exc:          # e.g. no name server at --namesrv
        sys.exit(f"error: {exc}")
