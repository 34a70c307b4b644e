"""Producer on Apache's C++ client (PyPI ``rocketmq`` 0.4.4) for the interop tests.

Runs in its own venv (not rocketflow's). Sends the messages of a JSON-lines file, one object per
line: ``{"body": str, "keys": [str], "tags": str, "props": {str: str}, "shard": int}``; with
``--orderly`` each goes out with ``send_orderly`` and the queue ``shard % queue count``.

With ``--probe`` it first sends one probe message (tags ``rf-probe``, body ``probe <pid> <round>
<n>``) to every queue, round after round, until a line ``go`` arrives on stdin; the tests use the
probes to know that consumers have their queues before the real messages flow.

Prints one JSON line per event on stdout: ``probe``, ``sent`` (index, status, msg_id, queue offset,
queue_id when known, and the body, keys, tags and properties sent), ``error`` and finally ``done``
(before the client shuts down).

With ``--threads N`` the messages go out with ``send_sync`` from N threads (thread t sends every
N-th message from the t-th), each send retried by the application as `send_with_retries` says.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import threading
import time
from typing import Any

from rocketmq.client import Message, Producer

PROBE_TAGS = "rf-probe"


_output_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, **fields}, ensure_ascii=False) + "\n"
    with _output_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


class QueueChooser:
    """A `send_orderly` selector that picks ``arg % queue count`` and remembers both numbers."""

    def __init__(self) -> None:
        self.queue_count: int | None = None
        self.last_queue: int | None = None

    def __call__(self, queue_count: int, _message: object, arg: int) -> int:
        wanted = ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0]
        self.queue_count = queue_count
        self.last_queue = wanted % queue_count
        return self.last_queue


def build_message(topic: str, spec: dict[str, Any]) -> Message:
    message = Message(topic)
    message.set_body(spec["body"])
    if spec.get("tags"):
        message.set_tags(spec["tags"])
    if spec.get("keys"):
        message.set_keys(" ".join(spec["keys"]))
    for name, value in spec.get("props", {}).items():
        message.set_property(name, value)
    return message


#: Application-level attempts per orderly send (see `send_orderly`).
ORDERLY_ATTEMPTS = 10


def send_orderly(producer: Producer, message: Message, arg: int, chooser: QueueChooser, index: int | None) -> Any:
    """``send_orderly`` to the chosen queue, retried by the application on that same queue.

    The C++ client's own retries (``retry_times``) go to *another* queue, which breaks key order, so
    they are off. Retrying here matters because this client fails a send without ever writing it
    when another of its threads holds its connection-table lock at that moment (its
    ``try_lock_for`` gives up at once: "GetTransport ... get timed_mutex timeout" in its log), which
    happens now and then on a loaded machine. Each retry is reported as a ``send_retry`` event."""
    for attempt in range(1, ORDERLY_ATTEMPTS + 1):
        try:
            return producer.send_orderly(message, arg, retry_times=0, queue_selector=chooser)
        except Exception as error:
            if attempt == ORDERLY_ATTEMPTS:
                raise
            emit("send_retry", index=index, attempt=attempt, error=f"{type(error).__name__}: {error}"[:300])
            time.sleep(0.02 * attempt)
    raise AssertionError("unreachable")


def send_with_retries(producer: Producer, message: Message, index: int) -> Any:
    """``send_sync``, retried by the application when the client fails it before writing anything.

    With several sending threads this client fails a send at once whenever another thread holds
    its connection-table lock: ``try_lock_for`` in the wheel's librocketmq.so hands
    ``pthread_mutex_timedlock`` a steady-clock deadline (seconds since boot) where CLOCK_REALTIME
    is expected, so a contended lock times out immediately ("GetTransport of:... get timed_mutex
    timeout" in its log; after its own 3 tries it raises "No route info of this topic")."""
    for attempt in range(1, ORDERLY_ATTEMPTS + 1):
        try:
            return producer.send_sync(message)
        except Exception as error:
            if attempt == ORDERLY_ATTEMPTS:
                raise
            emit("send_retry", index=index, attempt=attempt, error=f"{type(error).__name__}: {error}"[:300])
            time.sleep(0.02 * attempt)
    raise AssertionError("unreachable")


def send_from_threads(producer: Producer, topic: str, specs: list[dict[str, Any]], threads: int) -> None:
    """``send_sync`` every spec from ``threads`` threads; raises the first failure once all stopped."""
    failures: list[BaseException] = []

    def work(first: int) -> None:
        try:
            for index in range(first, len(specs), threads):
                spec = specs[index]
                result = send_with_retries(producer, build_message(topic, spec), index)
                emit("sent", index=index, status=result.status.name, msg_id=result.msg_id, offset=result.offset,
                     queue_id=None, body=spec["body"], keys=" ".join(spec.get("keys", [])), tags=spec.get("tags"),
                     props=spec.get("props", {}))
        except BaseException as error:  # re-raised by send_from_threads
            failures.append(error)

    workers = [threading.Thread(target=work, args=(first,)) for first in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]


def wait_for_go(go: threading.Event) -> None:
    for line in sys.stdin:
        if line.strip() == "go":
            break
    go.set()


def send_probes(producer: Producer, topic: str, go: threading.Event, interval: float) -> None:
    chooser = QueueChooser()
    probe_round = 0
    while not go.is_set():
        queue_id = 0
        while chooser.queue_count is None or queue_id < chooser.queue_count:
            body = f"probe {os.getpid()} {probe_round} {queue_id}"
            message = build_message(topic, {"body": body, "tags": PROBE_TAGS})
            result = send_orderly(producer, message, queue_id, chooser, None)
            emit("probe", round=probe_round, queue_id=chooser.last_queue, offset=result.offset,
                 queue_count=chooser.queue_count)
            queue_id += 1
        probe_round += 1
        go.wait(interval)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", required=True, help="name server address, host:port")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True, help="producer group")
    parser.add_argument("--messages", required=True, help="JSON-lines file of messages to send")
    parser.add_argument("--orderly", action="store_true", help="send_orderly to queue shard %% queue count")
    parser.add_argument("--probe", action="store_true", help="send probe rounds until 'go' on stdin")
    parser.add_argument("--threads", type=int, default=1, help="send_sync from this many threads")
    parser.add_argument("--probe-interval", type=float, default=0.3, help="seconds between probe rounds")
    parser.add_argument("--timeout-ms", type=int, default=5000, help="send timeout")
    parser.add_argument("--access-key", default=None, help="ACL access key (set_session_credentials)")
    parser.add_argument("--secret-key", default=None, help="ACL secret key")
    args = parser.parse_args()

    with open(args.messages, encoding="utf-8") as file:
        specs = [json.loads(line) for line in file if line.strip()]

    producer = Producer(args.group, timeout=args.timeout_ms)
    producer.set_namesrv_addr(args.namesrv)
    if args.access_key is not None:
        producer.set_session_credentials(args.access_key, args.secret_key or "", "ALIYUN")
    producer.start()
    emit("started")
    status = 0
    try:
        if args.probe:
            go = threading.Event()
            threading.Thread(target=wait_for_go, args=(go,), daemon=True).start()
            send_probes(producer, args.topic, go, args.probe_interval)
        if args.threads > 1:
            send_from_threads(producer, args.topic, specs, args.threads)
        chooser = QueueChooser()
        for index, spec in enumerate(specs if args.threads <= 1 else []):
            message = build_message(args.topic, spec)
            if args.orderly:
                result = send_orderly(producer, message, int(spec["shard"]), chooser, index)
                queue_id = chooser.last_queue
            else:
                result = producer.send_sync(message)
                queue_id = None
            emit("sent", index=index, status=result.status.name, msg_id=result.msg_id, offset=result.offset,
                 queue_id=queue_id, body=spec["body"], keys=" ".join(spec.get("keys", [])), tags=spec.get("tags"),
                 props=spec.get("props", {}))
    except Exception as error:  # the C++ client reports every failure through one exception family
        emit("error", error=f"{type(error).__name__}: {error}")
        status = 1
    # "done" comes before the shutdown: every send has its answer by now, and the client's shutdown
    # sometimes aborts the process ("terminate called after throwing an instance of
    # 'boost::thread_interrupted'", seen once in CI after all 5,000 sends had succeeded)
    emit("done", sent=len(specs) if status == 0 else None)
    producer.shutdown()
    return status


if __name__ == "__main__":
    code = main()
    # Skip interpreter teardown: the binding's __del__ would shut the client down a second time.
    os._exit(code)
