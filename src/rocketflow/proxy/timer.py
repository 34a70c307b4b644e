"""Delivery at a chosen time (5.x DELAY messages), at millisecond precision.

4.x delay levels are fixed steps; a 5.x producer names the moment. Such a message is stored in the
system topic ``rmq_sys_wheel_timer`` (one queue), its real topic and queue in ``REAL_TOPIC`` /
``REAL_QID`` and its time in ``TIMER_DELIVER_MS``; `TimerService` keeps the pending ones in a heap
and, when one is due, stores it again under its real topic (through the broker's send processor), where
consumers of either protocol see it. Progress is the timer queue's offset below which everything was
delivered (kept as the consumer offset of ``rmq_sys_timer_group``); at start the queue is read from
there, so a crash delivers again, at most, the messages delivered since the last offset commit.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from typing import Final

from rocketflow.acl import SessionCredentials
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.protocol.properties import encode_properties
from rocketflow.proxy.access import BrokerAccess
from rocketflow.proxy.convert import DELIVER_MS_PROPERTY
from rocketflow.proxy.local import LocalChannel, invoke_local
from rocketflow.proxy.pop_service import now_ms
from rocketflow.remoting.codes import RequestCode, ResponseCode

logger = logging.getLogger(__name__)

TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
TIMER_GROUP: Final = "rmq_sys_timer_group"
POLL_SECONDS: Final = 0.05
RETRY_MS: Final = 1000
_READ_CHUNK: Final = 256


def send_fields(topic: str, queue_id: int, properties: dict[str, str], born_ms: int, *,
                producer_group: str, sys_flag: int = 0) -> dict[str, str]:
    """SEND_MESSAGE's header fields (their wire names)."""
    return {
        "producerGroup": producer_group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": str(queue_id), "sysFlag": str(sys_flag), "bornTimestamp": str(born_ms), "flag": "0",
        "properties": encode_properties(properties), "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
    }


class TimerService:
    """Holds messages until their delivery time (on the broker's loop)."""

    def __init__(self, access: BrokerAccess) -> None:
        self.access = access
        self._heap: list[tuple[int, int]] = []
        self._pending_offsets: set[int] = set()
        self._scanned_to = 0
        self._task: asyncio.Task[None] | None = None
        self._channel: LocalChannel | None = None
        self.delivered = 0

    def start(self) -> None:
        self._channel = LocalChannel("127.0.0.1:0")
        self.access.ensure_system_topic(TIMER_TOPIC, 1)
        start = self.access.committed_offset(TIMER_GROUP, TIMER_TOPIC, 0)
        self._scanned_to = max(start, self.access.min_offset(TIMER_TOPIC, 0))
        self._scan()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        self._commit()

    @property
    def pending(self) -> int:
        return len(self._heap)

    def _scan(self) -> None:
        """Read timer messages stored since the last scan into the heap."""
        offset = self._scanned_to
        while True:
            read = self.access.read(TIMER_TOPIC, 0, offset, _READ_CHUNK, TIMER_GROUP)
            for message in read.messages:
                self._track(message.queue_offset, message.properties.get(DELIVER_MS_PROPERTY, "0"))
            if read.next_offset <= offset:
                break
            offset = read.next_offset
            if read.exhausted:
                break
        self._scanned_to = max(self._scanned_to, offset)

    def _track(self, queue_offset: int, deliver_text: str) -> None:
        if queue_offset in self._pending_offsets:
            return
        deliver_ms = int(deliver_text) if deliver_text.isdigit() else 0
        heapq.heappush(self._heap, (deliver_ms, queue_offset))
        self._pending_offsets.add(queue_offset)

    def added(self, queue_offset: int, deliver_ms: int) -> None:
        """A message was just stored in the timer queue at ``queue_offset``."""
        self._scan()
        self._track(queue_offset, str(deliver_ms))

    async def _run(self) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(POLL_SECONDS)
            ticks += 1
            try:
                self._scan()
                await self._deliver_due()
                if ticks % 20 == 0:
                    self._commit()
            except Exception:
                logger.exception("timer pass failed")

    async def _deliver_due(self) -> None:
        now = now_ms()
        while self._heap and self._heap[0][0] <= now:
            _, queue_offset = heapq.heappop(self._heap)
            if not await self._deliver(queue_offset):
                heapq.heappush(self._heap, (now + RETRY_MS, queue_offset))
                return
            self._pending_offsets.discard(queue_offset)
            self.delivered += 1

    async def _deliver(self, queue_offset: int) -> bool:
        read = self.access.read(TIMER_TOPIC, 0, queue_offset, 1, TIMER_GROUP)
        if not read.messages or read.messages[0].queue_offset != queue_offset:
            logger.warning("timer message at offset %d is gone from the store", queue_offset)
            return True
        message: MessageExt = read.messages[0]
        properties = dict(message.properties)
        topic = properties.pop(MessageConst.REAL_TOPIC, "")
        queue_text = properties.pop(MessageConst.REAL_QUEUE_ID, "-1")
        properties.pop(MessageConst.WAIT_STORE_MSG_OK, None)
        if not topic:
            logger.error("timer message at offset %d has no REAL_TOPIC; dropped", queue_offset)
            return True
        credentials = self.access.broker_credentials
        assert self._channel is not None
        fields = send_fields(topic, int(queue_text) if queue_text.lstrip("-").isdigit() else -1, properties,
                             message.born_timestamp, producer_group=properties.get(MessageConst.PRODUCER_GROUP, ""),
                             sys_flag=0)
        signer = SessionCredentials(*credentials) if credentials else None
        response = await invoke_local(self.access.processor, self._channel, RequestCode.SEND_MESSAGE, fields,
                                      message.body, credentials=signer)
        if response.code != ResponseCode.SUCCESS:
            logger.error("cannot deliver timer message %s to %s: %s %s", message.msg_id, topic, response.code,
                         response.remark)
            return False
        return True

    def _commit(self) -> None:
        """Everything below the smallest pending offset is delivered."""
        done_below = min(self._pending_offsets, default=self._scanned_to)
        self.access.commit_offset(TIMER_GROUP, TIMER_TOPIC, 0, done_below)


__all__ = ["TIMER_GROUP", "TIMER_TOPIC", "TimerService", "send_fields"]
