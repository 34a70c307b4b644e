"""Where a queue a consumer newly holds starts (RocketMQ's ``computePullFromWhere``), for both consumers.

The group's committed offset when it has one. Without one (the offset store answers -1), per
``consume_from``: the first offset, the offset of the first message stored at or after the consume
timestamp, or the queue's max offset (the default: only new messages). A retry topic starts at 0
(from the last offset) or at its max offset (by timestamp). When the store could not tell (-2: the
broker was not reached or answered an error other than "no offset"), the answer is -1 and the
rebalance leaves the queue for its next round, rather than guess and skip messages.
"""

from __future__ import annotations

from typing import Protocol

from rocketflow.client.consumer.offset_store import OffsetStore, ReadOffsetType
from rocketflow.protocol.bodies import ConsumeFromWhere
from rocketflow.protocol.message import MessageQueue
from rocketflow.protocol.names import is_retry_topic


class QueueOffsets(Protocol):
    """The broker lookups a start offset may need (the rebalance's)."""

    async def max_offset(self, mq: MessageQueue) -> int: ...

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...


async def compute_pull_from_where(mq: MessageQueue, store: OffsetStore, read_type: ReadOffsetType,
                                  consume_from: ConsumeFromWhere, consume_timestamp_ms: int,
                                  offsets: QueueOffsets) -> int:
    """Where ``mq`` starts (see the module docstring); -1 when the store could not be asked. Raises
    when a broker lookup fails."""
    last_offset = await store.read_offset(mq, read_type)
    if last_offset >= 0:
        return last_offset
    if last_offset != -1:
        return -1
    if consume_from is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return 0
    if consume_from is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        if is_retry_topic(mq.topic):
            return await offsets.max_offset(mq)
        return await offsets.search_offset(mq, consume_timestamp_ms)
    # LAST_OFFSET and the deprecated values treated like it
    if is_retry_topic(mq.topic):
        return 0
    return await offsets.max_offset(mq)


__all__ = ["QueueOffsets", "compute_pull_from_where"]
