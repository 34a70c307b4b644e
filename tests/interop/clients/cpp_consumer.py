"""Push consumer on Apache's C++ client (PyPI ``rocketmq`` 0.4.4) for the interop tests.

Runs in its own venv (not rocketflow's). Subscribes to one topic with ``*`` in clustering or
broadcasting mode, concurrently or ``--orderly``, and prints one JSON line per received message
(body, keys, tags, the user properties named by ``--props``, queue id, queue offset, msg id,
reconsume times, and the monotonic times the callback started and ended, which are comparable
across processes on one machine). Stops cleanly (the client commits its offsets) when stdin
closes, a line ``stop`` arrives, or on SIGTERM; prints ``started`` and ``stopped`` around its life.
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

from rocketmq.client import PushConsumer, RecvMessage
from rocketmq.ffi import MessageModel

_output_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, **fields}, ensure_ascii=False) + "\n"
    with _output_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="backslashreplace")


def watch_stdin(stop: threading.Event) -> None:
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stop.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", required=True, help="name server address, host:port")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True, help="consumer group")
    parser.add_argument("--model", choices=["clustering", "broadcasting"], default="clustering")
    parser.add_argument("--orderly", action="store_true", help="orderly consumption (broker queue locks)")
    parser.add_argument("--instance", help="instance name (part of the client id)")
    parser.add_argument("--props", default="", help="comma-separated user property names to report")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="sleep this long in every callback")
    parser.add_argument("--threads", type=int, help="consume thread count")
    args = parser.parse_args()

    property_names = [name for name in args.props.split(",") if name]
    delay = args.delay_ms / 1000.0
    model = MessageModel.BROADCASTING if args.model == "broadcasting" else MessageModel.CLUSTERING

    def on_message(message: RecvMessage) -> None:
        started = time.monotonic_ns()
        if delay:
            time.sleep(delay)
        emit(
            "recv",
            body=text(message.body),
            keys=text(message.keys),
            tags=text(message.tags),
            props={name: text(message.get_property(name)) for name in property_names},
            topic=message.topic,
            queue_id=message.queue_id,
            offset=message.queue_offset,
            msg_id=message.id,
            reconsume_times=message.reconsume_times,
            started_ns=started,
            ended_ns=time.monotonic_ns(),
        )

    consumer = PushConsumer(args.group, orderly=args.orderly, message_model=model)
    consumer.set_namesrv_addr(args.namesrv)
    if args.instance:
        consumer.set_instance_name(args.instance)
    if args.threads:
        consumer.set_thread_count(args.threads)
    consumer.subscribe(args.topic, on_message)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=watch_stdin, args=(stop,), daemon=True).start()

    consumer.start()
    emit("started")
    while not stop.wait(0.2):
        pass
    consumer.shutdown()
    emit("stopped")
    return 0


if __name__ == "__main__":
    code = main()
    # Skip interpreter teardown: the binding's __del__ would shut the client down a second time.
    os._exit(code)
