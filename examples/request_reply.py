"""Request-reply: a producer sends a request and waits for the answer a consumer sends back.

Run a name server and a broker first (``rocketflow dev``), then:

    python examples/request_reply.py [--namesrv 127.0.0.1:9876] [--count 20]

* The "server" is an ordinary push consumer of the topic. For each request it computes an answer
  and sends it with ``create_reply_message(request, body)`` through an ordinary producer; the broker
  pushes the reply straight to the client that asked.
* The "client" calls ``Producer.request(msg, timeout)``, which returns the reply message (or raises
  ``MQTimeoutError``), first one at a time, then ``request_async`` calls in flight together.

Prints how many requests were answered and the round-trip times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from rocketflow import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer
from rocketflow.client import ConsumeConcurrentlyContext, create_reply_message
from rocketflow.client.admin import Admin
from rocketflow.client.errors import MQError
from rocketflow.protocol.message import MessageConst

DEFAULT_NAMESRV = os.environ.get("ROCKETFLOW_NAMESRV", "127.0.0.1:9876")


def main() -> int:
    parser = argparse.ArgumentParser(description="Producer.request and a consumer answering it.")
    parser.add_argument("--namesrv", default=DEFAULT_NAMESRV, help="name server(s), host:port[;host:port]")
    parser.add_argument("--topic", default="ExampleRequests")
    parser.add_argument("--group", default="example-rpc")
    parser.add_argument("--count", type=int, default=20, help="requests of each kind")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds a request waits for its reply")
    args = parser.parse_args()
    with Admin(args.namesrv) as admin:
        admin.ensure_topic(args.topic, queues=4)
    replier = Producer(f"{args.group}-replier", namesrv=args.namesrv)
    server = PushConsumer(f"{args.group}-server", namesrv=args.namesrv,
                          consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)

    def answer(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        for msg in msgs:
            if MessageConst.REPLY_TO_CLIENT not in msg.properties:
                continue  # not a request
            numbers = [int(word) for word in msg.body.split()]
            try:
                replier.send(create_reply_message(msg, str(sum(numbers)).encode()))
            except MQError as exc:  # e.g. a request of an earlier run whose client is gone
                print(f"cannot answer {msg.body!r}: {exc}", file=sys.stderr)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    server.subscribe(args.topic, "*")
    server.register_concurrent_listener(answer)
    try:
        with replier, server, Producer(f"{args.group}-client", namesrv=args.namesrv) as client:
            times: list[float] = []
            for n in range(args.count):
                began = time.perf_counter()
                reply = client.request(Message(args.topic, f"{n} {n} 1".encode()), timeout=args.timeout)
                times.append((time.perf_counter() - began) * 1000)
                if int(reply.body) != 2 * n + 1:
                    print(f"error: request {n} got {reply.body!r}", file=sys.stderr)
                    return 1
            began = time.perf_counter()
            futures = [client.request_async(Message(args.topic, f"{n} 1000".encode()), timeout=args.timeout)
                       for n in range(args.count)]
            sums = [int(future.result(args.timeout + 5).body) for future in futures]
            together = (time.perf_counter() - began) * 1000
            if sums != [n + 1000 for n in range(args.count)]:
                print(f"error: async replies {sums}", file=sys.stderr)
                return 1
    except MQError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"answered {args.count} requests one at a time (median {statistics.median(times):.1f} ms, "
          f"max {max(times):.1f} ms) and {args.count} in flight together ({together:.0f} ms in all)")
    return 0

if __name__ == "__main__":
    sys.exit(main())
