"""Key-ordered consumption benchmark: `register_key_ordered_listener` versus orderly and concurrent modes.

Run `python bench/key_ordered_bench.py [--messages N]` from the repo root. It starts `rocketflow dev`
as a subprocess (free ports, temporary store), loads ``--messages`` (default 50,000) 100-byte
messages over ``--keys`` (default 1,000) sharding keys into a topic of 8 queues (untimed), then
consumes them all with four new groups from the first offset, one after the other:

1. a listener that sleeps ``--sleep-ms`` (default 5 ms): orderly mode, then key-ordered mode (the
   target: key-ordered >= 10x orderly);
2. a no-op listener: concurrent mode, then key-ordered mode (target >= 0.9x).

Both modes of a pair run with the same settings: ``--threads`` consume threads (default 128: a
sleeping listener needs threads to overlap; orderly mode cannot use more than one per queue) and
key-ordered's ``--max-in-flight`` (default 64) keys per queue. Each listener checks that every key's
sequence numbers arrive in order (the concurrent one counts, as it does not promise it). ``msg/s`` is
messages over the time from the first message to the last (steady throughput; the ratios use it),
``msg/s incl. start`` over the time from `start()` (rebalance, broker locks and first pulls included)
to the last. Results: a rich table and a JSON file under bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "src"))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from broker_bench import BrokerProcess, CpuMeter, machine_info  # noqa: E402

from rocketflow import Message, Producer, PushConsumer  # noqa: E402
from rocketflow.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, ConsumeOrderlyStatus  # noqa: E402
from rocketflow.protocol.bodies import TopicConfig  # noqa: E402
from rocketflow.protocol.message import MessageExt  # noqa: E402

QUEUES = 8
TOPIC = "KeyOrderedBench"
CONSUME_TIMEOUT = 1800.0
IN_FLIGHT_SENDS = 512


def load(namesrv: str, broker_addr: str, count: int, keys: int) -> float:
    """Create the topic and send ``count`` messages ``<key>:<seq>`` by sharding key; returns seconds."""
    producer = Producer("key_ordered_bench_pg", namesrv)
    producer.start()
    try:
        instance = producer.instance
        instance.run(instance.api.create_topic(broker_addr, TopicConfig(TOPIC, QUEUES, QUEUES)))
        deadline = time.monotonic() + 60
        while True:
            route = instance.run(instance.api.get_topic_route(TOPIC))
            if route is not None and route.queue_datas and route.queue_datas[0].write_queue_nums == QUEUES:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"topic {TOPIC} was not routed in time")
            time.sleep(0.1)
        pad = b"x" * 80
        started = time.perf_counter()
        pending: list[Future[Any]] = []
        for index in range(count):
            key = f"key{index % keys}"
            body = f"{key}:{index // keys}:".encode() + pad
            pending.append(producer.send_async(Message(TOPIC, body[:100]), sharding_key=key))
            if len(pending) >= IN_FLIGHT_SENDS:
                for future in pending:
                    future.result(60)
                pending.clear()
        for future in pending:
            future.result(60)
        return time.perf_counter() - started
    finally:
        producer.shutdown()


class OrderCheck:
    """Counts messages and, per key, sequence numbers that did not follow the previous one."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.counter = itertools.count(1)
        self.done = threading.Event()
        self.last: dict[str, int] = {}
        self.out_of_order = 0
        self.first = 0.0

    def note(self, msg: MessageExt) -> None:
        key, seq_text, _ = msg.body.split(b":", 2)
        name, seq = key.decode(), int(seq_text)
        # one key is never consumed by two threads at once in the ordered modes
        if seq != self.last.get(name, -1) + 1:
            self.out_of_order += 1
        self.last[name] = seq
        seen = next(self.counter)
        if seen == 1:
            self.first = time.perf_counter()
        if seen == self.count:
            self.done.set()


