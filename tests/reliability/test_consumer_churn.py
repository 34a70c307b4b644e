"""Concurrent push consumers (separate processes) under churn: no message lost, at-least-once.

While a producer sends, consumer processes of one group join, one leaves cleanly, one is killed
with SIGKILL and another joins. Every message is consumed at least once; re-deliveries (after the
kill, or offsets not yet committed at a rebalance) are counted and reported, not failed. After
the last consumers stop cleanly the group's committed offsets cover every message.

The orderly variant and a killed-then-restarted concurrent consumer are in
tests/integration/client/test_push_processes.py (see README.md here).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reliability_helpers import scaled, wait_until

from rocketflow import Message, Producer
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageQueue

pytestmark = pytest.mark.reliability

TOPIC = "RelChurnT"
GROUP = "cg_rel_churn"
QUEUES = 8
TOTAL = scaled(3000, 30000)
SEND_SECONDS = scaled(12, 60)


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for process in started:
        process.kill()


def test_concurrent_consumers_under_churn_lose_nothing(cluster: DevCluster, tmp_path: Path,
                                                       processes: list[Any]) -> None:
    # tests/integration/client is on sys.path once reliability_helpers is imported
    from push_helpers import admin, broker_offset, make_topic
    from test_push_processes import CLIENT_SETTINGS, ConsumerProcess, read_records

    make_topic(cluster, TOPIC, QUEUES)
    settings = {**CLIENT_SETTINGS, "rebalance_interval": 2.0, "consume_thread_min": 2, "consume_thread_max": 2}
    outputs: list[Path] = []

    def start(name: str) -> ConsumerProcess:
        out = tmp_path / f"{name}.jsonl"
        outputs.append(out)
        process = ConsumerProcess(cluster, group=GROUP, topic=TOPIC, out=out, instance=f"rel-churn-{name}",
                                  mode="concurrent", settings=settings, sleep_ms=1)
        processes.append(process)
        process.wait_ready()
        return process

    sent_errors: list[BaseException] = []

    def produce() -> None:
        try:
            with Producer("rel_churn_pg", namesrv=cluster.namesrv_addr, instance_name="rel-churn-producer") as producer:
                started = time.monotonic()
                for index in range(TOTAL):
                    producer.send(Message(TOPIC, f"m{index}".encode(), keys=f"m{index}"))
                    ahead = started + SEND_SECONDS * (index + 1) / TOTAL - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
        except BaseException as exc:  # reported by the test thread
            sent_errors.append(exc)

    def consumed_keys() -> Counter[str]:
        return Counter(key for record in read_records(*outputs) for key in record["keys"])

    first = start("one")
    sender = threading.Thread(target=produce, name="rel-churn-sender")
    sender.start()
    try:
        time.sleep(SEND_SECONDS * 0.15)
        second = start("two")
        time.sleep(SEND_SECONDS * 0.2)
        third = start("three")
        time.sleep(SEND_SECONDS * 0.2)
        second.terminate()          # leaves cleanly
        time.sleep(SEND_SECONDS * 0.15)
        third.kill()                # crashes mid-consumption
        fourth = start("four")      # joins while messages still arrive
    finally:
        sender.join()
    assert not sent_errors, sent_errors
    expected = {f"m{index}" for index in range(TOTAL)}
    wait_until(lambda: set(consumed_keys()) >= expected, timeout=90, interval=0.5, what="every message consumed")
    first.terminate()
    fourth.terminate()
    counts = consumed_keys()
    assert set(counts) == expected
    duplicates = sum(count - 1 for count in counts.values())
    print(f"concurrent churn: {TOTAL} messages, {duplicates} re-deliveries (at-least-once)")
    with admin(cluster) as instance:
        instance.run(instance.update_topic_route(TOPIC))
        broker_name = cluster.broker_config.broker_name
        committed = [broker_offset(instance, GROUP, MessageQueue(TOPIC, broker_name, queue_id))
                     for queue_id in range(QUEUES)]
    assert sum(committed) == TOTAL, committed
