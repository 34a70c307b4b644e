"""The pull consumer's rebalance variant (RocketMQ's ``RebalanceLitePullImpl``).

`RebalanceImpl` does the allocation and the process-queue reconciliation; this variant says what
that means for a `PullConsumer`: a new queue gets a background pull task at once (so a queue
listener called from `message_queue_changed` already sees it assigned), a removed queue's
position is persisted and its cached batches are dropped, and new queues start where the group
committed (else per ``consume_from``). Heartbeats announce CONSUME_ACTIVELY.
"""

from __future__ import annotations

import logging
from typing import Protocol

from rocketflow.client.consumer.allocate import AllocateMessageQueueStrategy
from rocketflow.client.consumer.coordinator.rebalance import RebalanceImpl
from rocketflow.client.consumer.coordinator.start_offset import compute_pull_from_where
from rocketflow.client.consumer.fetcher import PullRequest
from rocketflow.client.consumer.offset_store import OffsetStore, ReadOffsetType
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.errors import MQError
from rocketflow.protocol.bodies import ConsumeFromWhere, ConsumeType, MessageModel
from rocketflow.protocol.message import MessageQueue

logger = logging.getLogger(__name__)


class LitePullRebalanceHost(Protocol):
    """What the pull consumer's rebalance uses of its consumer (a `PullConsumer`)."""

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

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None: ...

    async def release_queue(self, mq: MessageQueue, pq: ProcessQueue) -> None: ...

    async def notify_queue_listener(self, topic: str, mq_all: set[MessageQueue],
                                    mq_divided: set[MessageQueue]) -> None: ...


class RebalanceLitePullImpl(RebalanceImpl):
    """Rebalance of a subscribing `PullConsumer`."""

    def __init__(self, consumer: LitePullRebalanceHost) -> None:
        super().__init__(consumer.group, consumer.message_model, consumer.allocate_strategy,
                         process_queue_factory=consumer.new_process_queue)
        self.consumer = consumer

    def consume_type(self) -> ConsumeType:
        return ConsumeType.CONSUME_ACTIVELY

    async def update_process_queue_table_in_rebalance(self, topic: str, mq_set: set[MessageQueue], is_order: bool,
                                                      pull_requests: list[PullRequest] | None = None) -> bool:
        # New queues start pulling as soon as they are added (not after message_queue_changed), so
        # the queue listener can seek them.
        return await super().update_process_queue_table_in_rebalance(topic, mq_set, is_order, None)

    async def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        """Tell the brokers (heartbeat), then the user's queue listener of ``topic``."""
        try:
            await self.instance.send_heartbeat_to_all_brokers()
        except MQError as exc:
            logger.warning("%s: heartbeat after the rebalance of %s failed: %s", self.consumer_group, topic, exc)
        await self.consumer.notify_queue_listener(topic, set(mq_all), set(mq_divided))

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        await self.consumer.release_queue(mq, pq)
        return True

    def remove_dirty_offset(self, mq: MessageQueue) -> None:
        self.consumer.offset_store.remove_offset(mq)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """The group's offset (this consumer's last commit first, then the store); without one, per
        ``consume_from`` (see `rocketflow.client.consumer.coordinator.start_offset`); -1 when the store
        could not be asked."""
        consumer = self.consumer
        return await compute_pull_from_where(mq, consumer.offset_store, ReadOffsetType.MEMORY_FIRST_THEN_STORE,
                                             consumer.consume_from, consumer.consume_timestamp_ms, self)

    def dispatch_pull_request(self, pull_requests: list[PullRequest]) -> None:
        for request in pull_requests:
            self.consumer.start_queue(request.message_queue, request.process_queue, request.next_offset)


__all__ = ["LitePullRebalanceHost", "RebalanceLitePullImpl"]