def consume(namesrv: str, mode: str, count: int, sleep_s: float, threads: int, max_in_flight: int) -> dict[str, Any]:
    """One new group of ``mode`` (orderly / key-ordered / key-ordered-async / concurrent) until ``count`` arrived."""
    check = OrderCheck(count)

    def orderly(msgs: list[MessageExt], context: Any) -> ConsumeOrderlyStatus:
        for msg in msgs:
            if sleep_s:
                time.sleep(sleep_s)
            check.note(msg)
        return ConsumeOrderlyStatus.SUCCESS

    async def orderly_async(msgs: list[MessageExt], context: Any) -> ConsumeOrderlyStatus:
        for msg in msgs:
            if sleep_s:
                await asyncio.sleep(sleep_s)
            check.note(msg)
        return ConsumeOrderlyStatus.SUCCESS

    def concurrent(msgs: list[MessageExt], context: Any) -> ConsumeConcurrentlyStatus:
        for msg in msgs:
            if sleep_s:
                time.sleep(sleep_s)
            check.note(msg)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    group = f"key_ordered_bench_{mode.replace('-', '_')}_{'sleep' if sleep_s else 'noop'}"
    consumer = PushConsumer(group, namesrv, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            consume_thread_min=threads, consume_thread_max=threads)
    consumer.subscribe(TOPIC, "*")
    register: dict[str, Callable[[], None]] = {
        "orderly": lambda: consumer.register_orderly_listener(orderly),
        "key-ordered": lambda: consumer.register_key_ordered_listener(orderly, max_in_flight_per_queue=max_in_flight),
        "key-ordered-async": lambda: consumer.register_key_ordered_listener(orderly_async,
                                                                            max_in_flight_per_queue=max_in_flight),
        "concurrent": lambda: consumer.register_concurrent_listener(concurrent),
    }
    register[mode]()
    meter = CpuMeter(psutil.Process())
    meter.start()
    started = time.perf_counter()
    consumer.start()
    try:
        if not check.done.wait(CONSUME_TIMEOUT):
            raise SystemExit(f"{mode} consumer got only {next(check.counter) - 1} of {count} messages")
        finished = time.perf_counter()
        seconds = finished - started
        cpu = meter.stop()
    finally:
        consumer.shutdown()
    return {"mode": mode, "listener": f"sleep {sleep_s * 1000:g} ms" if sleep_s else "no-op",
            "messages": count, "seconds": round(seconds, 3), "msgs_per_s": round(count / seconds, 1),
            "first_to_last_msgs_per_s": round(count / max(finished - check.first, 1e-9), 1),
            "client_cpu_s": round(cpu, 2), "out_of_order": check.out_of_order}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--sleep-ms", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=128, help="consume threads of every mode")
    parser.add_argument("--max-in-flight", type=int, default=64, help="key-ordered: keys in flight per queue")
    parser.add_argument("--async-row", action="store_true",
                        help="also run key-ordered with an async def listener (asyncio.sleep) in the sleep phase")
    args = parser.parse_args()
    if args.messages < 1 or args.keys < 1:
        raise SystemExit("--messages and --keys must be >= 1")
    console = Console(width=max(140, Console().width))
    logging.getLogger("rocketflow").setLevel(logging.ERROR)     # flow-control notices are expected here
    sleep_s = args.sleep_ms / 1000
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="key-ordered-bench-") as store:
        broker = BrokerProcess(Path(store))
        broker.start()
        try:
            console.print(f"loading {args.messages:,} messages over {args.keys:,} keys into {QUEUES} queues ...")
            load_seconds = load(broker.namesrv_addr, broker.broker_addr, args.messages, args.keys)
            console.print(f"loaded in {load_seconds:.1f} s")
            sleep_modes = ["orderly", "key-ordered"] + (["key-ordered-async"] if args.async_row else [])
            for mode in sleep_modes:
                console.print(f"consuming: {mode}, sleep {args.sleep_ms:g} ms ...")
                rows.append(consume(broker.namesrv_addr, mode, args.messages, sleep_s, args.threads,
                                    args.max_in_flight))
            for mode in ("concurrent", "key-ordered"):
                console.print(f"consuming: {mode}, no-op ...")
                rows.append(consume(broker.namesrv_addr, mode, args.messages, 0.0, args.threads, args.max_in_flight))
        finally:
            broker.stop()

    def rate(mode: str, listener_sleeps: bool) -> float:
        return next(row["first_to_last_msgs_per_s"] for row in rows
                    if row["mode"] == mode and (row["listener"] != "no-op") == listener_sleeps)

    ratios = {"key_ordered_vs_orderly_sleep": round(rate("key-ordered", True) / rate("orderly", True), 2),
              "key_ordered_vs_concurrent_noop": round(rate("key-ordered", False) / rate("concurrent", False), 3)}
    if args.async_row:
        ratios["key_ordered_async_vs_orderly_sleep"] = round(rate("key-ordered-async", True) / rate("orderly", True), 2)
    baseline = {"sleep": rate("orderly", True), "no-op": rate("concurrent", False)}
    table = Table(title=f"key-ordered consumption: {args.messages:,} messages, {args.keys:,} keys, {QUEUES} queues, "
                        f"{args.threads} consume threads, {args.max_in_flight} keys in flight per queue")
    for column in ("listener", "mode", "msg/s", "msg/s incl. start", "seconds", "client CPU s", "out of order",
                   "ratio", "target"):
        table.add_column(column, justify="left" if column in ("listener", "mode") else "right")
    for row in rows:
        sleeps = row["listener"] != "no-op"
        base = baseline["sleep" if sleeps else "no-op"]
        is_base = row["mode"] == ("orderly" if sleeps else "concurrent")
        target = "" if is_base else (">= 10x" if sleeps else ">= 0.9x")
        ratio_text = "1.00x (base)" if is_base else f"{row['first_to_last_msgs_per_s'] / base:.2f}x"
        table.add_row(row["listener"], row["mode"], f"{row['first_to_last_msgs_per_s']:,.0f}",
                      f"{row['msgs_per_s']:,.0f}", f"{row['seconds']:.2f}",
                      f"{row['client_cpu_s']:.2f}", str(row["out_of_order"]), ratio_text, target)
    console.print(table)
    results = {"messages": args.messages, "keys": args.keys, "queues": QUEUES, "sleep_ms": args.sleep_ms,
               "threads": args.threads, "max_in_flight_per_queue": args.max_in_flight, "rows": rows,
               "ratios": ratios, "machine": machine_info()}
    out_dir = REPO_ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"key_ordered_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    console.print(f"ratios: {ratios}\nresults: {out}")


if __name__ == "__main__":
    main()
