"""The push consumer's rebalance (RocketMQ's ``RebalancePushImpl``).

New queues start at the committed offset read from the broker (or the local offset file) and get a
pull request for the consumer's pull service. A queue given up has its offset persisted and, when
the consumer is orderly in clustering mode, its broker lock released once no listener call runs on
it: at once, or ``unlock_delay_time`` later when it still caches messages (a late unlock is
cancelled if the queue comes back meanwhile). After a change of its share of a topic the consumer
bumps the subscription version, re-derives its per-queue flow-control thresholds from the topic
ones and heartbeats.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Protocol

from rocketflow.client.consumer.coordinator.rebalance import HostedRebalance, RebalanceHost, acquire_consume_lock
from rocketflow.client.consumer.fetcher import PullRequest
from rocketflow.client.consumer.offset_store import ReadOffsetType
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.consumer.push_settings import PushConsumerSettings
from rocketflow.protocol.bodies import ConsumeType, MessageModel, now_millis
from rocketflow.protocol.message import MessageQueue

logger = logging.getLogger(__name__)


class PushRebalanceHost(RebalanceHost, Protocol):
    """What the push consumer's rebalance uses of its consumer (a `PushConsumer`)."""

    @property
    def consume_orderly(self) -> bool: ...

    @property
    def settings(self) -> PushConsumerSettings: ...

    def apply_topic_thresholds(self, queue_count: int) -> None: ...

    def execute_pull_request(self, request: PullRequest) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...


class RebalancePushImpl(HostedRebalance[PushRebalanceHost]):
    """The push consumer's rebalance: offsets from the offset store (the broker's or the local file's,
    never the memory's), pull requests for new queues."""

    start_offset_read_type = ReadOffsetType.READ_FROM_STORE

    def __init__(self, consumer: PushRebalanceHost) -> None:
        super().__init__(consumer)
        self._delayed_unlocks: dict[MessageQueue, asyncio.TimerHandle] = {}

    def consume_type(self) -> ConsumeType:
        return ConsumeType.CONSUME_PASSIVELY

    async def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        """Bump the subscription version, re-derive per-queue thresholds from topic thresholds, heartbeat."""
        subscription = self.subscription_inner.get(topic)
        new_version = now_millis()
        if subscription is not None:
            if new_version <= subscription.sub_version:
                new_version = subscription.sub_version + 1
            logger.info("%s: %s rebalanced, subscription version %d -> %d", self.consumer_group, topic,
                        subscription.sub_version, new_version)
            subscription.sub_version = new_version
        self.consumer.apply_topic_thresholds(len(self.process_queue_table))
        await self._heartbeat_after_rebalance(topic)
        if subscription is not None and self.subscription_inner.get(topic) is subscription:
            self._announced_sub_versions[topic] = new_version

    # ------------------------------------------------------------------ removal

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        store = self.consumer.offset_store
        await store.persist(mq)
        store.remove_offset(mq)
        if not (self.consumer.consume_orderly and self.message_model is MessageModel.CLUSTERING):
            return True
        try:
            if await acquire_consume_lock(pq):
                try:
                    return await self._unlock_delay(mq, pq)
                finally:
                    pq.consume_lock.release()
            tries = pq.inc_try_unlock_times()
            logger.warning("%s: %s is being consumed, cannot release it now (try %d)", self.consumer_group, mq,
                           tries)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s: releasing %s failed", self.consumer_group, mq)
        return False

    async def _unlock_delay(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        if pq.has_temp_message:
            delay = self.consumer.settings.unlock_delay_time
            logger.info("%s: %s still holds messages; unlocking it in %.3gs", self.consumer_group, mq, delay)
            self._cancel_delayed_unlock(mq)
            loop = asyncio.get_running_loop()
            self._delayed_unlocks[mq] = loop.call_later(delay, self._fire_delayed_unlock, mq)
        else:
            await self.unlock(mq, True)
        return True

    def _fire_delayed_unlock(self, mq: MessageQueue) -> None:
        self._delayed_unlocks.pop(mq, None)
        if mq in self.process_queue_table:
            logger.info("%s: %s is ours again; keeping its lock", self.consumer_group, mq)
            return
        self.consumer.spawn(self.unlock(mq, True))

    def _cancel_delayed_unlock(self, mq: MessageQueue) -> None:
        handle = self._delayed_unlocks.pop(mq, None)
        if handle is not None:
            handle.cancel()

    def on_queue_added(self, mq: MessageQueue) -> None:
        self._cancel_delayed_unlock(mq)

    def take_delayed_unlocks(self) -> dict[str, set[MessageQueue]]:
        """Cancel the pending delayed unlocks; return their queues by broker name (shutdown unlocks them now)."""
        result: dict[str, set[MessageQueue]] = {}
        for mq, handle in list(self._delayed_unlocks.items()):
            handle.cancel()
            result.setdefault(mq.broker_name, set()).add(mq)
        self._delayed_unlocks.clear()
        return result

    async def unlock_all(self, oneway: bool) -> None:
        await super().unlock_all(oneway)
        for broker_name, mqs in self.take_delayed_unlocks().items():
            await self._unlock_batch(broker_name, mqs, oneway)

    # ------------------------------------------------------------------ new queues

    def dispatch_pull_request(self, pull_requests: list[PullRequest]) -> None:
        for request in pull_requests:
            self.consumer.execute_pull_request(request)


__all__ = ["PushRebalanceHost", "RebalancePushImpl"]
