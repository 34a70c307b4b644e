"""The 0.4.x README's calls of ``rocketmq.client``, run on Apache's C++ client (PyPI ``rocketmq`` 0.4.4)
or on `rocketflow.compat.rocketmq.client`, printing what they observe as JSON lines.

``--impl real`` imports ``rocketmq.client`` (run it in the C++ client's venv), ``--impl compat`` imports
``rocketflow.compat.rocketmq.client``. Every observation is one line ``{"event": "observed", "name": ...,
"value": ...}`` with values that do not depend on the run (no ids, timestamps or topic names), so the
two implementations' outputs can be compared line by line; ``done`` ends a run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import threading
import time
from collections import Counter
from typing import Any

_lock = threading.Lock()


def observe(name: str, value: Any) -> None:
    with _lock:
        sys.stdout.write(json.dumps({"event": "observed", "name": name, "value": value}) + "\n")
        sys.stdout.flush()


def error_name(call: Any) -> str | None:
    try:
        call()
    except Exception as exc:  # the class is the observation
        return type(exc).__name__
    return None


def described(msg: Any, topic: str) -> dict[str, Any]:
    """A received message, without what differs between runs (ids, times, the topic's name)."""
    return {
        "class": type(msg).__name__, "topic_is_ours": msg.topic == topic, "body": repr(msg.body),
        "keys": repr(msg.keys), "tags": repr(msg.tags), "property": repr(msg.get_property("property")),
        "missing_property": repr(msg.get_property("missing")), "item": repr(msg["property"]),
        "queue_id": msg.queue_id, "queue_offset": msg.queue_offset, "id_type": type(msg.id).__name__,
        "id_length": len(msg.id), "reconsume_times": msg.reconsume_times,
        "delay_time_level": msg.delay_time_level, "str": str(msg), "bytes": repr(bytes(msg)),
        "repr_head": repr(msg).split(" id=")[0].replace(repr(topic), "TOPIC"),
        "store_size_positive": msg.store_size > 0, "born_before_store": 0 < msg.born_timestamp <= msg.store_timestamp,
        "prepared_transaction_offset": msg.prepared_transaction_offset,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["real", "compat"], required=True)
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--prefix", required=True, help="prefix of this run's topics and groups")
    args = parser.parse_args()
    rmq = importlib.import_module("rocketmq.client" if args.impl == "real" else "rocketflow.compat.rocketmq.client")
    prefix = args.prefix

    # ---------------------------------------------------------------- producer
    producer = rmq.Producer(f"{prefix}_pg")
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    observe("second start", error_name(producer.start))

    plain = f"{prefix}_Plain"
    for index in range(3):
        msg = rmq.Message(plain)
        msg.set_keys(f"k{index}")
        msg.set_tags(f"T{index % 2}")
        msg.set_property("property", f"v{index}")
        msg.set_body(f"body {index}")
        ret = producer.send_sync(msg)
        observe(f"send_sync {index}", [type(ret).__name__, repr(ret.status), str(ret.status), ret.status == 0,
                                       type(ret.msg_id).__name__, len(ret.msg_id), type(ret.offset).__name__])

    orderly = f"{prefix}_Orderly"
    for arg in range(6):
        msg = rmq.Message(orderly)
        msg.set_property("property", f"o{arg}")
        msg.set_body(f"orderly {arg}")
        ret = producer.send_orderly(msg, arg)
        observe(f"send_orderly {arg}", [repr(ret.status), ret.offset])

    oneway = rmq.Message(plain)  # its queue is the round robin's choice, which differs between the clients
    oneway.set_body("oneway")
    observe("send_oneway returns", repr(producer.send_oneway(oneway)))
    observe("send_sync without body", error_name(lambda: producer.send_sync(rmq.Message(plain))))

    results: list[Any] = []
    failures: list[Any] = []
    answered = threading.Event()

    def on_success(result: Any) -> None:
        results.append([type(result).__name__, repr(result.status)])
        answered.set()

    def on_exception(exc: Any) -> None:
        failures.append(type(exc).__name__)
        answered.set()

    msg = rmq.Message(plain)
    msg.set_body("async")
    observe("send_async returns", repr(producer.send_async(msg, on_success, on_exception)))
    observe("send_async answered", answered.wait(20))
    observe("send_async callbacks", [results, failures])
    observe("send_async without body", error_name(lambda: producer.send_async(rmq.Message(plain), on_success,
                                                                             on_exception)))
    time.sleep(0.5)
    observe("callbacks after the refused send_async", len(results) + len(failures))

    # ---------------------------------------------------------------- pull consumer
    puller = rmq.PullConsumer(f"{prefix}_pull")
    puller.set_namesrv_addr(args.namesrv)
    puller.start()
    observe("pull", [described(msg, orderly) for msg in puller.pull(orderly)])
    observe("pull again", [described(msg, orderly) for msg in puller.pull(orderly)])
    observe("offset table", {key.replace(orderly, "TOPIC"): value for key, value in
                             rmq.PullConsumer.offset_table.items() if orderly in key})
    observe("pull by tag", sorted(repr(msg.body) for msg in puller.pull(plain, "T1")))
    observe("pull by tag again", sorted(repr(msg.body) for msg in puller.pull(plain)))
    puller.shutdown()

    # ---------------------------------------------------------------- push consumer
    lonely = rmq.PushConsumer(f"{prefix}_nosub")
    lonely.set_namesrv_addr(args.namesrv)
    observe("push start without subscribe", error_name(lonely.start))

    pushed = f"{prefix}_Push"
    for body in ("returns None", "returns 1", "raises once"):
        msg = rmq.Message(pushed)
        msg.set_body(body)
        producer.send_sync(msg)
    deliveries: list[tuple[str, int]] = []
    raised = threading.Event()

    def callback(msg: Any) -> Any:
        body = msg.body.decode()
        deliveries.append((body, msg.reconsume_times))
        if body == "returns 1":
            return 1
        if body == "raises once" and not raised.is_set():
            raised.set()
            raise RuntimeError("failing once")
        return None

    consumer = rmq.PushConsumer(f"{prefix}_push")
    consumer.set_namesrv_addr(args.namesrv)
    consumer.subscribe(pushed, callback)
    consumer.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(deliveries) < 4:
        time.sleep(0.1)
    time.sleep(3)  # a message answered with "later" would come back within 1 s (delay levels of the test)
    consumer.shutdown()
    observe("push deliveries", sorted(Counter(body for body, _ in deliveries).items()))
    observe("push reconsume times", sorted(deliveries))

    producer.shutdown()
    observe("send after shutdown", error_name(lambda: producer.send_sync(oneway)))
    with _lock:
        sys.stdout.write(json.dumps({"event": "done"}) + "\n")
        sys.stdout.flush()
    # Exit before the clients are released: the C++ binding's __del__ shuts them down (again), and that
    # of a push consumer that never started does not return.
    os._exit(0)


if __name__ == "__main__":
    main()
