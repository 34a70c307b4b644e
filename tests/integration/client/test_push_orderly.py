"""Orderly push consumers in one process: per-key order, broker locks, one listener call per queue at a
time, handing queues over when a member joins, manual commit/rollback, unlock at shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise

import pytest
from push_helpers import admin, broker_offset, make_topic, new_consumer, send

from rocketflow import Producer, PushConsumer
from rocketflow.client import ConsumeFromWhere, ConsumeOrderlyContext, ConsumeOrderlyStatus
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt, MessageQueue
from testkit import wait_until

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
SUCCESS = ConsumeOrderlyStatus.SUCCESS
#: Short lock and rebalance timings (seconds) so that handovers take a moment, not a minute.
FAST_ORDERLY = {"rebalance_interval": 1.0, "lock_interval": 0.5, "lock_first_delay": 0.2, "unlock_delay_time": 0.3}


@dataclass(frozen=True, slots=True)
class Call:
    member: str
    queue: int
    offsets: tuple[int, ...]
    keys: tuple[str, ...]
    start: float
    end: float


class CallLog:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def add(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def offsets_seen(self) -> int:
        return len({(call.queue, offset) for call in self.snapshot() for offset in call.offsets})


def logging_listener(log: CallLog, member: str, pause: float = 0.0):  # type: ignore[no-untyped-def]
    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        start = time.monotonic()
        if pause:
            time.sleep(pause)
        log.add(Call(member, context.message_queue.queue_id, tuple(m.queue_offset for m in msgs),
                     tuple(m.keys or "" for m in msgs), start, time.monotonic()))
        return SUCCESS

    return listener


def assert_no_overlap_per_queue(calls: list[Call]) -> None:
    by_queue: dict[int, list[Call]] = defaultdict(list)
    for call in calls:
        by_queue[call.queue].append(call)
    for queue_calls in by_queue.values():
        queue_calls.sort(key=lambda call: call.start)
        for earlier, later in pairwise(queue_calls):
            assert later.start >= earlier.end, (earlier, later)


def assert_key_order(calls: list[Call]) -> None:
    """Within each member's run on a queue, every key's sequence numbers increase."""
    seen: dict[tuple[str, str], int] = {}
    for call in sorted(calls, key=lambda call: call.start):
        for key in call.keys:
            name, seq = key.split("-")
            previous = seen.get((call.member, name), -1)
            assert int(seq) > previous, (call, previous)
            seen[(call.member, name)] = int(seq)


@pytest.fixture
def producer(cluster: DevCluster) -> Iterator[Producer]:
    producer = Producer("push_orderly_pg", namesrv=cluster.namesrv_addr, instance_name="push-orderly-producer")
    producer.start()
    yield producer
    producer.shutdown()


@pytest.fixture
def consumers() -> Iterator[list[PushConsumer]]:
    started: list[PushConsumer] = []
    yield started
    for consumer in started:
        consumer.shutdown()


def send_sequences(producer: Producer, topic: str, keys: int, seqs: int) -> None:
    for seq in range(seqs):
        for key in range(keys):
            send(producer, topic, 1, prefix=f"key{key}-", start=seq, sharding=lambda _i, key=key: f"key{key}")


def test_orderly_consumption_keeps_key_order_and_holds_the_broker_locks(
        cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushOrderT", 4)
    send_sequences(producer, "PushOrderT", 10, 10)
    log = CallLog()
    consumer = new_consumer(cluster, "cg_push_order", "push-order", consume_from=FIRST, **FAST_ORDERLY)
    consumer.subscribe("PushOrderT")
    consumer.register_orderly_listener(logging_listener(log, "a"))
    consumer.start()
    consumers.append(consumer)
    wait_until(lambda: log.offsets_seen() == 100)
    calls = log.snapshot()
    assert len(calls) == 100
    assert_no_overlap_per_queue(calls)
    assert_key_order(calls)
    assert cluster.broker is not None
    owners = cluster.broker.locks.owners("cg_push_order")
    topic_queues = {mq for mq in owners if mq.topic == "PushOrderT"}
    assert len(topic_queues) == 4 and set(owners.values()) == {consumer.client_id}
    assert all(pq.locked for pq in consumer.rebalance.process_queue_table.values())
    wait_until(lambda: sum(consumer.committed_offsets("PushOrderT").values()) == 100)
    consumer.shutdown()
    assert cluster.broker.locks.owners("cg_push_order") == {}
    with admin(cluster) as instance:
        assert sum(broker_offset(instance, "cg_push_order", mq) for mq in topic_queues) == 100


def test_async_orderly_listener(cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushOrderAsyncT", 3)
    send_sequences(producer, "PushOrderAsyncT", 6, 8)
    log = CallLog()
    active: dict[int, int] = defaultdict(int)
    overlaps: list[int] = []
    consumer = new_consumer(cluster, "cg_push_order_async", "push-order-async", consume_from=FIRST, **FAST_ORDERLY)

    async def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        assert consumer.instance.in_loop_thread()
        queue = context.message_queue.queue_id
        active[queue] += 1
        if active[queue] > 1:
            overlaps.append(queue)
        start = time.monotonic()
        await asyncio.sleep(0.001)     # other queues' calls interleave here, this queue's must not
        active[queue] -= 1
        log.add(Call("a", queue, tuple(m.queue_offset for m in msgs), tuple(m.keys or "" for m in msgs), start,
                     time.monotonic()))
        return SUCCESS

    consumer.subscribe("PushOrderAsyncT")
    consumer.register_orderly_listener(listener)
    consumer.start()
    consumers.append(consumer)
    wait_until(lambda: log.offsets_seen() == 48)
    assert not overlaps
    assert_no_overlap_per_queue(log.snapshot())
    assert_key_order(log.snapshot())


def test_queues_move_to_a_joining_member_without_being_consumed_twice_at_once(
        cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushOrderJoinT", 4)
    log = CallLog()

    def start(member: str) -> PushConsumer:
        consumer = new_consumer(cluster, "cg_push_order_join", f"push-order-join-{member}", consume_from=FIRST,
                                **FAST_ORDERLY)
        consumer.subscribe("PushOrderJoinT")
        consumer.register_orderly_listener(logging_listener(log, member, pause=0.002))
        consumer.start()
        consumers.append(consumer)
        return consumer

    first = start("a")
    sender = threading.Thread(target=send_sequences, args=(producer, "PushOrderJoinT", 20, 15))
    sender.start()
    wait_until(lambda: log.offsets_seen() >= 40)
    second = start("b")
    sender.join()
    wait_until(lambda: log.offsets_seen() == 300, timeout=30)

    def topic_queues(consumer: PushConsumer) -> set[MessageQueue]:
        return {mq for mq in consumer.assigned_queues() if mq.topic == "PushOrderJoinT"}

    wait_until(lambda: len(topic_queues(first)) == 2 and len(topic_queues(second)) == 2)
    calls = log.snapshot()
    assert {call.member for call in calls} == {"a", "b"}
    assert_no_overlap_per_queue(calls)
    assert_key_order(calls)


def test_manual_commit_and_rollback(cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushOrderManualT", 1)
    send(producer, "PushOrderManualT", 6, prefix="m")
    seen: list[tuple[str, int]] = []
    committed_at: list[dict[MessageQueue, int]] = []
    consumer = new_consumer(cluster, "cg_push_order_manual", "push-order-manual", consume_from=FIRST,
                            suspend_current_queue_time_millis=100, **FAST_ORDERLY)

    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        context.auto_commit = False
        key = msgs[0].keys or ""
        seen.append((key, msgs[0].reconsume_times))
        committed_at.append(consumer.committed_offsets("PushOrderManualT"))
        if key == "m2":
            return ConsumeOrderlyStatus.COMMIT
        if key == "m4" and [seen_key for seen_key, _ in seen].count("m4") == 1:
            return ConsumeOrderlyStatus.ROLLBACK          # first time only
        if key == "m5":
            return ConsumeOrderlyStatus.COMMIT
        return SUCCESS

    consumer.subscribe("PushOrderManualT")
    consumer.register_orderly_listener(listener)
    consumer.start()
    consumers.append(consumer)
    mq = MessageQueue("PushOrderManualT", cluster.broker_config.broker_name, 0)
    wait_until(lambda: consumer.committed_offsets("PushOrderManualT") == {mq: 6})
    # ROLLBACK put m3 (consumed with SUCCESS, not committed) and m4 back: both are consumed again
    assert [key for key, _ in seen] == ["m0", "m1", "m2", "m3", "m4", "m3", "m4", "m5"]
    assert committed_at[3][mq] == 3       # m2's COMMIT covered m0..m2; SUCCESS alone commits nothing
    assert committed_at[5][mq] == 3


def test_a_long_consume_loop_yields_and_resumes(cluster: DevCluster, producer: Producer,
                                                consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushOrderYieldT", 1)
    send(producer, "PushOrderYieldT", 30, prefix="y-")
    log = CallLog()
    consumer = new_consumer(cluster, "cg_push_order_yield", "push-order-yield", consume_from=FIRST,
                            max_time_consume_continuously=0.01, **FAST_ORDERLY)
    consumer.subscribe("PushOrderYieldT")
    consumer.register_orderly_listener(logging_listener(log, "a", pause=0.004))
    consumer.start()
    consumers.append(consumer)
    wait_until(lambda: log.offsets_seen() == 30)
    calls = log.snapshot()
    assert [call.offsets[0] for call in calls] == list(range(30))
    # the loop gave up the thread every few messages and was resubmitted 10 ms later
    pauses = [later.start - earlier.end for earlier, later in pairwise(calls)]
    assert sum(1 for pause in pauses if pause >= 0.008) >= 5


def test_fast_orderly_calls_made_in_a_row_settle_like_calls_one_by_one(
        cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    """A fast listener's calls run several to a hold of the consume lock. A call that does not simply
    succeed (SUSPEND, manual ROLLBACK) is settled as it would be alone: what came before it is
    committed, what was taken after it goes back untouched, and the retry happens in place, in order."""
    make_topic(cluster, "PushOrderBundleT", 1)
    seen: list[tuple[str, int, int]] = []
    committed_at: dict[tuple[str, int], int] = {}
    mq = MessageQueue("PushOrderBundleT", cluster.broker_config.broker_name, 0)
    consumer = new_consumer(cluster, "cg_push_order_bundle", "push-order-bundle", consume_from=FIRST,
                            suspend_current_queue_time_millis=100, **FAST_ORDERLY)

    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        key, times = msgs[0].keys or "", msgs[0].reconsume_times
        seen.append((key, times, len(msgs)))
        committed_at[(key, len([k for k, _, _ in seen if k == key]))] = consumer.committed_offsets(
            "PushOrderBundleT").get(mq, -1)
        if key == "b150" and times == 0:
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if key == "b220":
            context.auto_commit = False
            if [k for k, _, _ in seen].count("b220") == 1:
                return ConsumeOrderlyStatus.ROLLBACK
        return SUCCESS

    consumer.subscribe("PushOrderBundleT")
    consumer.register_orderly_listener(listener)
    consumer.start()
    consumers.append(consumer)
    send(producer, "PushOrderBundleT", 60, prefix="w")
    wait_until(lambda: consumer.committed_offsets("PushOrderBundleT") == {mq: 60})
    assert consumer.consume_service.bundle_size(32) > 1      # measured fast: calls are made in a row
    send(producer, "PushOrderBundleT", 300, prefix="b")
    wait_until(lambda: consumer.committed_offsets("PushOrderBundleT") == {mq: 360}, timeout=20)
    wave = [(key, times) for key, times, _ in seen if key.startswith("b")]
    expected = ([(f"b{i}", 0) for i in range(151)] + [("b150", 1)] + [(f"b{i}", 0) for i in range(151, 221)]
                + [("b220", 0)] + [(f"b{i}", 0) for i in range(221, 300)])
    assert wave == expected
    assert {size for _, _, size in seen} == {1}
    assert committed_at[("b150", 2)] == 60 + 150         # b0..b149 were committed before the retry
    assert committed_at[("b221", 1)] == 60 + 220         # b220's second (manual) SUCCESS commits nothing
    with admin(cluster) as instance:
        wait_until(lambda: broker_offset(instance, "cg_push_order_bundle", mq) == 360)
