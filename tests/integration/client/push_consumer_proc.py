"""A push consumer process for the multi-process tests.

Consumes one topic and appends one JSON line per listener call to ``--out``: pid, client id,
queue, a token of the process queue (a new one each time this process takes the queue again;
never reused, unlike ``id()`` of a collected object), offsets, keys, reconsume times and the
wall-clock start and end of the call. Prints ``READY`` once
started; SIGTERM shuts the consumer down cleanly (then ``STOPPED``); SIGKILL is the crash test.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import threading
import time
import weakref
from typing import Any

from rocketflow import PushConsumer
from rocketflow.client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
)
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.protocol.message import MessageExt, MessageQueue


class ProcessQueueTokens:
    """A token per process queue object, given on first sight, unique for the life of the process."""

    def __init__(self) -> None:
        self._tokens: weakref.WeakKeyDictionary[ProcessQueue, int] = weakref.WeakKeyDictionary()
        self._next = itertools.count(1)
        self._lock = threading.Lock()

    def token(self, pq: ProcessQueue | None) -> int:
        """``pq``'s token; 0 for None."""
        if pq is None:
            return 0
        with self._lock:
            token = self._tokens.get(pq)
            if token is None:
                token = self._tokens[pq] = next(self._next)
            return token


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--mode", choices=("orderly", "concurrent", "key-ordered"), default="concurrent")
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--settings", default="{}", help="JSON object of PushConsumer keyword arguments")
    args = parser.parse_args()
    settings: dict[str, Any] = json.loads(args.settings)

    consumer = PushConsumer(args.group, namesrv=args.namesrv, instance_name=args.instance,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **settings)
    out = open(args.out, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed after shutdown
    write_lock = threading.Lock()
    pid = os.getpid()
    pause = args.sleep_ms / 1000
    tokens = ProcessQueueTokens()

    def record(msgs: list[MessageExt], mq: MessageQueue, start: float) -> None:
        end = time.time()
        pq = consumer.rebalance.process_queue_table.get(mq)
        line = json.dumps({
            "pid": pid, "client": consumer.client_id, "topic": mq.topic, "queue": mq.queue_id,
            "pq": tokens.token(pq), "offsets": [msg.queue_offset for msg in msgs],
            "keys": [msg.keys for msg in msgs], "reconsume": [msg.reconsume_times for msg in msgs],
            "start": start, "end": end,
        })
        with write_lock:
            out.write(line + "\n")

    def orderly(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        start = time.time()
        if pause:
            time.sleep(pause)
        record(msgs, context.message_queue, start)
        return ConsumeOrderlyStatus.SUCCESS

    def concurrent(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        start = time.time()
        if pause:
            time.sleep(pause)
        record(msgs, context.message_queue, start)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.subscribe(args.topic, "*")
    if args.mode == "orderly":
        consumer.register_orderly_listener(orderly)
    elif args.mode == "key-ordered":
        consumer.register_key_ordered_listener(orderly)
    else:
        consumer.register_concurrent_listener(concurrent)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer.start()
    print("READY", consumer.client_id, flush=True)
    while not stop.wait(0.1):
        pass
    consumer.shutdown()
    out.close()
    print("STOPPED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
