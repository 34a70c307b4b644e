"""Two brokers under one name server: sync sends retry on the other broker when one is down."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from client_helpers import pull_messages

from rocketflow import Message, Producer
from rocketflow.client import MQClientError, MQConnectError, SendStatus
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageQueue
from testkit import create_topic


@pytest.fixture
def two_brokers() -> Iterator[tuple[DevCluster, DevCluster]]:
    first = DevCluster.start_in_thread()
    second: DevCluster | None = None
    try:
        second = DevCluster.start_in_thread(broker_settings={"namesrv_addr": first.namesrv_addr,
                                                             "broker_name": "broker-b"})
        yield first, second
    finally:
        if second is not None:
            second.close()
        first.close()


def test_sync_send_retries_on_another_broker_when_one_is_stopped(two_brokers: tuple[DevCluster, DevCluster]) -> None:
    first, second = two_brokers
    with Producer("pg_failover", namesrv=first.namesrv_addr) as producer, \
            Producer("pg_no_retry", namesrv=first.namesrv_addr, retry_times_when_send_failed=0) as fragile:
        instance = producer.instance
        assert fragile.instance is instance
        create_topic(instance, first.broker_addr, "ClientFailover", 4)
        create_topic(instance, second.broker_addr, "ClientFailover", 4)
        brokers_used = {producer.send(Message("ClientFailover", b"warm-%d" % index)).message_queue.broker_name
                        for index in range(8)}
        assert brokers_used == {"broker-a", "broker-b"}

        second.close()  # the route the producers hold still lists broker-b's four queues

        results = [producer.send(Message("ClientFailover", b"after-%d" % index)) for index in range(8)]
        assert all(result.send_status is SendStatus.SEND_OK for result in results)
        assert {result.message_queue.broker_name for result in results} == {"broker-a"}
        stored = {msg.body for queue_id in range(4)
                  for msg in pull_messages(instance, MessageQueue("ClientFailover", "broker-a", queue_id))}
        assert {b"after-%d" % index for index in range(8)} <= stored

        # without retries, the sends that pick broker-b's queues fail: the retry is what saved the others
        failures: list[MQClientError] = []
        for index in range(8):
            try:
                fragile.send(Message("ClientFailover", b"fragile-%d" % index))
            except MQClientError as exc:
                failures.append(exc)
        assert len(failures) == 4
        assert all(isinstance(exc.__cause__, MQConnectError) for exc in failures)
        assert all("broker-b" in str(exc) for exc in failures)
