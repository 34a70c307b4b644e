"""`RebalancePushImpl` against in-memory stand-ins for the client instance, offset store and pull service:
allocation, reconciliation, removal under the consume lock, delayed unlock, pull-expired queues, the
orderly lock rules and `compute_pull_from_where`."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from rocketflow.client import AllocateMessageQueueAveragely, ConsumeFromWhere, MessageModel, PushConsumerSettings
from rocketflow.client.consumer.coordinator.push import RebalancePushImpl
from rocketflow.client.consumer.fetcher import PullRequest
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.route import FindBrokerResult
from rocketflow.protocol.bodies import LockBatchRequestBody, SubscriptionData, UnlockBatchRequestBody
from rocketflow.protocol.message import MessageExt, MessageQueue

TOPIC = "T"
QUEUES = [MessageQueue(TOPIC, "b", index) for index in range(8)]


class FakeStore:
    def __init__(self) -> None:
        self.stored: dict[MessageQueue, int] = {}
        self.persisted: list[MessageQueue] = []
        self.removed: list[MessageQueue] = []

    async def read_offset(self, mq: MessageQueue, read_type: object) -> int:
        return self.stored.get(mq, -1)

    async def persist(self, mq: MessageQueue) -> None:
        self.persisted.append(mq)

    def remove_offset(self, mq: MessageQueue) -> None:
        self.removed.append(mq)


class FakeApi:
    def __init__(self) -> None:
        self.lockable: set[MessageQueue] = set(QUEUES)
        self.locks: list[set[MessageQueue]] = []
        self.unlocks: list[tuple[set[MessageQueue], bool]] = []

    async def lock_batch_mq(self, addr: str, body: LockBatchRequestBody, timeout: float) -> set[MessageQueue]:
        self.locks.append(set(body.mq_set))
        return {mq for mq in body.mq_set if mq in self.lockable}

    async def unlock_batch_mq(self, addr: str, body: UnlockBatchRequestBody, timeout: float, *,
                              oneway: bool = False) -> None:
        self.unlocks.append((set(body.mq_set), oneway))

    async def get_max_offset(self, addr: str, topic: str, queue_id: int) -> int:
        return 100

    async def search_offset(self, addr: str, topic: str, queue_id: int, timestamp: int) -> int:
        return 50


class FakeInstance:
    client_id = "me"

    def __init__(self) -> None:
        self.api = FakeApi()
        self.consumer_ids = ["me"]
        self.heartbeats = 0

    async def find_consumer_id_list(self, topic: str, group: str) -> list[str]:
        return list(self.consumer_ids)

    def topic_subscribe_info(self, topic: str) -> list[MessageQueue]:
        return [mq for mq in QUEUES if mq.topic == topic]

    async def update_topic_route(self, topic: str) -> bool:
        return True

    def find_broker_address_in_subscribe(self, name: str, broker_id: int = 0, only: bool = False) -> FindBrokerResult:
        return FindBrokerResult("addr", False)

    def find_broker_address_in_publish(self, name: str) -> str:
        return "addr"

    async def send_heartbeat_to_all_brokers(self) -> None:
        self.heartbeats += 1


class FakePullService:
    def __init__(self, instance: FakeInstance) -> None:
        self.instance = instance
        self.dispatched: list[tuple[PullRequest, int]] = []

    def execute_pull_request_immediately(self, request: PullRequest) -> None:
        self.dispatched.append((request, self.instance.heartbeats))


class FakeConsumer:
    """The parts of `PushConsumer` the rebalance uses."""

    def __init__(self, *, orderly: bool = False, model: MessageModel = MessageModel.CLUSTERING,
                 consume_from: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET) -> None:
        self.group = "cg"
        self.message_model = model
        self.allocate_strategy = AllocateMessageQueueAveragely()
        self.consume_orderly = orderly
        self.consume_from = consume_from
        self.consume_timestamp_ms = 1_700_000_000_000
        self.settings = PushConsumerSettings(unlock_delay_time=0.1)
        self.offset_store = FakeStore()
        self.instance = FakeInstance()
        self.pull_service = FakePullService(self.instance)
        self.thresholds: list[int] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.clock = 1_000_000

    def new_process_queue(self) -> ProcessQueue:
        return ProcessQueue(clock=lambda: self.clock)

    def apply_topic_thresholds(self, queue_count: int) -> None:
        self.thresholds.append(queue_count)

    def spawn(self, coro: Any) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(coro))

    def execute_pull_request(self, request: PullRequest) -> None:
        self.pull_service.execute_pull_request_immediately(request)


def make(**kwargs: Any) -> tuple[RebalancePushImpl, FakeConsumer]:
    consumer = FakeConsumer(**kwargs)
    rebalance = RebalancePushImpl(consumer)  # type: ignore[arg-type]
    rebalance.instance = consumer.instance  # type: ignore[assignment]
    rebalance.put_subscription(SubscriptionData(TOPIC, "*", sub_version=1))
    return rebalance, consumer


def topic_queues(rebalance: RebalancePushImpl) -> list[MessageQueue]:
    return sorted(mq for mq in rebalance.process_queue_table if mq.topic == TOPIC)


def test_clustering_share_and_pull_requests_after_the_heartbeat() -> None:
    rebalance, consumer = make()
    consumer.offset_store.stored = {mq: mq.queue_id * 10 for mq in QUEUES}
    consumer.instance.consumer_ids = ["zz", "me", "aa"]          # sorted: aa, me, zz -> "me" is second
    asyncio.run(rebalance.do_rebalance(False))
    assert topic_queues(rebalance) == QUEUES[3:6]
    requests = consumer.pull_service.dispatched
    assert [(request.message_queue, request.next_offset) for request, _ in requests] == [
        (mq, mq.queue_id * 10) for mq in QUEUES[3:6]]
    # dispatched after the new subscription version reached the brokers
    assert all(heartbeats == 1 for _, heartbeats in requests)
    subscription = rebalance.subscription_inner[TOPIC]
    assert subscription.sub_version > 1 and rebalance.pull_sub_version(TOPIC, subscription) == subscription.sub_version
    assert consumer.thresholds == [3]
    assert consumer.offset_store.removed == QUEUES[3:6]          # dirty offsets cleared before reading
    # same membership again: nothing changes, no heartbeat
    asyncio.run(rebalance.do_rebalance(False))
    assert consumer.instance.heartbeats == 1 and len(requests) == 3


def test_queues_that_are_no_longer_ours_are_dropped_persisted_and_removed() -> None:
    rebalance, consumer = make()
    asyncio.run(rebalance.do_rebalance(False))
    assert topic_queues(rebalance) == QUEUES
    old = dict(rebalance.process_queue_table)
    consumer.instance.consumer_ids = ["me", "other"]
    asyncio.run(rebalance.do_rebalance(False))
    assert topic_queues(rebalance) == QUEUES[:4]
    assert all(old[mq].dropped for mq in QUEUES[4:]) and not any(old[mq].dropped for mq in QUEUES[:4])
    assert consumer.offset_store.persisted == QUEUES[4:]
    assert consumer.instance.api.unlocks == []                   # concurrent consumers hold no locks


def test_pull_expired_queues_are_restarted() -> None:
    rebalance, consumer = make()
    asyncio.run(rebalance.do_rebalance(False))
    stale = rebalance.process_queue_table[QUEUES[2]]
    stale.last_pull_timestamp = consumer.clock - 120_001
    asyncio.run(rebalance.do_rebalance(False))
    assert stale.dropped
    fresh = rebalance.process_queue_table[QUEUES[2]]
    assert fresh is not stale and not fresh.dropped
    assert len(consumer.pull_service.dispatched) == 9


def test_orderly_queues_are_locked_first() -> None:
    rebalance, consumer = make(orderly=True)
    api = consumer.instance.api
    api.lockable = set(QUEUES[:6])
    asyncio.run(rebalance.do_rebalance(True))
    assert topic_queues(rebalance) == QUEUES[:6]
    assert all(pq.locked for pq in rebalance.process_queue_table.values())
    assert api.locks[:8] == [{mq} for mq in QUEUES]
    api.lockable = set(QUEUES[1:6])
    asyncio.run(rebalance.lock_all())
    assert not rebalance.process_queue_table[QUEUES[0]].locked
    assert all(rebalance.process_queue_table[mq].locked for mq in QUEUES[1:6])


def test_orderly_removal_waits_for_the_consume_lock_and_delays_the_unlock() -> None:
    rebalance, consumer = make(orderly=True)
    asyncio.run(rebalance.do_rebalance(True))
    busy = rebalance.process_queue_table[QUEUES[7]]
    busy.put_messages([MessageExt(TOPIC, b"x", queue_offset=5)])
    empty = rebalance.process_queue_table[QUEUES[6]]
    held = threading.Event()
    release = threading.Event()

    def consume() -> None:
        with busy.consume_lock:
            held.set()
            release.wait(5)

    worker = threading.Thread(target=consume)
    worker.start()
    assert held.wait(5)
    consumer.instance.consumer_ids = ["me", "other"]
    api = consumer.instance.api

    async def scenario() -> None:
        await rebalance.do_rebalance(True)
        # the empty queue was unlocked at once; the busy one could not be released (its listener runs)
        assert ({QUEUES[6]}, True) in api.unlocks
        assert QUEUES[7] in rebalance.process_queue_table and busy.dropped and busy.try_unlock_times == 1
        assert QUEUES[6] not in rebalance.process_queue_table and empty.dropped
        release.set()
        await asyncio.to_thread(worker.join)
        await rebalance.do_rebalance(True)
        assert QUEUES[7] not in rebalance.process_queue_table
        # it still holds a message: the unlock waits for unlock_delay_time (0.1 s here)
        assert ({QUEUES[7]}, True) not in api.unlocks
        await asyncio.sleep(0.2)
        await asyncio.gather(*consumer.tasks)
        assert ({QUEUES[7]}, True) in api.unlocks

    asyncio.run(scenario())


def test_a_delayed_unlock_is_cancelled_when_the_queue_comes_back() -> None:
    rebalance, consumer = make(orderly=True)
    api = consumer.instance.api

    async def scenario() -> None:
        await rebalance.do_rebalance(True)
        rebalance.process_queue_table[QUEUES[7]].put_messages([MessageExt(TOPIC, b"x", queue_offset=1)])
        consumer.instance.consumer_ids = ["me", "other"]
        await rebalance.do_rebalance(True)
        consumer.instance.consumer_ids = ["me"]
        await rebalance.do_rebalance(True)          # back before the delayed unlock fired
        await asyncio.sleep(0.2)
        assert all(QUEUES[7] not in unlocked for unlocked, _ in api.unlocks)
        assert QUEUES[7] in rebalance.process_queue_table

    asyncio.run(scenario())


def test_broadcasting_orderly_takes_every_queue_without_broker_locks() -> None:
    rebalance, consumer = make(orderly=True, model=MessageModel.BROADCASTING)
    consumer.instance.consumer_ids = ["a", "me", "z"]
    asyncio.run(rebalance.do_rebalance(True))
    assert topic_queues(rebalance) == QUEUES
    assert consumer.instance.api.locks == []
    assert all(pq.locked for pq in rebalance.process_queue_table.values())


def test_unsubscribed_topics_are_dropped() -> None:
    rebalance, _ = make()
    asyncio.run(rebalance.do_rebalance(False))
    queues = dict(rebalance.process_queue_table)
    rebalance.remove_subscription(TOPIC)
    asyncio.run(rebalance.do_rebalance(False))
    assert rebalance.process_queue_table == {} and all(pq.dropped for pq in queues.values())


def test_a_queue_whose_offset_cannot_be_read_waits_for_the_next_round() -> None:
    """-2 from the store (a broker error other than QUERY_NOT_FOUND): no process queue, no pull request,
    and above all no start from the max offset; the next rebalance takes the queue."""
    rebalance, consumer = make()
    created: list[ProcessQueue] = []

    def factory() -> ProcessQueue:
        created.append(consumer.new_process_queue())
        return created[-1]

    rebalance.process_queue_factory = factory
    consumer.offset_store.stored = {mq: 10 for mq in QUEUES}
    consumer.offset_store.stored[QUEUES[3]] = -2
    asyncio.run(rebalance.do_rebalance(False))
    assert QUEUES[3] not in rebalance.process_queue_table and len(created) == 7
    assert [request.message_queue for request, _ in consumer.pull_service.dispatched] == QUEUES[:3] + QUEUES[4:]
    consumer.offset_store.stored[QUEUES[3]] = 12
    asyncio.run(rebalance.do_rebalance(False))
    assert rebalance.process_queue_table[QUEUES[3]] is created[-1] and len(created) == 8
    request, _ = consumer.pull_service.dispatched[-1]
    assert (request.message_queue, request.next_offset) == (QUEUES[3], 12)


def test_remove_process_queue_leaves_a_newer_process_queue_alone() -> None:
    rebalance, consumer = make()
    asyncio.run(rebalance.do_rebalance(False))
    mq = QUEUES[0]
    old = rebalance.process_queue_table[mq]
    old.dropped = True
    fresh = consumer.new_process_queue()
    rebalance.process_queue_table[mq] = fresh
    store = consumer.offset_store
    persisted = len(store.persisted)
    assert asyncio.run(rebalance.remove_process_queue(mq, old)) is False
    assert rebalance.process_queue_table[mq] is fresh and not fresh.dropped and len(store.persisted) == persisted
    assert asyncio.run(rebalance.remove_process_queue(mq, fresh)) is True
    assert mq not in rebalance.process_queue_table and fresh.dropped and store.persisted[-1] == mq


def test_a_dropped_process_queue_of_a_queue_assigned_back_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its removal found the consume lock busy; when the queue comes back it must not idle until it is
    pull-expired: once its listener call is over, a fresh process queue starts (the broker lock is kept)."""
    monkeypatch.setattr("rocketflow.client.consumer.coordinator.rebalance.CONSUME_LOCK_TRY_TIMEOUT", 0.05)
    rebalance, consumer = make(orderly=True)
    mq = QUEUES[7]
    consumer.offset_store.stored[mq] = 30
    api = consumer.instance.api
    held = threading.Event()
    release = threading.Event()

    async def scenario() -> None:
        await rebalance.do_rebalance(True)
        busy = rebalance.process_queue_table[mq]

        def consume() -> None:
            with busy.consume_lock:
                held.set()
                release.wait(5)

        worker = threading.Thread(target=consume)
        worker.start()
        assert held.wait(5)
        consumer.instance.consumer_ids = ["me", "other"]
        await rebalance.do_rebalance(True)
        assert rebalance.process_queue_table[mq] is busy and busy.dropped
        consumer.instance.consumer_ids = ["me"]
        await rebalance.do_rebalance(True)               # still consuming: not replaced yet
        assert rebalance.process_queue_table[mq] is busy
        release.set()
        await asyncio.to_thread(worker.join)
        dispatched = len(consumer.pull_service.dispatched)
        await rebalance.do_rebalance(True)
        fresh = rebalance.process_queue_table[mq]
        assert fresh is not busy and not fresh.dropped and fresh.locked
        assert [(request.message_queue, request.process_queue, request.next_offset)
                for request, _ in consumer.pull_service.dispatched[dispatched:]] == [(mq, fresh, 30)]
        assert all(mq not in unlocked for unlocked, _ in api.unlocks)

    asyncio.run(scenario())


