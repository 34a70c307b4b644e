"""Send messages four ways: sync, async, oneway, and ordered by sharding key.

Run a name server and a broker first (``rocketflow dev``), then:

    python examples/producer.py [--namesrv 127.0.0.1:9876] [--topic ExampleProducer] [--count 20]

Each way sends ``--count`` messages: ``send`` waits for the broker's answer, ``send_async`` returns a
future, ``send_oneway`` does not wait for any answer, and ``send(..., sharding_key=...)`` puts every
message of one key on one queue (so an orderly consumer sees them in send order).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
from collections import Counter

from rocketflow import Message, Producer
from rocketflow.client import SendStatus
from rocketflow.client.admin import Admin
from rocketflow.client.errors import MQError

DEFAULT_NAMESRV = os.environ.get("ROCKETFLOW_NAMESRV", "127.0.0.1:9876")


def ensure_topic(namesrv: str, topic: str, queues: int = 4) -> None:
    """Create ``topic`` unless the name server already routes it, then wait for its route."""
    with Admin(namesrv) as admin:
        admin.ensure_topic(topic, queues=queues)


def main() -> int:
    parser = argparse.ArgumentParser(description="Send messages sync, async, oneway and by sharding key.")
    parser.add_argument("--namesrv", default=DEFAULT_NAMESRV, help="name server(s), host:port[;host:port]")
    parser.add_argument("--topic", default="ExampleProducer")
    parser.add_argument("--count", type=int, default=20, help="messages per way of sending")
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    ensure_topic(args.namesrv, args.topic)

    with Producer("example-producer", namesrv=args.namesrv) as producer:
        # 1. sync: wait for the broker's answer
        for index in range(args.count):
            result = producer.send(Message(args.topic, b"sync %d" % index, tags="sync", keys=f"sync-{index}"))
            if result.send_status is not SendStatus.SEND_OK:
                raise SystemExit(f"sync send not stored: {result}")
        print(f"sync: last message {result.msg_id} stored at {result.message_queue} offset {result.queue_offset}")

        # 2. async: a concurrent.futures.Future per message
        futures = [producer.send_async(Message(args.topic, b"async %d" % index, tags="async"))
                   for index in range(args.count)]
        statuses = Counter(future.result(timeout=10).send_status.name
                           for future in concurrent.futures.as_completed(futures))
        print(f"async: {dict(statuses)}")

        # 3. oneway: no answer at all (fastest, may lose messages if the broker is gone)
        for index in range(args.count):
            producer.send_oneway(Message(args.topic, b"oneway %d" % index, tags="oneway"))
        print(f"oneway: {args.count} messages written")

        # 4. ordered: one key -> one queue, in send order
        queues_by_key: dict[str, set[int]] = {}
        for index in range(args.count):
            key = f"order-{index % 3}"
            result = producer.send(Message(args.topic, b"step %d" % index, tags="ordered", keys=key),
                                   sharding_key=key)
            queues_by_key.setdefault(key, set()).add(result.message_queue.queue_id)
        print("ordered: " + ", ".join(f"{key} -> queue {sorted(ids)}" for key, ids in sorted(queues_by_key.items())))
        if any(len(ids) != 1 for ids in queues_by_key.values()):
            raise SystemExit("a sharding key used two queues")

    print(f"sent {4 * args.count} messages to {args.topic}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MQError as exc:          # e.g. no name server at --namesrv
        sys.exit(f"error: {exc}")
