"""A push consumer process for the multi-process tests.

Consumes one topic and appends one JSON line per listener call to ``--out``: pid, client id,
queue, the process queue's identity (a new one each time this process takes the queue again),
offsets, keys, reconsume times and the wall-clock start and end of the call. Prints ``READY`` once
started; SIGTERM shuts the consumer down cleanly (then ``STOPPED``); SIGKILL is the crash test.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from rocketflow import PushConsumer
from rocketflow.client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
)
from rocketflow.protocol.message import MessageExt, MessageQueue


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

    def record(msgs: list[MessageExt], mq: MessageQueue, start: float) -> None:
        end = time.time()
        pq = consumer.rebalance.process_queue_table.get(mq)
        line = json.dumps({
            "pid": pid, "client": consumer.client_id, "topic": mq.topic, "queue": mq.queue_id,
            "pq": id(pq) if pq is not None else 0, "offsets": [msg.queue_offset for msg in msgs],
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