def test_a_queue_dropped_for_an_illegal_offset_is_left_to_its_fix_up() -> None:
    """Replacing it would restart the queue from the illegal offset before the fix-up stored the corrected one."""
    rebalance, consumer = make()
    asyncio.run(rebalance.do_rebalance(False))
    dropped = rebalance.process_queue_table[QUEUES[1]]
    dropped.dropped = True                               # as OFFSET_ILLEGAL leaves it until its fix-up
    asyncio.run(rebalance.do_rebalance(False))
    assert rebalance.process_queue_table[QUEUES[1]] is dropped and len(consumer.pull_service.dispatched) == 8
    assert asyncio.run(rebalance.remove_process_queue(QUEUES[1], dropped))     # the fix-up, 10 s later
    consumer.offset_store.stored[QUEUES[1]] = 5
    asyncio.run(rebalance.do_rebalance(False))
    request, _ = consumer.pull_service.dispatched[-1]
    assert request.process_queue is rebalance.process_queue_table[QUEUES[1]] and request.next_offset == 5


@pytest.mark.parametrize(("where", "topic", "stored", "expected"), [
    (ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, TOPIC, 7, 7),
    (ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, TOPIC, -1, 100),
    (ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, "%RETRY%cg", -1, 0),
    (ConsumeFromWhere.CONSUME_FROM_MAX_OFFSET, TOPIC, -1, 100),
    (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, TOPIC, -1, 0),
    (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, TOPIC, 3, 3),
    (ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, TOPIC, -1, 50),
    (ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, "%RETRY%cg", -1, 100),
    (ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, TOPIC, -2, -1),
    (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, TOPIC, -2, -1),
])
def test_compute_pull_from_where(where: ConsumeFromWhere, topic: str, stored: int, expected: int) -> None:
    rebalance, consumer = make(consume_from=where)
    mq = MessageQueue(topic, "b", 0)
    if stored != -1:
        consumer.offset_store.stored[mq] = stored
    assert asyncio.run(rebalance.compute_pull_from_where(mq)) == expected
