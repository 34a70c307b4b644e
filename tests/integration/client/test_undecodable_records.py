"""A stored record the client cannot decode never stops a queue.

The broker now refuses such records at the door (test_broker_bad_records.py), but a store may hold
them already (written by an older broker, or by another implementation): they are put straight into
the broker's store here, between good messages sent by a real producer, and real consumers read the
queue. A push consumer sends each to ``%DLQ%<group>`` as it was stored (reason in
``ROCKETFLOW_DECODE_ERROR``) and consumes everything around it, in order for an orderly listener; a
broadcasting one skips it; a pull consumer skips it and hands it to its undecodable listener. The
committed offset ends past the bad records either way.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from push_helpers import FAST_CLIENT, Recorder, admin, broker_offset, make_topic, new_consumer, read_queue

from rocketflow import Message, Producer, PullConsumer, PushConsumer
from rocketflow.client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MQBrokerError,
)
from rocketflow.dev import DevCluster
from rocketflow.protocol.bodies import MessageModel
from rocketflow.protocol.codec import UndecodableRecord
from rocketflow.protocol.message import MessageConst, MessageExt, MessageQueue
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.codes import ResponseCode
from rocketflow.store.put_request import AppendResult, PutMessageRequest, PutMessageStatus
from testkit import wait_until

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
#: What the attacker stored: flagged COMPRESSED, but not zlib.
NOT_ZLIB = b"this body was never deflated"


@pytest.fixture
def producer(cluster: DevCluster) -> Iterator[Producer]:
    producer = Producer("undecodable_pg", namesrv=cluster.namesrv_addr, instance_name="undecodable-producer")
    producer.start()
    yield producer
    producer.shutdown()


@pytest.fixture
def consumers() -> Iterator[list[PushConsumer]]:
    started: list[PushConsumer] = []
    yield started
    for consumer in started:
        consumer.shutdown()


def store_record(cluster: DevCluster, topic: str, body: bytes, *, sys_flag: int = 0,
                 properties: bytes = b"") -> int:
    """Put a record into queue 0 of ``topic`` with the broker's store, on the broker's loop; its queue offset."""
    broker, loop = cluster.broker, cluster._loop
    assert broker is not None and loop is not None

    async def put() -> AppendResult:
        request = PutMessageRequest(topic=topic, queue_id=0, body=body, properties_bytes=properties, tags_code=0,
                                    keys="", uniq_key="", sys_flag=sys_flag, born_timestamp=1_700_000_000_000,
                                    store_host=broker.store_host)
        return broker.store.put_messages([request])

    result = asyncio.run_coroutine_threadsafe(put(), loop).result(10)
    assert result.status is PutMessageStatus.PUT_OK, result
    return result.queue_offset


def fill(cluster: DevCluster, producer: Producer, topic: str) -> tuple[list[str], list[int]]:
    """Ten good messages, a record flagged COMPRESSED that is not zlib, ten good, a record whose properties
    are not UTF-8, five good: the keys of the good ones and the offsets of the bad ones."""
    make_topic(cluster, topic, 1)
    keys: list[str] = []
    bad: list[int] = []

    def good(count: int) -> None:
        for _ in range(count):
            key = f"g{len(keys)}"
            producer.send(Message(topic, key.encode(), keys=key))
            keys.append(key)

    good(10)
    bad.append(store_record(cluster, topic, NOT_ZLIB, sys_flag=int(MessageSysFlag.COMPRESSED),
                            properties=b"KEYS\x01poison\x02UNIQ_KEY\x01POISON1"))
    good(10)
    bad.append(store_record(cluster, topic, b"latin-1 properties", properties=b"KEYS\x01caf\xe9"))
    good(5)
    return keys, bad


def dead_letters(cluster: DevCluster, group: str, topic: str) -> list[MessageExt]:
    with admin(cluster) as instance:
        instance.run(instance.update_topic_route(topic))
        try:
            return read_queue(instance, MessageQueue(f"%DLQ%{group}", cluster.broker_config.broker_name, 0))
        except MQBrokerError as exc:
            assert exc.code == ResponseCode.TOPIC_NOT_EXIST
            return []


def committed(cluster: DevCluster, group: str, topic: str) -> int:
    with admin(cluster) as instance:
        instance.run(instance.update_topic_route(topic))
        return broker_offset(instance, group, MessageQueue(topic, cluster.broker_config.broker_name, 0))


def check_dead_letters(cluster: DevCluster, group: str, topic: str) -> None:
    letters: list[MessageExt] = []

    def arrived() -> bool:
        letters[:] = dead_letters(cluster, group, topic)
        return len(letters) >= 2

    wait_until(arrived, timeout=15)
    assert len(letters) == 2
    poison, latin = sorted(letters, key=lambda letter: letter.body != NOT_ZLIB)
    assert poison.body == NOT_ZLIB and not poison.sys_flag & MessageSysFlag.COMPRESSED
    assert "zlib" in poison.properties[MessageConst.DECODE_ERROR]
    assert poison.keys == "poison" and poison.properties[MessageConst.ORIGIN_MESSAGE_ID] == "POISON1"
    assert poison.properties[MessageConst.RETRY_TOPIC] == topic
    assert latin.body == b"latin-1 properties" and "UTF-8" in latin.properties[MessageConst.DECODE_ERROR]
    assert latin.properties[MessageConst.RETRY_TOPIC] == topic


def test_a_concurrent_push_consumer_dead_letters_undecodable_records_and_consumes_the_rest(
        cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    topic, group = "UndecodableConcurrentT", "cg_undecodable_concurrent"
    keys, bad = fill(cluster, producer, topic)
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        recorder.record(msgs, context.message_queue)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = new_consumer(cluster, group, "undecodable-concurrent", consume_from=FIRST)
    consumer.subscribe(topic)
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    wait_until(lambda: set(recorder.keys()) >= set(keys), timeout=15)
    assert sorted(recorder.keys()) == sorted(keys)
    assert not set(recorder.keys()) & {"poison", "café"}
    check_dead_letters(cluster, group, topic)
    wait_until(lambda: committed(cluster, group, topic) == len(keys) + len(bad), timeout=10)
    totals = consumer.consumer_stats.totals(group, topic)
    assert (totals.undecodable_dead_lettered, totals.undecodable_skipped) == (2, 0)


@pytest.mark.parametrize("mode", ["orderly", "key_ordered"])
def test_an_orderly_push_consumer_keeps_the_order_around_undecodable_records(
        cluster: DevCluster, producer: Producer, consumers: list[PushConsumer], mode: str) -> None:
    topic, group = f"Undecodable_{mode}_T", f"cg_undecodable_{mode}"
    keys, bad = fill(cluster, producer, topic)
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        recorder.record(msgs, context.message_queue)
        return ConsumeOrderlyStatus.SUCCESS

    consumer = new_consumer(cluster, group, f"undecodable-{mode}", consume_from=FIRST)
    consumer.subscribe(topic)
    if mode == "orderly":
        consumer.register_orderly_listener(listener)
    else:  # one key for all: the whole queue in order
        consumer.register_key_ordered_listener(listener, key=lambda msg: "one")
    consumer.start()
    consumers.append(consumer)
    recorder.wait_for(len(keys), timeout=15)
    assert recorder.keys() == keys
    assert [delivery.offset for delivery in recorder.snapshot()] == sorted(
        set(range(len(keys) + len(bad))) - set(bad))
    check_dead_letters(cluster, group, topic)
    wait_until(lambda: committed(cluster, group, topic) == len(keys) + len(bad), timeout=10)


def test_a_broadcasting_push_consumer_skips_undecodable_records(
        cluster: DevCluster, producer: Producer, consumers: list[PushConsumer], tmp_path: Path) -> None:
    topic, group = "UndecodableBroadcastT", "cg_undecodable_broadcast"
    keys, bad = fill(cluster, producer, topic)
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        recorder.record(msgs, context.message_queue)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = new_consumer(cluster, group, "undecodable-broadcast", consume_from=FIRST,
                            message_model=MessageModel.BROADCASTING, local_offset_store_dir=str(tmp_path))
    consumer.subscribe(topic)
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    wait_until(lambda: set(recorder.keys()) >= set(keys), timeout=15)
    mq = MessageQueue(topic, cluster.broker_config.broker_name, 0)
    wait_until(lambda: consumer.offset_store.memory_offset(mq) == len(keys) + len(bad), timeout=10)
    totals = consumer.consumer_stats.totals(group, topic)
    assert (totals.undecodable_dead_lettered, totals.undecodable_skipped) == (0, 2)
    assert dead_letters(cluster, group, topic) == []


def test_a_pull_consumer_skips_undecodable_records_and_hands_them_to_its_listener(
        cluster: DevCluster, producer: Producer) -> None:
    topic, group = "UndecodablePullT", "cg_undecodable_pull"
    keys, bad = fill(cluster, producer, topic)
    reported: list[UndecodableRecord] = []
    threads: set[str] = set()

    def on_undecodable(record: UndecodableRecord) -> None:
        reported.append(record)
        threads.add(threading.current_thread().name)

    consumer = PullConsumer(group, namesrv=cluster.namesrv_addr, consume_from=FIRST, instance_name="undecodable-pull",
                            pull_batch_size=4, **FAST_CLIENT)
    consumer.register_undecodable_listener(on_undecodable)
    consumer.subscribe(topic)
    polled: list[MessageExt] = []
    with consumer:
        mq = MessageQueue(topic, cluster.broker_config.broker_name, 0)
        wait_until(lambda: bool(polled.extend(consumer.poll(timeout=0.2))) or len(polled) >= len(keys), timeout=15)
        assert [msg.keys for msg in polled] == keys
        assert [record.queue_offset for record in reported] == bad
        assert threads == {threading.current_thread().name}
        assert reported[0].message.body == NOT_ZLIB and "zlib" in reported[0].reason
        assert consumer.undecodable_skipped == 2
        consumer.commit_sync()
        assert consumer.committed(mq) == len(keys) + len(bad)
