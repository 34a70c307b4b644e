"""Helpers of the push consumer tests: recording listeners, producing, reading broker-side state."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from client_helpers import pull_messages

from rocketflow import Message, Producer, PushConsumer
from rocketflow.client import ClientConfig, ClientInstance, MQBrokerError
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt, MessageQueue
from testkit import create_topic, wait_until

#: Fast client timings for tests (seconds).
FAST_CLIENT = {"persist_first_delay": 0.2, "persist_consumer_offset_interval": 0.2, "poll_name_server_interval": 1.0}


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message as a listener saw it."""

    queue: MessageQueue
    offset: int
    key: str
    body: bytes
    topic: str
    reconsume_times: int
    thread: str
    at: float


class Recorder:
    """Thread-safe record of listener deliveries."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()

    def record(self, msgs: Iterable[MessageExt], queue: MessageQueue) -> None:
        now = time.monotonic()
        thread = threading.current_thread().name
        with self._lock:
            for msg in msgs:
                self.deliveries.append(Delivery(queue, msg.queue_offset, msg.keys or "", msg.body, msg.topic,
                                                msg.reconsume_times, thread, now))

    def snapshot(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def keys(self) -> list[str]:
        return [delivery.key for delivery in self.snapshot()]

    def count(self) -> int:
        with self._lock:
            return len(self.deliveries)

    def wait_for(self, count: int, timeout: float = 15.0) -> None:
        wait_until(lambda: self.count() >= count, timeout)


@contextmanager
def admin(cluster: DevCluster) -> Iterator[ClientInstance]:
    """A started client instance for RPCs (shut down on exit)."""
    config = ClientConfig(namesrv_addr=cluster.namesrv_addr, instance_name=f"push-admin-{time.monotonic_ns()}")
    instance = ClientInstance.get_or_create(config)
    instance.start()
    try:
        yield instance
    finally:
        instance.shutdown()


def make_topic(cluster: DevCluster, topic: str, queues: int) -> None:
    """Create ``topic`` with ``queues`` queues and wait until it is routed."""
    with admin(cluster) as instance:
        create_topic(instance, cluster.broker_addr, topic, queues)


def send(producer: Producer, topic: str, count: int, *, prefix: str = "k", tags: str | None = None,
         sharding: Callable[[int], str] | None = None, start: int = 0) -> list[str]:
    """Send ``count`` messages keyed ``<prefix><i>``; returns the keys."""
    keys = []
    for index in range(start, start + count):
        key = f"{prefix}{index}"
        msg = Message(topic, key.encode(), tags=tags, keys=key)
        if sharding is not None:
            producer.send(msg, sharding_key=sharding(index))
        else:
            producer.send(msg)
        keys.append(key)
    return keys


def broker_offset(instance: ClientInstance, group: str, mq: MessageQueue) -> int:
    """The group's committed offset of ``mq`` at the broker (-1 if none)."""
    addr = instance.find_broker_address_in_publish(mq.broker_name)
    if addr is None:
        instance.run(instance.update_topic_route(mq.topic))
        addr = instance.find_broker_address_in_publish(mq.broker_name)
    assert addr is not None
    try:
        return instance.run(instance.api.query_consumer_offset(addr, group, mq))
    except MQBrokerError:
        return -1


def read_queue(instance: ClientInstance, mq: MessageQueue) -> list[MessageExt]:
    """Every message of ``mq`` (pulled directly, no consumer group state involved)."""
    result: list[MessageExt] = []
    while True:
        batch = pull_messages(instance, mq, len(result), max_nums=32)
        if not batch:
            return result
        result.extend(batch)


def new_consumer(cluster: DevCluster, group: str, instance_name: str, **kwargs: Any) -> PushConsumer:
    settings = {**FAST_CLIENT, **kwargs}
    return PushConsumer(group, namesrv=cluster.namesrv_addr, instance_name=instance_name, **settings)


__all__ = [
    "FAST_CLIENT",
    "Delivery",
    "Recorder",
    "admin",
    "broker_offset",
    "make_topic",
    "new_consumer",
    "read_queue",
    "send",
]
