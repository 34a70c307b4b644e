"""`ScheduleMessageService`: delivers delayed messages.

A message with delay level L waits in queue L-1 of SCHEDULE_TOPIC_XXXX; its consume-queue tags
code is its deliver time. Each level's progress is a consume offset kept in ``delayOffset.json``.
When a message is due it is stored again under its REAL_TOPIC / REAL_QID with DELAY removed.
The first check runs 1 s after start, then every 100 ms. See docs/design/broker.md#delayed-delivery.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from rocketflow.background import BackgroundTask
from rocketflow.broker.context import BrokerContext
from rocketflow.broker.message_put import MessagePut
from rocketflow.protocol.bodies import TopicFilterType
from rocketflow.protocol.codec import RecordDecodeError, decode_record
from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.names import SCHEDULE_TOPIC
from rocketflow.protocol.properties import InvalidPropertyError
from rocketflow.protocol.sysflag import MessageSysFlag

logger = logging.getLogger(__name__)

FIRST_DELAY_SECONDS: Final = 1.0
POLL_INTERVAL_SECONDS: Final = 0.1
#: Wait before retrying a level whose re-delivery failed (RocketMQ: DELAY_FOR_A_PERIOD).
RETRY_DELAY_SECONDS: Final = 10.0
#: Messages re-delivered per level per pass (keeps one pass short).
MAX_PER_PASS: Final = 256
_MULTI_TAGS: Final = int(MessageSysFlag.MULTI_TAGS)


class ScheduleMessageService:
    """Moves due messages from SCHEDULE_TOPIC_XXXX back to their real topics."""

    def __init__(self, ctx: BrokerContext, put_path: MessagePut) -> None:
        self.ctx = ctx
        self.put_path = put_path
        self.delay_offsets = ctx.delay_offsets
        self.delay_levels_ms = ctx.config.delay_levels_ms
        self._task = BackgroundTask(self._run)
        self._retry_after: dict[int, float] = {}
        self.delivered = 0

    @property
    def max_delay_level(self) -> int:
        return len(self.delay_levels_ms)

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        await asyncio.sleep(FIRST_DELAY_SECONDS)
        while True:
            try:
                self.deliver_due()
            except Exception:
                logger.exception("delayed message delivery failed")
            await asyncio.sleep(POLL_INTERVAL_SECONDS)

    def deliver_due(self, now_ms: int | None = None) -> int:
        """One pass over every level; returns how many messages were re-delivered."""
        store = self.ctx.store
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        loop_now = time.monotonic()
        delivered = 0
        for level in range(1, self.max_delay_level + 1):
            if self._retry_after.get(level, 0.0) > loop_now:
                continue
            queue = store.consume_queues.find(SCHEDULE_TOPIC, level - 1)
            if queue is None:
                continue
            offset = self.delay_offsets.get(level)
            if offset < queue.min_offset:
                offset = queue.min_offset
            end = queue.max_offset
            moved = 0
            while offset < end and moved < MAX_PER_PASS:
                unit = queue.unit_at(offset)
                if unit is None:
                    break
                phys, size, deliver_at = unit
                # A deliver time further out than the level's delay was computed with another
                # clock or table: deliver now (RocketMQ's correctDeliverTimestamp).
                if deliver_at > now + self.delay_levels_ms[level - 1]:
                    deliver_at = now
                if deliver_at > now:
                    break
                if not self._redeliver(phys, size, level):
                    self._retry_after[level] = loop_now + RETRY_DELAY_SECONDS
                    break
                offset += 1
                moved += 1
            if moved:
                self.delay_offsets.update(level, offset)
                delivered += moved
        self.delivered += delivered
        return delivered

    def _redeliver(self, phys: int, size: int, level: int) -> bool:
        """Store the delayed message at ``phys`` under its real topic; False to retry later."""
        ctx = self.ctx
        record = ctx.store.select_one_message_by_offset(phys, size)
        if record is None:
            logger.warning("delayed message at commit-log offset %d (level %d) is gone; skipping it", phys, level)
            return True
        try:
            message, _ = decode_record(record, decompress=False)
        except RecordDecodeError as exc:
            logger.warning("delayed message at %d (level %d) is damaged (%s); skipping it", phys, level, exc)
            return True
        properties = dict(message.properties)
        real_topic = properties.pop(MessageConst.REAL_TOPIC, None)
        real_queue = properties.pop(MessageConst.REAL_QUEUE_ID, None)
        properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
        if not real_topic or real_queue is None or not real_queue.lstrip("-").isdigit():
            logger.warning("delayed message %s has no REAL_TOPIC/REAL_QID; dropping it", message.msg_id)
            return True
        sys_flag = message.sys_flag
        topic_config = ctx.topics.select(real_topic)
        if topic_config is not None and topic_config.topic_filter_type is TopicFilterType.MULTI_TAG:
            sys_flag |= _MULTI_TAGS
        try:
            put = self.put_path.moved(message, real_topic, int(real_queue), properties, sys_flag=sys_flag,
                                      prepared_transaction_offset=message.prepared_transaction_offset)
        except InvalidPropertyError as exc:
            logger.warning("delayed message %s has bad properties (%s); dropping it", message.msg_id, exc)
            return True
        result = self.put_path.put_now(put)
        if not result.status.is_ok:
            logger.error("re-delivering delayed message %s to %s failed: %s %s", message.msg_id, real_topic,
                         result.status.value, result.error)
            return False
        return True


__all__ = ["ScheduleMessageService"]
