"""Broadcasting push consumers: every member gets every message; offsets live in local files and
survive a restart; failures are dropped; orderly broadcasting takes no broker locks."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from push_helpers import Recorder, make_topic, new_consumer, send

from rocketflow import Producer, PushConsumer
from rocketflow.client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    LocalFileOffsetStore,
    MessageModel,
)
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt
from testkit import wait_until

BROADCASTING = MessageModel.BROADCASTING
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.fixture
def producer(cluster: DevCluster) -> Iterator[Producer]:
    producer = Producer("push_broadcast_pg", namesrv=cluster.namesrv_addr, instance_name="push-broadcast-producer")
    producer.start()
    yield producer
    producer.shutdown()


@pytest.fixture
def consumers() -> Iterator[list[PushConsumer]]:
    started: list[PushConsumer] = []
    yield started
    for consumer in started:
        consumer.shutdown()


def concurrent_member(cluster: DevCluster, group: str, name: str, store: Path, recorder: Recorder,
                      consumers: list[PushConsumer], fail_key: str | None = None) -> PushConsumer:
    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        recorder.record(msgs, context.message_queue)
        if msgs[0].keys == fail_key:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = new_consumer(cluster, group, name, message_model=BROADCASTING, consume_from=FIRST,
                            local_offset_store_dir=store)
    consumer.subscribe("PushBroadcastT")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    return consumer


def test_every_member_gets_every_message_and_offsets_survive_a_restart(
        cluster: DevCluster, producer: Producer, consumers: list[PushConsumer], tmp_path: Path) -> None:
    make_topic(cluster, "PushBroadcastT", 4)
    first_keys = send(producer, "PushBroadcastT", 40)
    one, two = Recorder(), Recorder()
    member_one = concurrent_member(cluster, "cg_push_bc", "bc-1", tmp_path, one, consumers, fail_key="k7")
    concurrent_member(cluster, "cg_push_bc", "bc-2", tmp_path, two, consumers)
    one.wait_for(40)
    two.wait_for(40)
    assert sorted(one.keys()) == sorted(first_keys) == sorted(two.keys())
    assert not any(mq.topic.startswith("%RETRY%") for mq in member_one.assigned_queues())
    # the failed message is dropped, not retried, and the offsets move past it
    wait_until(lambda: sum(member_one.committed_offsets("PushBroadcastT").values()) == 40)
    time.sleep(0.5)
    assert one.keys().count("k7") == 1
    member_one.shutdown()
    offsets_file = tmp_path / "bc-1" / "cg_push_bc" / "offsets.json"
    assert offsets_file.is_file()
    stored = LocalFileOffsetStore("cg_push_bc", "bc-1", store_dir=tmp_path).read_local_offsets()
    assert sum(offset for mq, offset in stored.items() if mq.topic == "PushBroadcastT") == 40
    later_keys = send(producer, "PushBroadcastT", 10, start=40)
    two.wait_for(50)
    restarted = Recorder()
    concurrent_member(cluster, "cg_push_bc", "bc-1", tmp_path, restarted, consumers)
    restarted.wait_for(10)
    time.sleep(0.5)
    # from the file, not from the first offset: only the messages sent while it was down
    assert sorted(restarted.keys()) == sorted(later_keys)


def test_orderly_broadcasting_takes_no_broker_locks(cluster: DevCluster, producer: Producer,
                                                    consumers: list[PushConsumer], tmp_path: Path) -> None:
    make_topic(cluster, "PushBroadcastOT", 2)
    send(producer, "PushBroadcastOT", 30, sharding=lambda index: f"key{index % 3}")
    recorders = [Recorder(), Recorder()]
    for index, recorder in enumerate(recorders):
        def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext,
                     recorder: Recorder = recorder) -> ConsumeOrderlyStatus:
            recorder.record(msgs, context.message_queue)
            return ConsumeOrderlyStatus.SUCCESS

        consumer = new_consumer(cluster, "cg_push_bco", f"bco-{index}", message_model=BROADCASTING,
                                consume_from=FIRST, local_offset_store_dir=tmp_path)
        consumer.subscribe("PushBroadcastOT")
        consumer.register_orderly_listener(listener)
        consumer.start()
        consumers.append(consumer)
    for recorder in recorders:
        recorder.wait_for(30)
        by_queue: dict[int, list[int]] = defaultdict(list)
        for delivery in recorder.snapshot():
            by_queue[delivery.queue.queue_id].append(delivery.offset)
        assert all(offsets == sorted(offsets) == list(range(len(offsets))) for offsets in by_queue.values())
        assert sum(len(offsets) for offsets in by_queue.values()) == 30
    assert cluster.broker is not None
    assert cluster.broker.locks.owners("cg_push_bco") == {}
