"""Fixtures of the console's tests: one dev cluster with traffic, two ``rocketflow console`` processes
(see console_helpers.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from console_helpers import (
    ACCESS_KEY,
    AUDIT_GROUP,
    DLQ_GROUP,
    LAGGING_GROUP,
    ORDERS,
    PAYMENTS,
    SECRET_KEY,
    ConsoleProcess,
    Traffic,
    start_console,
    stop_console,
)

from rocketflow import ConsumeConcurrentlyStatus, Producer, PushConsumer
from rocketflow.client import ConsumeConcurrentlyContext
from rocketflow.client.admin import Admin
from rocketflow.dev import DevCluster  # the one import of DevCluster in these tests
from rocketflow.protocol.message import MessageExt


@pytest.fixture(scope="package")
def cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread(broker_settings={"trace_topic_enable": True})
    try:
        with Admin(cluster.namesrv_addr) as admin:
            admin.ensure_topic(ORDERS, queues=2)
            admin.ensure_topic(PAYMENTS, queues=1)
        yield cluster
    finally:
        cluster.close()


@pytest.fixture()
def cluster_namesrv(cluster: DevCluster) -> str:
    return cluster.namesrv_addr


@pytest.fixture()
def store_dir(cluster: DevCluster) -> Path:
    return cluster.store_dir


@pytest.fixture(scope="module")
def traffic(cluster: DevCluster) -> Iterator[Traffic]:
    producer = Producer("console-order-service", namesrv_addr=cluster.namesrv_addr, enable_msg_trace=True)
    producer.start()
    traffic = Traffic(cluster.namesrv_addr, producer)

    def check(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        time.sleep(0.02 * len(msgs))  # ~50 a second: slower than the producer
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def audit(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with traffic.lock:
            traffic.seen.extend(msg.body for msg in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def pay(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        if any(b"declined" in msg.body for msg in msgs):
            context.delay_level_when_next_consume = -1  # to the dead-letter queue at once
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    for group, topic, listener in ((LAGGING_GROUP, ORDERS, check), (AUDIT_GROUP, ORDERS, audit),
                                   (DLQ_GROUP, PAYMENTS, pay)):
        consumer = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, consume_thread_min=1,
                                consume_thread_max=1, enable_msg_trace=True)
        consumer.subscribe(topic, "*")
        consumer.register_concurrent_listener(listener)
        consumer.start()
        traffic.consumers.append(consumer)

    def produce() -> None:
        while not traffic.stop.is_set():
            order = traffic.sent
            body = json.dumps({"orderId": f"order-{order}", "amount": order % 97 + 0.5}).encode()
            traffic.send(ORDERS, body, keys=f"order-{order}", tags="created")
            traffic.sent += 1
            time.sleep(0.01)  # ~100 a second at most

    thread = threading.Thread(target=produce, name="console-traffic", daemon=True)
    thread.start()
    traffic.send(PAYMENTS, b'{"orderId": "order-0", "outcome": "declined"}', keys="order-0", tags="declined")
    try:
        yield traffic
    finally:
        traffic.stop.set()
        thread.join(5)
        for consumer in traffic.consumers:
            consumer.shutdown()
        producer.shutdown()


@pytest.fixture(scope="package")
def readonly_console(cluster: DevCluster) -> Iterator[ConsoleProcess]:
    console = start_console(cluster.namesrv_addr)
    try:
        yield console
    finally:
        stop_console(console)


@pytest.fixture(scope="package")
def admin_console(cluster: DevCluster) -> Iterator[ConsoleProcess]:
    console = start_console(cluster.namesrv_addr, env={"ROCKETFLOW_ACCESS_KEY": ACCESS_KEY,
                                                       "ROCKETFLOW_SECRET_KEY": SECRET_KEY})
    try:
        yield console
    finally:
        stop_console(console)


@pytest.fixture()
def admin(cluster: DevCluster) -> Iterator[Admin]:
    with Admin(cluster.namesrv_addr) as admin:
        yield admin
