"""The consumers' hot paths without a broker, in seconds: pull loop, process queue, consume service, poll.

Run `python bench/client_path_bench.py [messages per queue] [rounds]` from the repo root. A real
`PushConsumer` (concurrent, then orderly) and a real `PullConsumer` run against a name server
nobody answers, so nothing but the benchmarked path runs: their pull API is replaced by one that
answers from pre-encoded bodies of 32 records of 100 bytes, on 4 queues. The push consumers'
listeners do nothing; the pull consumer is polled until every message came. Printed per round:
messages per second (wall time) and the process's CPU time per message in microseconds, which
depends less on what else the machine runs.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from rocketflow import PullConsumer, PushConsumer
from rocketflow.client import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus
from rocketflow.client.api import PullResult, PullStatus
from rocketflow.client.consumer.fetcher import PullAPIWrapper, PullRequest
from rocketflow.protocol.codec import encode_record
from rocketflow.protocol.message import MessageExt, MessageQueue

TOPIC = "BenchT"
BATCH = 32
QUEUES = 4
#: Settings that keep the client instance's periodic work out of the way.
QUIET: dict[str, Any] = {"namesrv": "127.0.0.1:1", "heartbeat_first_delay": 3600, "persist_first_delay": 3600,
                         "route_first_delay": 3600, "rebalance_interval": 3600}


def encoded_bodies(total: int) -> dict[int, bytes]:
    """Pull answers by their first offset: ``BATCH`` records each."""
    return {first: b"".join(encode_record(MessageExt(TOPIC, b"x" * 100, queue_id=0, queue_offset=offset,
                                                     store_host=("127.0.0.1", 10911)))
                            for offset in range(first, first + BATCH))
            for first in range(0, total, BATCH)}


def fake_pull(bodies: dict[int, bytes], total: int) -> Any:
    async def pull(mq: MessageQueue, sub_expression: str | None, expression_type: str, sub_version: int, offset: int,
                   max_nums: int, sys_flag: int, commit_offset: int, suspend: int, timeout: int) -> PullResult:
        await asyncio.sleep(0)
        body = bodies.get(offset)
        if body is None:   # the end: a long poll that finds nothing
            await asyncio.sleep(0.05)
            return PullResult(PullStatus.NO_NEW_MSG, offset, 0, offset)
        return PullResult(PullStatus.FOUND, offset + BATCH, 0, total, body=body)

    return pull


def push_round(orderly: bool, total: int) -> tuple[float, float]:
    """(messages per second, CPU microseconds per message) of one push consumer round."""
    done = threading.Event()
    count = 0
    lock = threading.Lock()

    def count_messages(msgs: list[MessageExt]) -> None:
        nonlocal count
        with lock:
            count += len(msgs)
            if count >= total * QUEUES:
                done.set()

    def concurrent(msgs: list[MessageExt], context: object) -> ConsumeConcurrentlyStatus:
        count_messages(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def ordered(msgs: list[MessageExt], context: object) -> ConsumeOrderlyStatus:
        count_messages(msgs)
        return ConsumeOrderlyStatus.SUCCESS

    consumer = PushConsumer(f"bench_{'orderly' if orderly else 'concurrent'}", lock_first_delay=3600, **QUIET)
    consumer.subscribe(TOPIC)
    if orderly:
        consumer.register_orderly_listener(ordered)
    else:
        consumer.register_concurrent_listener(concurrent)
    consumer.start()
    try:
        service = consumer.pull_service
        service.wrapper.pull_kernel_impl = fake_pull(encoded_bodies(total), total)  # type: ignore[method-assign]
        requests = []
        for queue_id in range(QUEUES):
            pq = consumer.new_process_queue()
            pq.locked = True
            pq.last_lock_timestamp = pq.now_ms()
            request = PullRequest(consumer.group, MessageQueue(TOPIC, "b", queue_id), pq, 0)
            request.previously_locked = True
            requests.append(request)

        async def hold() -> None:
            for request in requests:
                consumer.rebalance.process_queue_table[request.message_queue] = request.process_queue

        consumer.instance.run(hold())
        began, cpu = time.perf_counter(), time.process_time()
        for request in requests:
            service.execute_pull_request_immediately(request)
        if not done.wait(120):
            raise RuntimeError(f"only {count} messages consumed")
        elapsed, cpu_used = time.perf_counter() - began, time.process_time() - cpu
    finally:
        consumer.shutdown()
    return total * QUEUES / elapsed, cpu_used / (total * QUEUES) * 1e6


def pull_round(total: int) -> tuple[float, float]:
    """(messages per second, CPU microseconds per message) of one pull consumer round."""
    consumer = PullConsumer("bench_pull", pull_batch_size=BATCH, **QUIET)
    consumer.assign([MessageQueue(TOPIC, "b", queue_id) for queue_id in range(QUEUES)])

    async def from_zero(mq: MessageQueue) -> int:
        return 0

    consumer.rebalance.compute_pull_from_where = from_zero  # type: ignore[method-assign]
    original = PullAPIWrapper.pull_kernel_impl
    pull = fake_pull(encoded_bodies(total), total)
    PullAPIWrapper.pull_kernel_impl = lambda self, *args: pull(*args)  # type: ignore[method-assign]
    try:
        consumer.start()
        count = len(consumer.poll(timeout=5.0))
        began, cpu = time.perf_counter(), time.process_time()
        while count < total * QUEUES:
            count += len(consumer.poll(timeout=5.0))
        elapsed, cpu_used = time.perf_counter() - began, time.process_time() - cpu
    finally:
        PullAPIWrapper.pull_kernel_impl = original  # type: ignore[method-assign]
        consumer.shutdown()
    measured = total * QUEUES - BATCH
    return measured / elapsed, cpu_used / measured * 1e6


def main() -> None:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 40_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    logging.getLogger("rocketflow").setLevel(logging.CRITICAL)   # the unreachable name server is expected
    runs = [("push, concurrent", lambda: push_round(False, total)), ("push, orderly", lambda: push_round(True, total)),
            ("pull, poll", lambda: pull_round(total))]
    for name, run in runs:
        results = [run() for _ in range(rounds)]
        rates = " ".join(f"{rate:,.0f}" for rate, _ in results)
        cpus = " ".join(f"{cpu:.2f}" for _, cpu in results)
        print(f"{name:17} msg/s: {rates}  (best {max(rate for rate, _ in results):,.0f});  "
              f"CPU us/msg: {cpus}  (min {min(cpu for _, cpu in results):.2f})")


if __name__ == "__main__":
    main()
