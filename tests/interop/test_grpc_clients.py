"""Apache's official RocketMQ 5.x clients (PyPI ``rocketmq-python-client``, npm ``rocketmq-client-nodejs``)
against ``rocketflow dev``'s gRPC endpoint: every message kind, simple and push consumers, redelivery,
invisibility changes, FIFO order under two consumers, dead-lettering, and a broker killed with SIGKILL.

Quirks of the clients met here (docs/grpc.md): the Python client puts its millisecond delivery time in
the timestamp's seconds field; both clients refuse every send when the settings answer has no max body
size; the Python client checks CRC32 digests as hex and the Node.js one as decimal (the endpoint sends MD5).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rocketflow import PullConsumer
from rocketflow.client.admin import Admin

if TYPE_CHECKING:  # fixtures come from this folder's conftest.py, which is not importable as a module
    from conftest import ClientProcess, ClientRunner, DevServer

pytestmark = pytest.mark.slow

_names = iter(range(1_000_000))


@pytest.fixture
def admin(dev5: DevServer) -> Iterator[Admin]:
    with Admin(dev5.namesrv) as session:
        yield session


def fresh(admin: Admin, *, queues: int = 4, message_type: str | None = None, fifo: bool = False,
          retry_max_times: int = 16) -> tuple[str, str]:
    n = next(_names)
    topic, group = f"v5-topic-{n}", f"v5-group-{n}"
    admin.ensure_topic(topic, queues=queues, message_type=message_type)
    admin.create_group(group, consume_message_orderly=fifo, retry_max_times=retry_max_times)
    return topic, group


def write_messages(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def bodies(process: ClientProcess, kind: str = "recv") -> list[str]:
    return [event["body"] for event in process.of(kind)]


def every_kind() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [
        {"body": f"normal-{i}", "tag": "TagA", "keys": [f"key-{i}"], "props": {"color": "blue", "i": str(i)}}
        for i in range(3)]
    items += [{"body": f"fifo-{group}-{i}", "group": group} for group in ("g1", "g2") for i in range(3)]
    items += [{"body": "delay-0", "delay_ms": 2000}]
    items += [{"body": f"tx-{kind}", "tx": kind} for kind in ("commit", "rollback", "check-commit", "check-rollback")]
    return items


EXPECTED = {"normal-0", "normal-1", "normal-2", "fifo-g1-0", "fifo-g1-1", "fifo-g1-2", "fifo-g2-0", "fifo-g2-1",
            "fifo-g2-2", "delay-0", "tx-commit", "tx-check-commit"}


@pytest.mark.parametrize("client", ["py5", "node5"])
def test_every_message_kind_sent_and_received(client: str, dev5: DevServer, admin: Admin,
                                              clients5: ClientRunner, tmp_path: Path) -> None:
    topic, group = fresh(admin)
    start = getattr(clients5, client)
    consumer = start("consumer", "simple", dev5.grpc, topic, "--group", group, "--invisible-s", "10")
    clients5.wait_until(lambda: bool(consumer.of("started")), 30, "the simple consumer to start",
                        must_keep_running=(consumer,))
    producer = start("producer", "produce", dev5.grpc, topic, "--messages",
                     str(write_messages(tmp_path / "messages.jsonl", every_kind())))
    clients5.wait_until(lambda: len(producer.of("sent")) + len(producer.of("send-error")) == 11, 60,
                        "the sends", must_keep_running=(producer,))
    assert not producer.of("send-error"), producer.of("send-error")
    clients5.wait_until(lambda: set(bodies(consumer, "acked")) >= EXPECTED, 60, "every committed message",
                        must_keep_running=(consumer,))
    checked = {event["body"]: event["answer"] for event in producer.of("checked")}
    assert checked == {"tx-check-commit": "commit", "tx-check-rollback": "rollback"}
    time.sleep(1.5)  # rolled-back messages stay away
    received = bodies(consumer)
    assert set(received) == EXPECTED and len(received) == len(EXPECTED), received
    by_body = {event["body"]: event for event in consumer.of("recv")}
    for i in range(3):
        event = by_body[f"normal-{i}"]
        assert event["tag"] == "TagA" and event["keys"] == [f"key-{i}"]
        assert event["props"] == {"color": "blue", "i": str(i)} and event["attempt"] == 1
    for group_name in ("g1", "g2"):
        order = [body for body in received if body.startswith(f"fifo-{group_name}-")]
        assert order == [f"fifo-{group_name}-{i}" for i in range(3)]
        assert by_body[f"fifo-{group_name}-0"]["group"] == group_name
    sent_at = {event["body"]: event["at"] for event in producer.of("sent")}
    assert by_body["delay-0"]["at"] - sent_at["delay-0"] >= 1.7
    clients5.stop(consumer, producer)


def test_redelivery_change_invisible_and_dead_letters(dev5: DevServer, admin: Admin, clients5: ClientRunner,
                                                      tmp_path: Path) -> None:
    topic, group = fresh(admin)
    _, doomed_group = fresh(admin, retry_max_times=1)
    producer = clients5.py5("producer", "produce", dev5.grpc, topic, "--messages", str(write_messages(
        tmp_path / "messages.jsonl", [{"body": f"m{i}", "keys": [f"k{i}"]} for i in range(3)])))
    clients5.wait_until(lambda: len(producer.of("sent")) == 3, 60, "the sends", must_keep_running=(producer,))
    # leaves each message once, then changes its invisible time and acks with the new handle
    retrying = clients5.py5("retrying", "simple", dev5.grpc, topic, "--group", group, "--invisible-s", "1",
                            "--skip-acks", "1", "--change-s", "5")
    # never acks: two deliveries (retryMaxTimes 1), then the dead-letter queue
    failing = clients5.py5("failing", "simple", dev5.grpc, topic, "--group", doomed_group, "--invisible-s", "1",
                           "--skip-acks", "100")
    clients5.wait_until(lambda: len(retrying.of("acked")) == 3, 60, "the acks after redelivery",
                        must_keep_running=(retrying,))
    attempts = sorted((event["body"], event["attempt"]) for event in retrying.of("recv"))
    assert attempts == [(f"m{i}", attempt) for i in range(3) for attempt in (1, 2)]
    assert not retrying.of("error"), retrying.of("error")
    dead = _read_topic(dev5, f"%DLQ%{doomed_group}", 3)
    assert sorted(message.body for message in dead) == [b"m0", b"m1", b"m2"]
    assert sorted(message.keys for message in dead) == ["k0", "k1", "k2"]
    assert sorted((e["body"], e["attempt"]) for e in failing.of("recv")) == [
        (f"m{i}", attempt) for i in range(3) for attempt in (1, 2)]
    clients5.stop(producer, retrying, failing)


def test_fifo_order_per_message_group_under_two_consumers(dev5: DevServer, admin: Admin, clients5: ClientRunner,
                                                          tmp_path: Path) -> None:
    topic, group = fresh(admin, queues=4, message_type="FIFO", fifo=True)
    items = [{"body": f"{g}-{i:02d}", "group": g} for i in range(8) for g in ("ga", "gb", "gc", "gd")]
    consumers = [clients5.node5(f"fifo-{n}", "simple", dev5.grpc, topic, "--group", group, "--invisible-s", "5",
                                "--batch", "2") for n in range(2)]
    producer = clients5.py5("producer", "produce", dev5.grpc, topic, "--messages",
                            str(write_messages(tmp_path / "messages.jsonl", items)))
    clients5.wait_until(lambda: sum(len(c.of("acked")) for c in consumers) >= len(items), 90, "every FIFO message",
                        must_keep_running=tuple(consumers))
    received = sorted((event["at"], event["body"]) for c in consumers for event in c.of("recv"))
    for g in ("ga", "gb", "gc", "gd"):
        order = [body for _, body in received if body.startswith(f"{g}-")]
        assert order == [f"{g}-{i:02d}" for i in range(8)], order
    assert sorted(body for _, body in received) == sorted(item["body"] for item in items)
    assert all(c.of("recv") for c in consumers), "both consumers got messages"
    clients5.stop(producer, *consumers)


@pytest.mark.parametrize("client", ["py5", "node5"])
def test_push_consumer(client: str, dev5: DevServer, admin: Admin, clients5: ClientRunner, tmp_path: Path) -> None:
    topic, group = fresh(admin)
    start = getattr(clients5, client)
    consumer = start("push", "push", dev5.grpc, topic, "--group", group, "--skip-acks", "1")
    clients5.wait_until(lambda: bool(consumer.of("started")), 30, "the push consumer to start",
                        must_keep_running=(consumer,))
    producer = clients5.py5("producer", "produce", dev5.grpc, topic, "--messages", str(write_messages(
        tmp_path / "messages.jsonl", [{"body": f"p{i}", "tag": "T"} for i in range(5)])))
    # the first delivery of each fails: the client re-hides it for the group's first backoff step (1 s)
    clients5.wait_until(lambda: sorted(e["attempt"] for e in consumer.of("recv")) == [1] * 5 + [2] * 5, 60,
                        "each message twice", must_keep_running=(consumer,))
    assert sorted(set(bodies(consumer))) == [f"p{i}" for i in range(5)]
    clients5.stop(consumer, producer)


def test_broker_killed_mid_consumption_loses_nothing(dev5: DevServer, admin: Admin, clients5: ClientRunner,
                                                     tmp_path: Path) -> None:
    topic, group = fresh(admin)
    count = 40
    producer = clients5.py5("producer", "produce", dev5.grpc, topic, "--messages", str(write_messages(
        tmp_path / "messages.jsonl", [{"body": f"k{i:02d}"} for i in range(count)])))
    clients5.wait_until(lambda: len(producer.of("sent")) == count, 60, "the sends", must_keep_running=(producer,))
    consumer = clients5.py5("consumer", "simple", dev5.grpc, topic, "--group", group, "--invisible-s", "3",
                            "--batch", "4", "--ack-delay-s", "0.1")
    clients5.wait_until(lambda: len(consumer.of("acked")) >= 10, 60, "some acks", must_keep_running=(consumer,))
    dev5.kill9()
    killed_at = time.time()
    acked_before = {event["body"] for event in consumer.of("acked") if event["at"] < killed_at}
    time.sleep(1.0)
    dev5.start()
    clients5.wait_until(lambda: set(bodies(consumer, "acked")) >= {f"k{i:02d}" for i in range(count)}, 90,
                        "every message acked after the restart", must_keep_running=(consumer,))
    again = [event["body"] for event in consumer.of("recv")
             if event["at"] > killed_at and event["body"] in acked_before]
    assert again == [], f"acked before the kill, delivered again: {again}"
    clients5.stop(consumer, producer)


def _read_topic(dev5: DevServer, topic: str, count: int, timeout: float = 20.0) -> list[Any]:
    consumer = PullConsumer(f"reader-{next(_names)}", dev5.namesrv)
    consumer.start()
    try:
        found: list[Any] = []
        deadline = time.monotonic() + timeout
        queues: list[Any] = []
        while not queues and time.monotonic() < deadline:
            try:
                queues = consumer.fetch_message_queues(topic)
            except Exception:
                time.sleep(0.5)
        consumer.assign(queues)
        for queue in queues:
            consumer.seek_to_begin(queue)
        while len(found) < count and time.monotonic() < deadline:
            found += consumer.poll(0.5)
        return found
    finally:
        consumer.shutdown()
