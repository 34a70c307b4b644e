"""`ConsumeMessageOrderlyService`'s retry delays (docs/design/consumer.md, "Orderly consumption"), with
the consumer's scheduling call recorded: *submit later* (-1 = ``suspend_current_queue_time_millis``, clamped to
10..30000 ms) and *try lock later* (100 ms at entry, 10 ms inside the loop; then 10 ms if the lock was
won, 3000 ms if not)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from rocketflow.client import ConsumeOrderlyStatus, MessageModel, PushConsumerSettings
from rocketflow.client.consumer.consume.context import ConsumeOrderlyContext
from rocketflow.client.consumer.consume.orderly import ConsumeMessageOrderlyService
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.consumer.stats import ConsumerStats
from rocketflow.protocol.message import MessageExt, MessageQueue

MQ = MessageQueue("T", "b", 0)


class FakeRebalance:
    def __init__(self) -> None:
        self.lock_answer = True
        self.locked: list[MessageQueue] = []

    async def lock(self, mq: MessageQueue) -> bool:
        self.locked.append(mq)
        return self.lock_answer


class FakeStore:
    def __init__(self) -> None:
        self.updates: list[tuple[MessageQueue, int, bool]] = []

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        self.updates.append((mq, offset, increase_only))


class FakeConsumer:
    """The parts of `PushConsumer` the orderly service uses here; `call_later` records instead of scheduling."""

    def __init__(self, **settings: Any) -> None:
        self.group = "cg"
        self.message_model = MessageModel.CLUSTERING
        self.settings = PushConsumerSettings(**settings)
        self.effective_max_reconsume_times = 16
        self.consumer_stats = ConsumerStats()
        self.offset_store = FakeStore()
        self.rebalance = FakeRebalance()
        self.scheduled: list[tuple[float, Callable[[], None]]] = []
        self.spawned: list[Coroutine[Any, Any, Any]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        self.scheduled.append((delay, callback))

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.spawned.append(coro)

    @property
    def delays_ms(self) -> list[int]:
        return [round(delay * 1000) for delay, _ in self.scheduled]


def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
    return ConsumeOrderlyStatus.SUCCESS


def make(**settings: Any) -> tuple[ConsumeMessageOrderlyService, FakeConsumer, list[tuple[ProcessQueue, MessageQueue]]]:
    consumer = FakeConsumer(**settings)
    service = ConsumeMessageOrderlyService(consumer, listener, consumer.rebalance, None)  # type: ignore[arg-type]
    submitted: list[tuple[ProcessQueue, MessageQueue]] = []
    service._submit = lambda pq, mq: submitted.append((pq, mq))  # type: ignore[method-assign]
    return service, consumer, submitted


@pytest.mark.parametrize(("setting", "requested", "expected_ms"), [
    (1000, -1, 1000),            # -1 = the consumer's suspend_current_queue_time_millis
    (2500, -1, 2500),
    (0, -1, 10),                 # the setting is clamped too
    (1000, 0, 10),
    (1000, 9, 10),
    (1000, 10, 10),
    (1000, 1234, 1234),
    (1000, 30_000, 30_000),
    (1000, 30_001, 30_000),
    (1000, 10**9, 30_000),
])
def test_submit_later_delay_and_clamp(setting: int, requested: int, expected_ms: int) -> None:
    service, consumer, submitted = make(suspend_current_queue_time_millis=setting)
    pq = ProcessQueue()
    service.submit_consume_request_later(pq, MQ, requested)
    assert consumer.delays_ms == [expected_ms]
    consumer.scheduled[0][1]()
    assert submitted == [(pq, MQ)]


@pytest.mark.parametrize(("won", "resubmit_ms"), [(True, 10), (False, 3000)])
def test_try_lock_later_resubmits_after_10ms_if_won_else_3s(won: bool, resubmit_ms: int) -> None:
    service, consumer, submitted = make()
    consumer.rebalance.lock_answer = won
    pq = ProcessQueue()
    service.try_lock_later_and_reconsume(MQ, pq, 100)
    assert consumer.delays_ms == [100] and consumer.rebalance.locked == []
    consumer.scheduled[0][1]()                           # the delay passed: lock the queue at the broker
    [lock_and_resubmit] = consumer.spawned
    asyncio.run(lock_and_resubmit)
    assert consumer.rebalance.locked == [MQ] and consumer.delays_ms == [100, resubmit_ms]
    consumer.scheduled[1][1]()
    assert submitted == [(pq, MQ)]


def test_a_request_for_a_queue_not_locked_tries_to_lock_after_100ms() -> None:
    service, consumer, _ = make()
    pq = ProcessQueue()
    pq.put_messages([MessageExt("T", b"x", queue_offset=0)])
    service._consume_sync(pq, MQ)
    assert consumer.delays_ms == [100] and pq.msg_count == 1
    expired = ProcessQueue(lock_max_live_ms=30_000, clock=lambda: 10**9)
    expired.locked = True
    expired.last_lock_timestamp = 10**9 - 30_001
    service._consume_sync(expired, MQ)
    assert consumer.delays_ms == [100, 100]
    pq.dropped = True                                    # a dropped queue is simply left
    service._consume_sync(pq, MQ)
    assert consumer.delays_ms == [100, 100]


def test_inside_the_loop_a_lost_or_expired_lock_retries_after_10ms_and_a_long_run_yields() -> None:
    service, consumer, _ = make(max_time_consume_continuously=60.0)
    now = 10**9
    pq = ProcessQueue(lock_max_live_ms=30_000, clock=lambda: now)
    pq.locked = True
    begin = time.monotonic()
    assert service._keep_going(pq, MQ, begin) and consumer.scheduled == []
    pq.locked = False
    assert not service._keep_going(pq, MQ, begin)
    pq.locked = True
    pq.last_lock_timestamp = now - 30_001
    assert not service._keep_going(pq, MQ, begin)
    assert consumer.delays_ms == [10, 10] and consumer.spawned == []
    pq.last_lock_timestamp = now
    assert not service._keep_going(pq, MQ, begin - 61)   # ran longer than max_time_consume_continuously
    assert consumer.delays_ms == [10, 10, 10]
    consumer.scheduled[-1][1]()                          # the last one is a plain resubmit, no lock attempt
    assert consumer.spawned == []


@pytest.mark.parametrize(("context_millis", "expected_ms"), [(-1, 1000), (5, 10), (50_000, 30_000), (700, 700)])
def test_a_suspended_batch_is_put_back_and_resubmitted_after_the_contexts_delay(context_millis: int,
                                                                               expected_ms: int) -> None:
    service, consumer, _ = make()
    pq = ProcessQueue()
    pq.put_messages([MessageExt("T", b"x", queue_offset=offset) for offset in range(3)])
    msgs = pq.take_messages(2)
    context = ConsumeOrderlyContext(MQ)
    context.suspend_current_queue_time_millis = context_millis
    keep_going = service.process_consume_result(msgs, ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT, context,
                                                pq, MQ, {})
    assert not keep_going and consumer.delays_ms == [expected_ms]
    assert [msg.reconsume_times for msg in msgs] == [1, 1] and pq.msg_count == 3
    assert consumer.offset_store.updates == []
