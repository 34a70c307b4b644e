"""Rebalance: which queues of its subscribed topics a consumer takes (RocketMQ's ``RebalanceImpl``).

`RebalanceImpl` holds what every consumer variant shares: the subscription table, the topics'
queues, the process-queue table and the per-topic reconciliation; its base `BrokerQueueLocks` holds
the broker-side queue locks. `HostedRebalance` adds what the variants of one consumer share (its
settings, its offset store, where a new queue starts). A variant says what a removal means and what
to do with new queues: `rocketflow.client.consumer.coordinator.push` (pull requests for the push
consumer) and `rocketflow.client.consumer.coordinator.lite_pull` (pull tasks of the pull consumer).

Everything here runs on the client instance's event loop. Waiting for a process queue's consume
lock (orderly removal) polls without blocking the loop (`ConsumeLock.acquire_async`).

Deviations from RocketMQ 4.9.3, each on purpose:

* a queue locked at the broker by the rebalance starts its process queue ``locked`` (4.9.8+),
  instead of waiting up to 20 s for the next `lock_all`;
* broadcasting consumers never lock queues at the broker, even when orderly (4.9.3 makes them
  compete for the lock, so only one member would consume each queue);
* new pull requests are dispatched after `message_queue_changed` announced the new subscription
  version, and pulls keep sending the version the brokers already have until that heartbeat is
  done (so a rebalance does not cause SUBSCRIPTION_NOT_LATEST retries);
* a delayed unlock of a queue that meanwhile came back to this consumer is cancelled (4.9.3 would
  release the broker lock of a queue it consumes again);
* a subscribed topic with no known queues triggers a route lookup first;
* a dropped process queue left in the table because its removal found the consume lock busy is
  replaced by a fresh one when its queue is assigned to this consumer again (4.9.3 leaves it idle
  until it is pull-expired, 120 s);
* the OFFSET_ILLEGAL fix-up only applies while the table still holds the process queue that saw
  the illegal offset (4.9.3 also removes, and overwrites the offset of, one created meanwhile);
* a broker error other than QUERY_NOT_FOUND while reading a new queue's committed offset skips
  the queue this round (4.9.3 takes it for "no offset" and may start from the last offset,
  skipping messages; see `rocketflow.client.consumer.offset_store`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Final, Generic, Protocol, TypeVar

from rocketflow.client.consumer.allocate import AllocateMessageQueueStrategy
from rocketflow.client.consumer.coordinator.broker_locks import BrokerQueueLocks
from rocketflow.client.consumer.coordinator.start_offset import compute_pull_from_where
from rocketflow.client.consumer.fetcher import PullRequest
from rocketflow.client.consumer.offset_store import OffsetStore, ReadOffsetType
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.errors import MQClientError, MQError
from rocketflow.client.instance import ClientInstance
from rocketflow.protocol.bodies import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData
from rocketflow.protocol.message import MessageQueue
from rocketflow.protocol.names import is_retry_topic

logger = logging.getLogger(__name__)

#: How long a removal waits for the consume lock of an orderly queue (seconds).
CONSUME_LOCK_TRY_TIMEOUT: Final = 1.0


async def acquire_consume_lock(pq: ProcessQueue) -> bool:
    """Take ``pq``'s consume lock for the current task, waiting at most `CONSUME_LOCK_TRY_TIMEOUT`."""
    return await pq.consume_lock.acquire_async(CONSUME_LOCK_TRY_TIMEOUT)


