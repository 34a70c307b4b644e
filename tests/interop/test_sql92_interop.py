"""SQL92 filtering with a real client: ali-ons 3.12.0's push consumer subscribing with an SQL92 selector.

The consumer sends its expression type in its heartbeat and pulls; the broker (``enablePropertyFilter``)
evaluates it against each message's properties, so the client receives exactly the matching messages.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from rocketflow import Message, Producer
from rocketflow.client.instance import shutdown_all
from rocketflow.dev import DevCluster
from rocketflow.protocol.bodies import TopicConfig

if TYPE_CHECKING:  # fixtures come from this folder's conftest.py, which is not importable as a module
    from conftest import ClientRunner

TOPIC = "SqlNodeT"
TIMEOUT = 60.0


@pytest.fixture
def sql_cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread(broker_settings={"enable_property_filter": True})
    try:
        yield cluster
    finally:
        shutdown_all()
        cluster.close()


def test_alions_sql92_subscription_gets_exactly_the_matching_messages(sql_cluster: DevCluster,
                                                                      clients: ClientRunner) -> None:
    with Producer("sql_interop_pg", namesrv=sql_cluster.namesrv_addr) as producer:
        instance = producer.instance
        instance.run(instance.api.create_topic(sql_cluster.broker_addr, TopicConfig(TOPIC, 2, 2)))
        deadline = time.monotonic() + TIMEOUT
        while not instance.run(instance.api.get_topic_route(TOPIC)):
            assert time.monotonic() < deadline, "topic not routed"
            time.sleep(0.1)
        expected = []
        for number in range(40):
            properties = {"amount": str(number), "region": ("eu", "us")[number % 2]}
            if number % 7 == 0:
                del properties["region"]
            producer.send(Message(TOPIC, f"m{number}".encode(), tags="T", properties=properties))
            if number >= 10 and properties.get("region") == "eu":
                expected.append(f"m{number}")
    consumer = clients.alions_consumer("alions-sql", sql_cluster.namesrv_addr, TOPIC, "SqlNodeG", from_where="first",
                                       sql="amount >= 10 AND region = 'eu'")
    clients.wait_until(lambda: len(consumer.of("recv")) >= len(expected), TIMEOUT,
                       f"ali-ons to receive the {len(expected)} matching messages", must_keep_running=(consumer,))
    time.sleep(1.0)  # anything not matching would arrive by now
    received = [event["body"] for event in consumer.of("recv")]
    clients.stop(consumer)
    assert sorted(received) == sorted(expected), clients.describe()
    assert all(event["props"]["region"] == "eu" for event in consumer.of("recv"))
