"""The pull consumer's rebalance variant (RocketMQ's ``RebalanceLitePullImpl``).

`RebalanceImpl` does the allocation and the process-queue reconciliation; this variant says what
that means for a `PullConsumer`: a new queue gets a background pull task at once (so a queue
listener called from `message_queue_changed` already sees it assigned), a removed queue's
position is persisted and its cached batches are dropped, and new queues start where the group
committed (else per ``consume_from``). Heartbeats announce CONSUME_ACTIVELY.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rocketflow.client.consumer.coordinator.rebalance import RebalanceImpl
from rocketflow.client.consumer.fetcher import PullRequest
from rocketflow.client.consumer.offset_store import ReadOffsetType
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.errors import MQError
from rocketflow.protocol.bodies import ConsumeFromWhere, ConsumeType
from rocketflow.protocol.message import MessageQueue
from rocketflow.protocol.names import is_retry_topic

if TYPE_CHECKING:
    from rocketflow.client.consumer.pull_consumer import PullConsumer

logger = logging.getLogger("rocketflow.client.consumer.coordinator.rebalance")


class RebalanceLitePullImpl(RebalanceImpl):
    """Rebalance of a subscribing `PullConsumer`."""

    def __init__(self, consumer: PullConsumer) -> None:
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
        """The group's offset (memory first, then the store); without one, per ``consume_from``
        (retry topics: 0 from the last offset, the max offset by timestamp); -1 when the store
        could not be asked."""
        consumer = self.consumer
        last_offset = await consumer.offset_store.read_offset(mq, ReadOffsetType.MEMORY_FIRST_THEN_STORE)
        if last_offset >= 0:
            return last_offset
        if last_offset != -1:
            return -1
        where = consumer.consume_from
        if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return 0
        if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            if is_retry_topic(mq.topic):
                return await self.max_offset(mq)
            return await self.search_offset(mq, consumer.consume_timestamp_ms)
        if is_retry_topic(mq.topic):
            return 0
        return await self.max_offset(mq)

    def dispatch_pull_request(self, pull_requests: list[PullRequest]) -> None:
        for request in pull_requests:
            self.consumer.start_queue(request.message_queue, request.process_queue, request.next_offset)

    async def min_offset(self, mq: MessageQueue) -> int:
        """The queue's smallest offset still stored (GET_MIN_OFFSET at its master)."""
        return await self.instance.api.get_min_offset(await self._publish_addr(mq), mq.topic, mq.queue_id)


__all__ = ["RebalanceLitePullImpl"]
