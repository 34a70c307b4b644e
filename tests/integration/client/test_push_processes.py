"""Push consumers in separate processes (`push_consumer_proc.py`) against one dev cluster.

* A concurrent consumer killed with SIGKILL and restarted loses nothing.
* Orderly under churn: three consumer processes join, one leaves cleanly, one is killed and a fourth
  joins while a producer sends per-key sequences (1,000 keys, 8 queues). Every message is consumed,
  each queue's messages in order within each ownership period with no gap between periods, no queue
  is ever consumed by two processes at once (listener intervals), and re-consumed messages only
  appear at the start of an ownership period. Ownership periods are told apart by process-queue
  tokens that are never reused (``id()`` of a collected process queue can come back).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from push_consumer_proc import ProcessQueueTokens
from push_helpers import admin, broker_offset, make_topic

from rocketflow import Message, Producer
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageQueue
from testkit import wait_until

SCRIPT = Path(__file__).with_name("push_consumer_proc.py")
#: Broker locks live 6 s (instead of 60) so that a killed member's queues move on quickly.
BROKER_LOCK_LIFE_MS = 6000
CHURN_KEYS = 1000
CHURN_SEQS = 20
CHURN_QUEUES = 8


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread(broker_settings={"rebalance_lock_max_live_time_ms": BROKER_LOCK_LIFE_MS})
    try:
        yield cluster
    finally:
        cluster.close()


class ConsumerProcess:
    """One `push_consumer_proc.py` process."""

    def __init__(self, cluster: DevCluster, *, group: str, topic: str, out: Path, instance: str, mode: str,
                 settings: dict[str, Any], sleep_ms: float = 0.0) -> None:
        self.out = out
        self.name = instance
        self.stderr_path = out.with_suffix(".stderr")
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in stop()
        command = [sys.executable, str(SCRIPT), "--namesrv", cluster.namesrv_addr, "--group", group, "--topic", topic,
                   "--out", str(out), "--instance", instance, "--mode", mode, "--sleep-ms", str(sleep_ms),
                   "--settings", json.dumps(settings)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def wait_ready(self, timeout: float = 30.0) -> None:
        assert self.proc.stdout is not None
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if not result or not result[0].startswith("READY"):
            raise AssertionError(f"{self.name} did not start: {self.stderr_path.read_text()[-3000:]}")

    def terminate(self, timeout: float = 40.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"{self.name} did not stop on SIGTERM: "
                                     f"{self.stderr_path.read_text()[-3000:]}") from None
            assert self.proc.returncode == 0, self.stderr_path.read_text()[-3000:]
        self._close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()


@pytest.fixture
def processes() -> Iterator[list[ConsumerProcess]]:
    started: list[ConsumerProcess] = []
    yield started
    for process in started:
        process.kill()


def read_records(*paths: Path) -> list[dict[str, Any]]:
    records = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue   # a line cut short by SIGKILL
    return records


CLIENT_SETTINGS = {"persist_first_delay": 0.2, "persist_consumer_offset_interval": 0.5,
                   "poll_name_server_interval": 2.0}


def test_a_killed_consumer_restarted_loses_nothing(cluster: DevCluster, tmp_path: Path,
                                                   processes: list[ConsumerProcess]) -> None:
    make_topic(cluster, "PushKillT", 4)
    total = 3000
    with Producer("push_kill_pg", namesrv=cluster.namesrv_addr, instance_name="push-kill-producer") as producer:
        for index in range(total):
            producer.send(Message("PushKillT", f"k{index}".encode(), keys=f"k{index}"))
    settings = {**CLIENT_SETTINGS, "consume_thread_min": 4, "consume_thread_max": 4}
    outputs = [tmp_path / "first.jsonl", tmp_path / "second.jsonl"]

    def start(out: Path) -> ConsumerProcess:
        process = ConsumerProcess(cluster, group="cg_push_kill", topic="PushKillT", out=out, instance="push-kill",
                                  mode="concurrent", settings=settings, sleep_ms=2)
        processes.append(process)
        process.wait_ready()
        return process

    first = start(outputs[0])
    wait_until(lambda: len(read_records(outputs[0])) >= 600, timeout=30)
    first.kill()
    killed_at = len(read_records(outputs[0]))
    assert killed_at < total
    second = start(outputs[1])

    def keys_seen() -> set[str]:
        return {key for record in read_records(*outputs) for key in record["keys"]}

    wait_until(lambda: len(keys_seen()) == total, timeout=60)
    second.terminate()
    assert keys_seen() == {f"k{index}" for index in range(total)}
    with admin(cluster) as instance:
        instance.run(instance.update_topic_route("PushKillT"))
        broker_name = cluster.broker_config.broker_name
        committed = [broker_offset(instance, "cg_push_kill", MessageQueue("PushKillT", broker_name, queue_id))
                     for queue_id in range(4)]
    assert sum(committed) == total


def send_sequences(cluster: DevCluster, threads: int, duration: float) -> list[threading.Thread]:
    """Per-key sequences ``key<k>-<seq>`` by sharding key, spread over ``duration`` seconds."""
    def run(part: int) -> None:
        with Producer(f"push_churn_pg{part}", namesrv=cluster.namesrv_addr,
                      instance_name=f"push-churn-producer-{part}") as producer:
            started = time.monotonic()
            for seq in range(CHURN_SEQS):
                for key in range(part, CHURN_KEYS, threads):
                    name = f"key{key}"
                    producer.send(Message("PushChurnT", f"{name}-{seq}".encode(), keys=f"{name}-{seq}"),
                                  sharding_key=name)
                ahead = started + duration * (seq + 1) / CHURN_SEQS - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)

    senders = [threading.Thread(target=run, args=(part,), name=f"churn-sender-{part}") for part in range(threads)]
    for sender in senders:
        sender.start()
    return senders


def test_orderly_consumers_under_churn(cluster: DevCluster, tmp_path: Path, processes: list[ConsumerProcess]) -> None:
    make_topic(cluster, "PushChurnT", CHURN_QUEUES)
    settings = {**CLIENT_SETTINGS, "rebalance_interval": 2.0, "lock_interval": 1.0, "lock_first_delay": 0.2,
                "lock_max_live_time": 4.0, "unlock_delay_time": 0.5}
    outputs: list[Path] = []

    def start(name: str) -> ConsumerProcess:
        out = tmp_path / f"{name}.jsonl"
        outputs.append(out)
        process = ConsumerProcess(cluster, group="cg_push_churn", topic="PushChurnT", out=out,
                                  instance=f"push-churn-{name}", mode="orderly", settings=settings)
        processes.append(process)
        process.wait_ready()
        return process

    def consumed() -> int:
        return len({(record["queue"], offset) for record in read_records(*outputs) for offset in record["offsets"]})

    total = CHURN_KEYS * CHURN_SEQS
    first = start("one")
    senders = send_sequences(cluster, threads=4, duration=15.0)
    time.sleep(2)
    second = start("two")
    time.sleep(3)
    third = start("three")
    time.sleep(4)
    second.terminate()            # leaves cleanly
    time.sleep(3)
    third.kill()                  # crashes while holding queues
    time.sleep(2)
    fourth = start("four")
    for sender in senders:
        sender.join()
    wait_until(lambda: consumed() == total, timeout=60, interval=0.5)
    first.terminate()
    fourth.terminate()

    records = read_records(*outputs)
    check_churn(records, total)


def test_process_queue_tokens_are_never_reused() -> None:
    tokens = ProcessQueueTokens()
    assert tokens.token(None) == 0
    kept = ProcessQueue()
    seen = {tokens.token(kept)}
    assert tokens.token(kept) in seen
    ids: set[int] = set()
    for _ in range(200):
        pq = ProcessQueue()
        ids.add(id(pq))
        token = tokens.token(pq)
        assert token not in seen and tokens.token(pq) == token
        seen.add(token)
        del pq
    # CPython hands the memory of a collected object to the next one: ids repeat, tokens do not
    assert len(seen) == 201 and len(ids) < 200


def check_churn(records: list[dict[str, Any]], total: int) -> None:
    by_queue: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        assert len(record["offsets"]) == 1
        by_queue[record["queue"]].append(record)
    assert set(by_queue) == set(range(CHURN_QUEUES))
    # nothing lost: every offset of every queue, every key's every sequence number
    assert sum(max(r["offsets"][0] for r in queue_records) + 1 for queue_records in by_queue.values()) == total
    assert all({r["offsets"][0] for r in queue_records} == set(range(max(r["offsets"][0] for r in queue_records) + 1))
               for queue_records in by_queue.values())
    assert {key for record in records for key in record["keys"]} == {
        f"key{key}-{seq}" for key in range(CHURN_KEYS) for seq in range(CHURN_SEQS)}
    owners_per_queue = []
    duplicates = 0
    for queue, queue_records in sorted(by_queue.items()):
        queue_records.sort(key=lambda record: (record["start"], record["end"]))
        # never two processes (or two calls) on one queue at once
        for earlier, later in pairwise(queue_records):
            assert later["start"] >= earlier["end"], (queue, earlier, later)
        # ownership periods: runs of calls by one process holding one process queue
        periods: list[list[dict[str, Any]]] = []
        for record in queue_records:
            if periods and (periods[-1][-1]["pid"], periods[-1][-1]["pq"]) == (record["pid"], record["pq"]):
                periods[-1].append(record)
            else:
                periods.append([record])
        owners_per_queue.append(len({period[0]["pid"] for period in periods}))
        highest = -1
        for index, period in enumerate(periods):
            offsets = [record["offsets"][0] for record in period]
            # in order and without a gap inside a period
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), (queue, index, offsets[:20])
            # no gap across a handover; re-consumed offsets (<= highest) can only lead a period
            assert offsets[0] <= highest + 1, (queue, index, offsets[0], highest)
            if index == 0:
                assert offsets[0] == 0
            duplicates += sum(1 for offset in offsets if offset <= highest)
            keys_seen: dict[str, int] = {}
            for record in period:
                name, seq = record["keys"][0].rsplit("-", 1)
                assert int(seq) > keys_seen.get(name, -1), (queue, record)
                keys_seen[name] = int(seq)
            highest = max(highest, offsets[-1])
    pids = {record["pid"] for record in records}
    # a member that joins late or lives briefly may find every queue still locked by others: most consume
    assert len(pids) >= 3, f"most consumer processes consumed something: {len(pids)} of 4"
    assert max(owners_per_queue) >= 2, "queues changed owner"
    print(f"churn: {len(records)} listener calls, {duplicates} re-consumed after handovers, "
          f"owners per queue {owners_per_queue}")
