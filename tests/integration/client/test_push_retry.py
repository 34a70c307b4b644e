"""Retries and dead letters: concurrent listeners go through %RETRY% with growing delay levels, then
%DLQ%; orderly listeners retry in place, in order, then dead-letter. The broker runs with short
delay levels (level 3 = 1 s, 4 = 2 s, 5 = 3 s) so that this takes seconds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import pairwise

import pytest
from push_helpers import Recorder, admin, make_topic, new_consumer, read_queue, send

from rocketflow import Producer, PushConsumer
from rocketflow.client import (
    MAX_RECONSUME_TIMES_UNLIMITED,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
)
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageConst, MessageExt, MessageQueue
from rocketflow.protocol.names import SCHEDULE_TOPIC
from testkit import wait_until

DELAY_LEVELS = "1s 1s 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s"
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread(broker_settings={"message_delay_level": DELAY_LEVELS})
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def producer(cluster: DevCluster) -> Iterator[Producer]:
    producer = Producer("push_retry_pg", namesrv=cluster.namesrv_addr, instance_name="push-retry-producer")
    producer.start()
    yield producer
    producer.shutdown()


@pytest.fixture
def consumers() -> Iterator[list[PushConsumer]]:
    started: list[PushConsumer] = []
    yield started
    for consumer in started:
        consumer.shutdown()


def mq_of(cluster: DevCluster, topic: str, queue_id: int = 0) -> MessageQueue:
    return MessageQueue(topic, cluster.broker_config.broker_name, queue_id)


def test_failing_concurrent_messages_go_through_retry_with_growing_delays_then_to_the_dlq(
        cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushRetryT", 1)
    send(producer, "PushRetryT", 1, prefix="fail")
    send(producer, "PushRetryT", 1, prefix="ok")
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        recorder.record(msgs, context.message_queue)
        if msgs[0].keys == "fail0":
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = new_consumer(cluster, "cg_push_retry", "push-retry", consume_from=FIRST, max_reconsume_times=3)
    consumer.subscribe("PushRetryT")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    wait_until(lambda: len([d for d in recorder.snapshot() if d.key == "fail0"]) >= 4, timeout=20)
    fails = [d for d in recorder.snapshot() if d.key == "fail0"]
    assert [d.reconsume_times for d in fails] == [0, 1, 2, 3]
    # retries come from the retry topic but the listener sees the original topic
    assert [d.queue.topic for d in fails] == ["PushRetryT"] + ["%RETRY%cg_push_retry"] * 3
    assert all(d.topic == "PushRetryT" for d in fails)
    gaps = [later.at - earlier.at for earlier, later in pairwise(fails)]
    for gap, delay in zip(gaps, (1.0, 2.0, 3.0), strict=True):     # levels 3, 4, 5
        assert gap >= delay * 0.8, gaps
    assert [d.key for d in recorder.snapshot()].count("ok0") == 1
    with admin(cluster) as instance:
        instance.run(instance.update_topic_route("PushRetryT"))
        scheduled = {level: [m for m in read_queue(instance, mq_of(cluster, SCHEDULE_TOPIC, level - 1))
                             if m.keys == "fail0"] for level in (3, 4, 5)}
        assert all(len(found) == 1 for found in scheduled.values()), scheduled
        assert all(found[0].properties[MessageConst.DELAY_TIME_LEVEL] == str(level)
                   for level, found in scheduled.items())

        def dead() -> list[MessageExt]:
            return [m for m in read_queue(instance, mq_of(cluster, "%DLQ%cg_push_retry")) if m.keys == "fail0"]

        wait_until(lambda: len(dead()) == 1, timeout=10)
        letter = dead()[0]
        assert letter.reconsume_times == 4
        assert letter.properties[MessageConst.RETRY_TOPIC] == "PushRetryT"
    # nothing more arrives once the message is dead-lettered
    assert len([d for d in recorder.snapshot() if d.key == "fail0"]) == 4


def test_send_back_falls_back_to_the_inner_producer(cluster: DevCluster, consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushFallbackT", 1)
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        recorder.record(msgs, context.message_queue)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = new_consumer(cluster, "cg_push_fallback", "push-fallback", consume_from=FIRST)
    consumer.subscribe("PushFallbackT")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    failed = MessageExt("PushFallbackT", b"fallback", properties={MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "U1",
                                                                  MessageConst.KEYS: "fb"}, reconsume_times=1)
    # The fallback producer routes the retry topic through the name server. Until the broker has registered
    # the topic its heartbeat created, the name server knows it not and the producer takes TBW102's 4 queues,
    # as RocketMQ's does, where the broker refuses queue ids past the topic's one queue: wait for that.
    with admin(cluster) as instance:
        def retry_topic_routed() -> bool:
            route = instance.run(instance.api.get_topic_route("%RETRY%cg_push_fallback"))
            return route is not None and bool(route.queue_datas)

        wait_until(retry_topic_routed, timeout=10)
    # no broker has that name: CONSUMER_SEND_MSG_BACK cannot be sent, the copy goes through the inner producer
    consumer.instance.run(consumer.send_message_back(failed, 0, "no-such-broker"), 10)
    recorder.wait_for(1, timeout=10)
    delivery = recorder.snapshot()[0]
    assert delivery.body == b"fallback" and delivery.topic == "PushFallbackT"
    assert delivery.queue.topic == "%RETRY%cg_push_fallback"
    assert delivery.reconsume_times == 2
    with admin(cluster) as instance:
        instance.run(instance.update_topic_route("PushFallbackT"))
        scheduled = [m for m in read_queue(instance, mq_of(cluster, SCHEDULE_TOPIC, 3)) if m.keys == "fb"]
    assert len(scheduled) == 1     # delay level 3 + reconsume times 1
    assert scheduled[0].properties[MessageConst.ORIGIN_MESSAGE_ID] == "U1"


def test_orderly_retries_happen_in_place_and_in_order(cluster: DevCluster, producer: Producer,
                                                      consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushOrderRetryT", 1)
    keys = send(producer, "PushOrderRetryT", 8, prefix="s")
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        recorder.record(msgs, context.message_queue)
        if msgs[0].keys == "s3" and msgs[0].reconsume_times < 2:
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if msgs[0].keys == "s5" and msgs[0].reconsume_times < 1:
            raise RuntimeError("s5 fails once")
        return ConsumeOrderlyStatus.SUCCESS

    consumer = new_consumer(cluster, "cg_push_oretry", "push-oretry", consume_from=FIRST,
                            suspend_current_queue_time_millis=200)
    consumer.subscribe("PushOrderRetryT")
    consumer.register_orderly_listener(listener)
    consumer.start()
    consumers.append(consumer)
    recorder.wait_for(11)
    deliveries = recorder.snapshot()
    assert [d.key for d in deliveries] == ["s0", "s1", "s2", "s3", "s3", "s3", "s4", "s5", "s5", "s6", "s7"]
    assert [d.reconsume_times for d in deliveries if d.key == "s3"] == [0, 1, 2]
    retries = [d.at for d in deliveries if d.key == "s3"]
    assert all(later - earlier >= 0.15 for earlier, later in pairwise(retries))
    assert all(d.queue.topic == "PushOrderRetryT" for d in deliveries)
    mq = mq_of(cluster, "PushOrderRetryT")
    wait_until(lambda: consumer.committed_offsets("PushOrderRetryT") == {mq: len(keys)})


def test_orderly_dead_letter_after_max_reconsume_times(cluster: DevCluster, producer: Producer,
                                                       consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushOrderDlqT", 1)
    send(producer, "PushOrderDlqT", 5, prefix="d")
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        recorder.record(msgs, context.message_queue)
        if msgs[0].keys == "d2":
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    consumer = new_consumer(cluster, "cg_push_odlq", "push-odlq", consume_from=FIRST, max_reconsume_times=2,
                            suspend_current_queue_time_millis=50)
    consumer.subscribe("PushOrderDlqT")
    consumer.register_orderly_listener(listener)
    consumer.start()
    consumers.append(consumer)
    recorder.wait_for(7)
    deliveries = recorder.snapshot()
    assert [d.key for d in deliveries] == ["d0", "d1", "d2", "d2", "d2", "d3", "d4"]
    assert [d.reconsume_times for d in deliveries if d.key == "d2"] == [0, 1, 2]
    mq = mq_of(cluster, "PushOrderDlqT")
    wait_until(lambda: consumer.committed_offsets("PushOrderDlqT") == {mq: 5})
    with admin(cluster) as instance:
        instance.run(instance.update_topic_route("PushOrderDlqT"))

        def dead() -> list[MessageExt]:
            return [m for m in read_queue(instance, mq_of(cluster, "%DLQ%cg_push_odlq")) if m.keys == "d2"]

        wait_until(lambda: len(dead()) == 1, timeout=10)
        assert dead()[0].properties[MessageConst.RETRY_TOPIC] == "PushOrderDlqT"


def test_orderly_unlimited_retries_never_dead_letter(cluster: DevCluster, producer: Producer,
                                                     consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushOrderForeverT", 1)
    send(producer, "PushOrderForeverT", 2, prefix="f")
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        recorder.record(msgs, context.message_queue)
        if msgs[0].keys == "f0" and msgs[0].reconsume_times < 20:
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    consumer = new_consumer(cluster, "cg_push_oforever", "push-oforever", consume_from=FIRST,
                            max_reconsume_times=MAX_RECONSUME_TIMES_UNLIMITED, suspend_current_queue_time_millis=10)
    consumer.subscribe("PushOrderForeverT")
    consumer.register_orderly_listener(listener)
    consumer.start()
    consumers.append(consumer)
    recorder.wait_for(22)
    assert [d.key for d in recorder.snapshot()] == ["f0"] * 21 + ["f1"]


def test_a_message_consumed_for_too_long_is_sent_back(cluster: DevCluster, producer: Producer,
                                                      consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushExpireT", 1)
    send(producer, "PushExpireT", 1, prefix="slow")
    send(producer, "PushExpireT", 3, prefix="fast")
    recorder = Recorder()
    ends: dict[tuple[str, int], float] = {}

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        recorder.record(msgs, context.message_queue)
        if msgs[0].keys == "slow0" and msgs[0].reconsume_times == 0:
            time.sleep(4.0)
        ends[(msgs[0].keys or "", msgs[0].reconsume_times)] = time.monotonic()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    # consume_timeout 1 s: the scan (every 1 s) sends slow0 back with delay level 3 (1 s here)
    consumer = new_consumer(cluster, "cg_push_expire", "push-expire", consume_from=FIRST, consume_timeout=1.0)
    consumer.subscribe("PushExpireT")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    wait_until(lambda: ("slow0", 0) in ends, timeout=10)
    slow = [d for d in recorder.snapshot() if d.key == "slow0"]
    assert [d.reconsume_times for d in slow] == [0, 1]
    assert slow[1].queue.topic == "%RETRY%cg_push_expire"
    assert slow[1].at < ends[("slow0", 0)]        # redelivered while the first call was still running
    # the expired message left the process queue, so the next consumed message moves the offset past it
    # (the scan itself commits nothing, as in RocketMQ)
    send(producer, "PushExpireT", 1, prefix="tail")
    mq = mq_of(cluster, "PushExpireT")
    wait_until(lambda: consumer.committed_offsets("PushExpireT") == {mq: 5})


def test_messages_that_cannot_be_sent_back_are_retried_locally(cluster: DevCluster, producer: Producer,
                                                               consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushLocalRetryT", 1)
    send(producer, "PushLocalRetryT", 2, prefix="lr")
    recorder = Recorder()
    assert cluster.broker is not None
    config = cluster.broker.config

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        recorder.record(msgs, context.message_queue)
        if msgs[0].keys == "lr0" and msgs[0].reconsume_times == 0:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = new_consumer(cluster, "cg_push_local_retry", "push-local-retry", consume_from=FIRST)
    consumer.subscribe("PushLocalRetryT")
    consumer.register_concurrent_listener(listener)
    config.broker_permission = 4      # read-only broker: CONSUMER_SEND_MSG_BACK and the fallback send both fail
    try:
        consumer.start()
        consumers.append(consumer)
        recorder.wait_for(3, timeout=15)
    finally:
        config.broker_permission = 6
    attempts = [d for d in recorder.snapshot() if d.key == "lr0"]
    assert [d.reconsume_times for d in attempts] == [0, 1]
    assert attempts[1].at - attempts[0].at >= 4.5        # resubmitted locally after 5 s
    assert all(d.queue.topic == "PushLocalRetryT" for d in attempts)
    mq = mq_of(cluster, "PushLocalRetryT")
    wait_until(lambda: consumer.committed_offsets("PushLocalRetryT") == {mq: 2})


def test_ack_index_and_delay_level_when_next_consume(cluster: DevCluster, producer: Producer,
                                                     consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushAckT", 1)
    send(producer, "PushAckT", 6, prefix="a")
    recorder = Recorder()
    batches: list[list[str]] = []

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        recorder.record(msgs, context.message_queue)
        keys = [msg.keys or "" for msg in msgs]
        batches.append(keys)
        if keys[:2] == ["a0", "a1"]:
            context.ack_index = 1                          # a0, a1 consumed; the rest retried...
            context.delay_level_when_next_consume = 4      # ... after level 4 (2 s) instead of 3
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        if "a4" in keys and msgs[0].reconsume_times == 0:
            context.delay_level_when_next_consume = -1     # straight to the dead-letter queue
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = new_consumer(cluster, "cg_push_ack", "push-ack", consume_from=FIRST, consume_message_batch_max_size=4,
                            pull_batch_size=4)
    consumer.subscribe("PushAckT")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    wait_until(lambda: sorted(k for b in batches for k in b if k in ("a2", "a3")) == ["a2", "a2", "a3", "a3"],
               timeout=10)
    assert batches[0] == ["a0", "a1", "a2", "a3"]
    retried = [d for d in recorder.snapshot() if d.key in ("a2", "a3") and d.reconsume_times == 1]
    assert len(retried) == 2 and all(d.queue.topic == "%RETRY%cg_push_ack" for d in retried)
    first_at = recorder.snapshot()[0].at
    assert min(d.at for d in retried) - first_at >= 1.6      # delay level 4 = 2 s
    # stats are per queue topic: retried messages count under the retry topic
    totals = consumer.consumer_stats.totals("cg_push_ack", "PushAckT")
    assert (totals.consume_ok_msgs, totals.consume_failed_msgs) == (2, 4)
    wait_until(lambda: consumer.consumer_stats.totals("cg_push_ack", "%RETRY%cg_push_ack").consume_ok_msgs == 2)
    with admin(cluster) as instance:
        instance.run(instance.update_topic_route("PushAckT"))
        level4 = [m.keys for m in read_queue(instance, mq_of(cluster, SCHEDULE_TOPIC, 3)) if m.keys in ("a2", "a3")]
        assert sorted(level4) == ["a2", "a3"]

        def dead() -> list[str]:
            return sorted(m.keys or "" for m in read_queue(instance, mq_of(cluster, "%DLQ%cg_push_ack")))

        wait_until(lambda: dead() == ["a4", "a5"] or dead() == ["a4"], timeout=10)
    # a4 (and a5 if it shared a4's batch) went to the DLQ, never retried
    assert not [d for d in recorder.snapshot() if d.key == "a4" and d.reconsume_times > 0]


def test_bundled_listener_calls_each_keep_their_own_status(
        cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    """A fast listener's calls run several to a consume request, but each call still gets one message
    (the batch size) and its own status: the one failure is retried alone, the rest commit."""
    make_topic(cluster, "PushBundleT", 1)
    send(producer, "PushBundleT", 200, prefix="b")
    recorder = Recorder()
    sizes: list[int] = []

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        sizes.append(len(msgs))
        recorder.record(msgs, context.message_queue)
        if msgs[0].keys == "b150" and msgs[0].reconsume_times == 0:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = new_consumer(cluster, "cg_push_bundle", "push-bundle", consume_from=FIRST)
    consumer.subscribe("PushBundleT")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    recorder.wait_for(201, timeout=15)
    service = consumer.consume_service
    assert service.bundle_size(32) > 1          # measured fast: calls are bundled
    assert set(sizes) == {1}
    deliveries = recorder.snapshot()
    assert sorted(d.key for d in deliveries if d.reconsume_times == 0) == sorted(f"b{i}" for i in range(200))
    retried = [d for d in deliveries if d.reconsume_times > 0]
    assert [(d.key, d.topic) for d in retried] == [("b150", "PushBundleT")]
    totals = consumer.consumer_stats.totals("cg_push_bundle", "PushBundleT")
    assert (totals.consume_ok_msgs, totals.consume_failed_msgs, totals.consume_calls) == (199, 1, 200)
    mq = mq_of(cluster, "PushBundleT")
    wait_until(lambda: consumer.committed_offsets("PushBundleT") == {mq: 200})
