"""The pull consumer's rebalance variant (RocketMQ's ``RebalanceLitePullImpl``).

`RebalanceImpl` does the allocation and the process-queue reconciliation; this variant says what
that means for a `PullConsumer`: a new queue gets a background pull task at once (so a queue
listener called from `message_queue_changed` already sees it assigned), a removed queue's
position is persisted and its cached batches are dropped, and new queues start where the group
committed (else per ``consume_from``). Heartbeats announce CONSUME_ACTIVELY.
"""

from __future__ import annotations

from typing import Protocol

from rocketflow.client.consumer.coordinator.rebalance import HostedRebalance, RebalanceHost
from rocketflow.client.consumer.fetcher import PullRequest
from rocketflow.client.consumer.offset_store import ReadOffsetType
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.protocol.bodies import ConsumeType
from rocketflow.protocol.message import MessageQueue


class LitePullRebalanceHost(RebalanceHost, Protocol):
    """What the pull consumer's rebalance uses of its consumer (a `PullConsumer`)."""

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None: ...

    async def release_queue(self, mq: MessageQueue, pq: ProcessQueue) -> None: ...

    async def notify_queue_listener(self, topic: str, mq_all: set[MessageQueue],
                                    mq_divided: set[MessageQueue]) -> None: ...


class RebalanceLitePullImpl(HostedRebalance[LitePullRebalanceHost]):
    """Rebalance of a subscribing `PullConsumer`; new queues start at its last commit, else the store's."""

    start_offset_read_type = ReadOffsetType.MEMORY_FIRST_THEN_STORE

    def consume_type(self) -> ConsumeType:
        return ConsumeType.CONSUME_ACTIVELY

    async def update_process_queue_table_in_rebalance(self, topic: str, mq_set: set[MessageQueue], is_order: bool,
                                                      pull_requests: list[PullRequest] | None = None) -> bool:
        # New queues start pulling as soon as they are added (not after message_queue_changed), so
        # the queue listener can seek them.
        return await super().update_process_queue_table_in_rebalance(topic, mq_set, is_order, None)

    async def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        """Tell the brokers (heartbeat), then the user's queue listener of ``topic``."""
        await self._heartbeat_after_rebalance(topic)
        await self.consumer.notify_queue_listener(topic, set(mq_all), set(mq_divided))

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        await self.consumer.release_queue(mq, pq)
        return True

    def dispatch_pull_request(self, pull_requests: list[PullRequest]) -> None:
        for request in pull_requests:
            self.consumer.start_queue(request.message_queue, request.process_queue, request.next_offset)


__all__ = ["LitePullRebalanceHost", "RebalanceLitePullImpl"]