class RebalanceImpl(BrokerQueueLocks, ABC):
    """The rebalance state and algorithm shared by consumer variants (RocketMQ's ``RebalanceImpl``)."""

    def __init__(self, consumer_group: str, message_model: MessageModel,
                 allocate_strategy: AllocateMessageQueueStrategy, instance: ClientInstance | None = None, *,
                 process_queue_factory: Callable[[], ProcessQueue] = ProcessQueue) -> None:
        self.consumer_group = consumer_group
        self.message_model = message_model
        self.allocate_strategy = allocate_strategy
        self._instance = instance
        self.process_queue_factory = process_queue_factory
        #: The queues this consumer currently holds, with their consumption snapshots.
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        #: topic -> its readable queues (from the routes).
        self.topic_subscribe_info_table: dict[str, set[MessageQueue]] = {}
        #: topic -> subscription (the retry topic included in clustering).
        self.subscription_inner: dict[str, SubscriptionData] = {}
        #: topic -> the subscription version the brokers were last told in a heartbeat
        self._announced_sub_versions: dict[str, int] = {}
        self._rebalance_lock: asyncio.Lock | None = None
        #: Dropped process queues left in the table because their removal failed (consume lock busy).
        self._unremoved: weakref.WeakSet[ProcessQueue] = weakref.WeakSet()
        #: rebalance rounds run so far (exported as a metric)
        self.rebalance_count = 0

    # ------------------------------------------------------------------ wiring

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise MQClientError(f"consumer group {self.consumer_group}: not started (no client instance)")
        return self._instance

    @instance.setter
    def instance(self, instance: ClientInstance) -> None:
        self._instance = instance

    # ------------------------------------------------------------------ subscriptions

    def put_subscription(self, subscription: SubscriptionData) -> None:
        """Add or replace a topic's subscription (the brokers learn it from the next heartbeat)."""
        self.subscription_inner[subscription.topic] = subscription
        self._announced_sub_versions[subscription.topic] = subscription.sub_version

    def remove_subscription(self, topic: str) -> None:
        self.subscription_inner.pop(topic, None)
        self._announced_sub_versions.pop(topic, None)
        self.topic_subscribe_info_table.pop(topic, None)

    def pull_sub_version(self, topic: str, subscription: SubscriptionData) -> int:
        """The subscription version pulls send: the last one announced to the brokers."""
        return self._announced_sub_versions.get(topic, subscription.sub_version)

    def subscriptions(self) -> dict[str, str]:
        """topic -> subscription expression."""
        return {topic: sub.sub_string for topic, sub in self.subscription_inner.items()}

    def update_topic_subscribe_info(self, topic: str, queues: list[MessageQueue]) -> None:
        """A route change of ``topic``: its readable queues, kept when it is subscribed."""
        if topic in self.subscription_inner:
            self.topic_subscribe_info_table[topic] = set(queues)

    # ------------------------------------------------------------------ what a variant defines

    @abstractmethod
    def consume_type(self) -> ConsumeType:
        """CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull)."""

    @abstractmethod
    async def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        """The share of ``topic`` changed to ``mq_divided`` (of ``mq_all``)."""

    @abstractmethod
    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Give up ``mq`` (``pq`` is already dropped); False keeps it for another try."""

    @abstractmethod
    def remove_dirty_offset(self, mq: MessageQueue) -> None:
        """Forget a stale in-memory offset of a queue about to be (re)added."""

    @abstractmethod
    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """Where a new queue starts; -1 when it cannot tell (the queue is skipped this round).
        Raises when the broker cannot be asked."""

    @abstractmethod
    def dispatch_pull_request(self, pull_requests: list[PullRequest]) -> None:
        """Start pulling the new queues."""

    def lock_required(self, is_order: bool) -> bool:
        """Whether new queues must be locked at the broker first (orderly clustering)."""
        return is_order and self.message_model is MessageModel.CLUSTERING

    # ------------------------------------------------------------------ the rebalance

    @property
    def rebalance_lock(self) -> asyncio.Lock:
        """Held while a rebalance runs (on the loop): take it to change the tables without racing one."""
        if self._rebalance_lock is None:
            self._rebalance_lock = asyncio.Lock()
        return self._rebalance_lock

    async def do_rebalance(self, is_order: bool) -> None:
        """Rebalance every subscribed topic, then drop queues of topics no longer subscribed."""
        async with self.rebalance_lock:
            self.rebalance_count += 1
            for topic in list(self.subscription_inner):
                try:
                    await self.rebalance_by_topic(topic, is_order)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    if not is_retry_topic(topic):
                        logger.warning("%s: rebalance of %s failed", self.consumer_group, topic, exc_info=True)
            self.truncate_message_queue_not_my_topic()

    async def refresh_topic_queues(self, topic: str) -> None:
        """Fetch ``topic``'s route and keep its readable queues (at start, after a subscription change)."""
        instance = self.instance
        await instance.update_topic_route(topic)
        queues = instance.topic_subscribe_info(topic)
        if queues:
            self.topic_subscribe_info_table[topic] = set(queues)

    async def _subscribe_info(self, topic: str) -> set[MessageQueue] | None:
        queues = self.topic_subscribe_info_table.get(topic)
        if queues is not None:
            return queues
        instance = self.instance
        known = instance.topic_subscribe_info(topic)
        if not known:
            await instance.update_topic_route(topic)
            known = instance.topic_subscribe_info(topic)
        if not known:
            return None
        queues = set(known)
        self.topic_subscribe_info_table[topic] = queues
        return queues

    async def rebalance_by_topic(self, topic: str, is_order: bool) -> None:
        """Take this consumer's share of ``topic`` (all of it when broadcasting) and reconcile."""
        mq_set = await self._subscribe_info(topic)
        if self.message_model is MessageModel.BROADCASTING:
            if mq_set is None:
                logger.warning("%s: rebalance, but the topic %s does not exist", self.consumer_group, topic)
                return
            requests: list[PullRequest] = []
            if await self.update_process_queue_table_in_rebalance(topic, mq_set, is_order, requests):
                logger.info("%s: queues of %s changed: %s", self.consumer_group, topic, sorted(mq_set))
                await self.message_queue_changed(topic, mq_set, mq_set)
            self.dispatch_pull_request(requests)
            return
        instance = self.instance
        cid_all = await instance.find_consumer_id_list(topic, self.consumer_group)
        if mq_set is None and not is_retry_topic(topic):
            logger.warning("%s: rebalance, but the topic %s does not exist", self.consumer_group, topic)
        if not cid_all:
            logger.warning("%s: rebalance of %s: consumer id list unavailable", self.consumer_group, topic)
        if mq_set is None or not cid_all:
            return
        mq_all = sorted(mq_set)
        cid_sorted = sorted(cid_all)
        strategy = self.allocate_strategy
        try:
            allocated = strategy.allocate(self.consumer_group, instance.client_id, mq_all, cid_sorted)
        except Exception:
            logger.error("%s: allocation strategy %s failed for %s", self.consumer_group,
                         _strategy_name(strategy), topic, exc_info=True)
            return
        allocated_set = set(allocated or ())
        requests = []
        if await self.update_process_queue_table_in_rebalance(topic, allocated_set, is_order, requests):
            logger.info("%s: rebalance of %s by %s changed: client %s, %d queues, %d consumers, mine: %s",
                        self.consumer_group, topic, _strategy_name(strategy), instance.client_id, len(mq_all),
                        len(cid_sorted), sorted(allocated_set))
            await self.message_queue_changed(topic, mq_set, allocated_set)
        self.dispatch_pull_request(requests)

    async def update_process_queue_table_in_rebalance(self, topic: str, mq_set: set[MessageQueue], is_order: bool,
                                                      pull_requests: list[PullRequest] | None = None) -> bool:
        """Reconcile the process queues of ``topic`` with ``mq_set``; True if anything changed.

        Queues no longer ours, and (push) queues not pulled for too long, are dropped and removed;
        a process queue whose removal failed is forgotten, once no listener call runs on it, if its
        queue is ours again;
        new ones (locked at the broker first when orderly clustering) get a process queue and a
        pull request, appended to ``pull_requests`` when given, else dispatched at once. A queue whose
        start offset is unknown (`compute_pull_from_where` < 0 or raising) waits for the next round.
        """
        changed = False
        table = self.process_queue_table
        for mq, pq in list(table.items()):
            if mq.topic != topic:
                continue
            if mq not in mq_set:
                pq.dropped = True
                if await self.remove_unnecessary_message_queue(mq, pq):
                    if table.get(mq) is pq:
                        del table[mq]
                    changed = True
                    logger.info("%s: rebalance removed %s", self.consumer_group, mq)
                else:
                    self._unremoved.add(pq)
            elif pq in self._unremoved:
                # Ours again, but dropped by a removal that found its consume lock busy. Nothing pulls
                # a dropped queue: left here it would idle until it is pull-expired. Once its listener
                # call is over, replace it below (keeping the broker lock, the queue being ours).
                if await self._consume_idle(pq):
                    if table.get(mq) is pq:
                        del table[mq]
                    changed = True
                    logger.info("%s: %s is ours again; replacing its dropped process queue", self.consumer_group, mq)
            elif pq.is_pull_expired() and self.consume_type() is ConsumeType.CONSUME_PASSIVELY:
                pq.dropped = True
                if await self.remove_unnecessary_message_queue(mq, pq):
                    if table.get(mq) is pq:
                        del table[mq]
                    changed = True
                    logger.error("%s: %s was not pulled for too long; removed so that it restarts",
                                 self.consumer_group, mq)
                else:
                    self._unremoved.add(pq)
        new_requests: list[PullRequest] = []
        lock_first = self.lock_required(is_order)
        for mq in sorted(mq_set):
            if mq in table:
                continue
            if lock_first and not await self.lock(mq):
                logger.warning("%s: cannot take %s yet: it is locked by another consumer", self.consumer_group, mq)
                continue
            self.remove_dirty_offset(mq)
            try:
                next_offset = await self.compute_pull_from_where(mq)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.info("%s: cannot compute where %s starts: %s", self.consumer_group, mq, exc)
                continue
            if next_offset < 0:
                logger.warning("%s: cannot add %s this round: its start offset is unknown", self.consumer_group, mq)
                continue
            if mq in table:
                continue
            pq = self.process_queue_factory()
            if is_order:
                pq.locked = True
                pq.last_lock_timestamp = pq.now_ms()
            self.on_queue_added(mq)
            table[mq] = pq
            new_requests.append(PullRequest(self.consumer_group, mq, pq, next_offset))
            changed = True
            logger.info("%s: rebalance added %s from offset %d", self.consumer_group, mq, next_offset)
        if pull_requests is None:
            self.dispatch_pull_request(new_requests)
        else:
            pull_requests.extend(new_requests)
        return changed

    def on_queue_added(self, mq: MessageQueue) -> None:
        """Called when ``mq`` gets a new process queue (before its first pull)."""

    def truncate_message_queue_not_my_topic(self) -> None:
        """Drop the process queues of topics that are no longer subscribed."""
        for mq in [mq for mq in self.process_queue_table if mq.topic not in self.subscription_inner]:
            pq = self.process_queue_table.pop(mq, None)
            if pq is not None:
                pq.dropped = True
                logger.info("%s: %s is no longer subscribed, dropped", self.consumer_group, mq)

    async def remove_process_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Drop and remove ``mq`` now if the table still holds ``pq`` (the OFFSET_ILLEGAL fix-up; the
        next rebalance re-adds it); a process queue created for ``mq`` meanwhile is left alone."""
        if self.process_queue_table.get(mq) is not pq:
            return False
        del self.process_queue_table[mq]
        pq.dropped = True
        await self.remove_unnecessary_message_queue(mq, pq)
        logger.info("%s: removed %s to restart it from the corrected offset", self.consumer_group, mq)
        return True

    @staticmethod
    async def _consume_idle(pq: ProcessQueue) -> bool:
        """Whether no listener call runs on ``pq`` (waits up to `CONSUME_LOCK_TRY_TIMEOUT` for its consume lock).

        A dropped process queue's consume loop re-checks ``dropped`` under that lock before each call,
        so once the lock was free no further call starts on it.
        """
        if not await acquire_consume_lock(pq):
            return False
        pq.consume_lock.release()
        return True

    def destroy(self) -> None:
        """Drop every process queue and forget them (shutdown; call on the loop, or once it stopped)."""
        for pq in list(self.process_queue_table.values()):
            pq.dropped = True
        self.process_queue_table.clear()

    # ------------------------------------------------------------------ admin lookups

    async def _publish_addr(self, mq: MessageQueue) -> str:
        instance = self.instance
        addr = instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            await instance.update_topic_route(mq.topic)
            addr = instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise MQClientError(f"the broker {mq.broker_name!r} of {mq} does not exist")
        return addr

    async def max_offset(self, mq: MessageQueue) -> int:
        """The queue's next offset to be written (GET_MAX_OFFSET at its master)."""
        return await self.instance.api.get_max_offset(await self._publish_addr(mq), mq.topic, mq.queue_id)

    async def min_offset(self, mq: MessageQueue) -> int:
        """The queue's smallest offset still stored (GET_MIN_OFFSET at its master)."""
        return await self.instance.api.get_min_offset(await self._publish_addr(mq), mq.topic, mq.queue_id)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (SEARCH_OFFSET_BY_TIMESTAMP)."""
        return await self.instance.api.search_offset(await self._publish_addr(mq), mq.topic, mq.queue_id,
                                                     timestamp_ms)


class RebalanceHost(Protocol):
    """What every rebalance variant uses of its consumer."""

    @property
    def group(self) -> str: ...

    @property
    def message_model(self) -> MessageModel: ...

    @property
    def allocate_strategy(self) -> AllocateMessageQueueStrategy: ...

    @property
    def consume_from(self) -> ConsumeFromWhere: ...

    @property
    def consume_timestamp_ms(self) -> int: ...

    @property
    def offset_store(self) -> OffsetStore: ...

    def new_process_queue(self) -> ProcessQueue: ...


_HostT = TypeVar("_HostT", bound=RebalanceHost)


class HostedRebalance(RebalanceImpl, Generic[_HostT]):
    """The rebalance of one consumer (``consumer``): its group, settings and offset store."""

    #: How a new queue's committed offset is read from the offset store.
    start_offset_read_type: ReadOffsetType

    def __init__(self, consumer: _HostT) -> None:
        super().__init__(consumer.group, consumer.message_model, consumer.allocate_strategy,
                         process_queue_factory=consumer.new_process_queue)
        self.consumer = consumer

    def remove_dirty_offset(self, mq: MessageQueue) -> None:
        self.consumer.offset_store.remove_offset(mq)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """The group's offset (read per `start_offset_read_type`); without one, per ``consume_from`` (see
        `rocketflow.client.consumer.coordinator.start_offset`); -1 when the store could not be asked."""
        consumer = self.consumer
        return await compute_pull_from_where(mq, consumer.offset_store, self.start_offset_read_type,
                                             consumer.consume_from, consumer.consume_timestamp_ms, self)

    async def _heartbeat_after_rebalance(self, topic: str) -> None:
        """Tell the brokers the new share of ``topic`` (a failure is logged)."""
        try:
            await self.instance.send_heartbeat_to_all_brokers()
        except MQError as exc:
            logger.warning("%s: heartbeat after the rebalance of %s failed: %s", self.consumer_group, topic, exc)


def _strategy_name(strategy: object) -> str:
    try:
        return str(strategy.name)  # type: ignore[attr-defined]
    except Exception:
        return type(strategy).__name__


__all__ = ["CONSUME_LOCK_TRY_TIMEOUT", "HostedRebalance", "RebalanceHost", "RebalanceImpl", "acquire_consume_lock"]
