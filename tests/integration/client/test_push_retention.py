"""Retention deletes messages under a lagging push consumer: it moves to the queue's new minimum in one
step and goes on consuming at once (not after RocketMQ's 10 s fix-up delay and the next rebalance)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from push_helpers import Recorder, make_topic, new_consumer, send

from rocketflow import Producer
from rocketflow.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, ConsumeOrderlyStatus
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt, MessageQueue
from testkit import wait_until

TOPIC = "RetentionLagT"


@pytest.fixture
def small_segments() -> Iterator[DevCluster]:
    """Commit-log segments of 32 KiB, every one expired at once: retention can delete under a consumer."""
    dev = DevCluster.start_in_thread(broker_settings={"store.commit_log_segment_size": 32 * 1024,
                                                      "store.file_reserved_time_hours": 0.0})
    try:
        yield dev
    finally:
        dev.close()


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
def test_a_lagging_consumer_moves_to_the_new_minimum_at_once(small_segments: DevCluster, orderly: bool) -> None:
    cluster = small_segments
    make_topic(cluster, TOPIC, 1)
    mq = MessageQueue(TOPIC, "broker-a", 0)
    release = threading.Event()
    recorder = Recorder()

    def consume(msgs: list[MessageExt]) -> None:
        release.wait(30)
        recorder.record(msgs, mq)

    with Producer("retention_pg", namesrv=cluster.namesrv_addr, instance_name="retention-producer") as producer:
        send(producer, TOPIC, 200, prefix="early")
        consumer = new_consumer(cluster, "retention_cg", "retention-consumer", pull_threshold_for_queue=50,
                                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                consume_message_batch_max_size=1)
        consumer.subscribe(TOPIC, "*")
        if orderly:
            consumer.register_orderly_listener(lambda msgs, _ctx: consume(msgs) or ConsumeOrderlyStatus.SUCCESS)
        else:
            consumer.register_concurrent_listener(
                lambda msgs, _ctx: consume(msgs) or ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
        try:
            consumer.start()
            # the listener holds: the consumer caches what flow control lets it pull, then stops pulling
            table = consumer.rebalance.process_queue_table
            wait_until(lambda: mq in table and table[mq].msg_count >= 50, 20)
            send(producer, TOPIC, 2000, prefix="late", start=200)
            store = cluster.broker.store  # type: ignore[union-attr]
            assert store.clean_expired(int(time.time() * 1000) + 3_600_000, manual=True) > 0
            low = store.get_min_offset_in_queue(TOPIC, 0)
            assert low > 200
            released = time.monotonic()
            release.set()
            wait_until(lambda: any(delivery.offset >= low for delivery in recorder.snapshot()), 10)
            resumed = min(delivery.at for delivery in recorder.snapshot() if delivery.offset >= low) - released
            wait_until(lambda: max(delivery.offset for delivery in recorder.snapshot()) == 2199, 20)
        finally:
            release.set()
            consumer.shutdown()
    offsets = sorted({delivery.offset for delivery in recorder.snapshot()})
    cached = [offset for offset in offsets if offset < low]
    # what was cached before the deletion is consumed, then the queue goes on from its new minimum
    assert cached == list(range(len(cached))) and len(cached) >= 50
    assert [offset for offset in offsets if offset >= low] == list(range(low, 2200))
    # at once: the old way waited 10 s, dropped the queue and picked it up at the next rebalance (20 s)
    assert resumed < 5.0, resumed
