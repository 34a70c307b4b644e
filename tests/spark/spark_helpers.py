"""Helpers of the Spark tests: the local session builder and message loading."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from rocketflow.client import ClientInstance, Producer
from rocketflow.protocol.message import Message, MessageQueue
from rocketflow.spark import register


def build_session(app_name: str = "rocketflow-tests") -> SparkSession:
    """A small local session (2 cores, 2 shuffle partitions, no UI) with the rocketmq format registered."""
    spark = (SparkSession.builder.master("local[2]").appName(app_name)
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "1g")
             .config("spark.sql.streaming.stopTimeout", "10s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def queue_of(instance: ClientInstance, topic: str, queue_id: int) -> MessageQueue:
    instance.run(instance.update_topic_route(topic))
    return next(mq for mq in instance.topic_subscribe_info(topic) if mq.queue_id == queue_id)


def send_messages(producer: Producer, topic: str, count: int, *, tags: Callable[[int], str | None] = lambda i: None,
                  body: Callable[[int], bytes] = lambda i: b"m-%06d" % i, batch: int = 64) -> list[Any]:
    """Send ``count`` messages (batches of ``batch``, keys ``k<i>``); returns once the broker's consume
    queues show them (dispatch runs behind the send acknowledgements)."""
    before = queued_total(producer, topic)
    results = []
    pending: list[Message] = []
    for index in range(count):
        msg = Message(topic, body(index), tags=tags(index), keys=f"k{index}")
        if tags(index) is not None:  # batches go untagged-per-batch-safe: send tagged ones alone
            results.append(producer.send(msg))
            continue
        pending.append(msg)
        if len(pending) >= batch:
            results.append(producer.send_batch(pending))
            pending = []
    if pending:
        results.append(producer.send_batch(pending))
    deadline = time.monotonic() + 10
    while queued_total(producer, topic) < before + count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the broker did not dispatch {count} messages of {topic} in time")
        time.sleep(0.02)
    return results


def queued_total(producer: Producer, topic: str) -> int:
    """The sum of the topic's queues' max offsets."""
    instance = producer.instance
    instance.run(instance.update_topic_route(topic))
    total = 0
    for mq in instance.topic_subscribe_info(topic):
        addr = instance.find_broker_address_in_publish(mq.broker_name)
        assert addr is not None
        total += instance.run(instance.api.get_max_offset(addr, topic, mq.queue_id))
    return total
