"""An ``async def`` listener: consumption on the client's event loop, many calls in flight at once.

Run a name server and a broker first (``rocketflow dev``), then:

    python examples/async_listener.py [--namesrv 127.0.0.1:9876] [--count 200]

A listener written as ``async def`` is awaited on the client instance's event loop instead of
running on a thread pool; at most ``consume_thread_max`` calls are in flight at once. It must not
block (use ``await`` for I/O, e.g. an HTTP or database client built on asyncio). Here each call
awaits a 20 ms "request"; the script prints ``consumed N messages with an async listener`` and how
many calls overlapped. Messages of earlier runs in the topic are skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
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
    parser = argparse.ArgumentParser(description="A push consumer with an async def listener.")
    parser.add_argument("--namesrv", default=DEFAULT_NAMESRV, help="name server(s), host:port[;host:port]")
    parser.add_argument("--topic", default="ExampleAsync")
    parser.add_argument("--group", default="example-async-consumer")
    parser.add_argument("--count", type=int, default=200, help="messages to send and consume")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    ensure_topic(args.namesrv, args.topic)
    run_id = uuid.uuid4().hex[:12]

    with Producer("example-async-producer", namesrv=args.namesrv) as producer:
        producer.send_batch([Message(args.topic, b"payload %d" % index, keys=f"{run_id}-{index}",
                                     properties={"run": run_id}) for index in range(args.count)])
    print(f"sent {args.count} messages to {args.topic}")

    # The listener runs on the event loop thread only, so plain counters need no lock there;
    # `done` is a threading.Event because the main thread waits on it.
    seen: set[str] = set()
    in_flight = 0
    max_in_flight = 0
    done = threading.Event()

    async def on_messages(messages: list[MessageExt],
                          context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        nonlocal in_flight, max_in_flight
        in_flight += 1
        max_in_flight = max(max_in_flight, in_flight)
        try:
            await asyncio.sleep(0.02)          # stand-in for an awaited request
        finally:
            in_flight -= 1
        for message in messages:
            if message.properties.get("run") == run_id:
                seen.add(message.keys or "")
        if len(seen) >= args.count:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(args.group, namesrv=args.namesrv,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(args.topic)
    consumer.register_concurrent_listener(on_messages)
    with consumer:
        finished = done.wait(args.timeout)
    if not finished:
        print(f"timed out: consumed {len(seen)} of {args.count} messages", file=sys.stderr)
        return 1
    print(f"consumed {len(seen)} messages with an async listener (up to {max_in_flight} calls in flight)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MQError as exc:          # e.g. no name server at --namesrv
        sys.exit(f"error: {exc}")
