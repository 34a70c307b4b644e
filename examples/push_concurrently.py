"""Concurrent consumption: a push consumer hands batches to a plain listener on a thread pool.

Run a name server and a broker first (``rocketflow dev``), then:

    python examples/push_concurrently.py [--namesrv 127.0.0.1:9876] [--count 200] [--threads 8]

The script sends ``--count`` messages, then consumes them with ``register_concurrent_listener``:
the listener (a plain function) runs on up to ``consume_thread_max`` threads at once, gets up to
``consume_message_batch_max_size`` messages per call, and answers CONSUME_SUCCESS (or
RECONSUME_LATER to have a message retried later). It prints ``consumed N messages concurrently``.
Messages of earlier runs in the topic are skipped.
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
    parser = argparse.ArgumentParser(description="Concurrent push consumer on a thread pool.")
    parser.add_argument("--namesrv", default=DEFAULT_NAMESRV, help="name server(s), host:port[;host:port]")
    parser.add_argument("--topic", default="ExampleConcurrently")
    parser.add_argument("--group", default="example-concurrent-consumer")
    parser.add_argument("--count", type=int, default=200, help="messages to send and consume")
    parser.add_argument("--threads", type=int, default=8, help="consume threads (consume_thread_max)")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    if not 1 <= args.threads <= 1000:
        parser.error("--threads must be in 1..1000")
    ensure_topic(args.namesrv, args.topic)
    run_id = uuid.uuid4().hex[:12]

    with Producer("example-concurrent-producer", namesrv=args.namesrv) as producer:
        producer.send_batch([Message(args.topic, b"payload %d" % index, tags="work", keys=f"{run_id}-{index}",
                                     properties={"run": run_id}) for index in range(args.count)])
    print(f"sent {args.count} messages to {args.topic} in one batch")

    lock = threading.Lock()
    seen: set[str] = set()
    threads_used: set[str] = set()
    done = threading.Event()

    def on_messages(messages: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        time.sleep(0.005)                      # stand-in for real work (I/O, a database call, ...)
        with lock:
            for message in messages:
                if message.properties.get("run") == run_id:
                    seen.add(message.keys or "")
            threads_used.add(threading.current_thread().name)
            if len(seen) >= args.count:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(args.group, namesrv=args.namesrv,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            consume_thread_min=args.threads, consume_thread_max=args.threads,
                            consume_message_batch_max_size=4)
    consumer.subscribe(args.topic, "work")
    consumer.register_concurrent_listener(on_messages)
    with consumer:
        finished = done.wait(args.timeout)
    if not finished:
        print(f"timed out: consumed {len(seen)} of {args.count} messages", file=sys.stderr)
        return 1
    print(f"consumed {len(seen)} messages concurrently on {len(threads_used)} threads")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MQError as exc:          # e.g. no name server at --namesrv
        sys.exit(f"error: {exc}")
