"""`MessageTail`: follows the new messages of a topic on every readable queue (``rocketflow admin message tail``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
from types import TracebackType
from typing import Protocol

from rocketflow.client.admin.results import TOOLS_CONSUMER_GROUP
from rocketflow.client.api import PullStatus, process_pull_result
from rocketflow.client.errors import MQError
from rocketflow.client.instance import ClientInstance
from rocketflow.protocol.message import MessageExt, MessageQueue
from rocketflow.protocol.sysflag import PullSysFlag
from rocketflow.remoting.headers import (
    PullMessageRequestHeader,
)

logger = logging.getLogger(__name__)



class TailHost(Protocol):
    """What a tail uses of its admin (an `Admin`)."""

    @property
    def instance(self) -> ClientInstance: ...

    @property
    def timeout(self) -> float: ...




class MessageTail:
    """Follows new messages of a topic on every readable queue (long polling, no offsets committed).

    Use it as a context manager; `poll` returns what arrived so far (waiting up to ``timeout``).
    """

    def __init__(self, admin: TailHost, topic: str, positions: dict[MessageQueue, int], addrs: dict[str, str],
                 batch_size: int, hold_seconds: float) -> None:
        self.topic = topic
        #: The queue -> first offset each queue was followed from.
        self.start_offsets = dict(positions)
        self._admin = admin
        self._addrs = addrs
        self._batch_size = batch_size
        self._hold = hold_seconds
        self._out: queue.Queue[MessageExt] = queue.Queue()
        self._future: concurrent.futures.Future[None] | None = admin.instance.submit(self._follow(positions))

    @property
    def queues(self) -> list[MessageQueue]:
        return sorted(self.start_offsets)

    async def _follow(self, positions: dict[MessageQueue, int]) -> None:
        await asyncio.gather(*(self._follow_queue(mq, offset) for mq, offset in positions.items()))

    async def _follow_queue(self, mq: MessageQueue, offset: int) -> None:
        api = self._admin.instance.api
        addr = self._addrs[mq.broker_name]
        flags = int(PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION)
        hold_ms = int(self._hold * 1000)
        while True:
            header = PullMessageRequestHeader(
                consumer_group=TOOLS_CONSUMER_GROUP, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
                max_msg_nums=self._batch_size, sys_flag=flags, commit_offset=0, suspend_timeout_millis=hold_ms,
                sub_version=0, subscription="*", expression_type="TAG")
            try:
                result = await api.pull_message(addr, header, self._hold + self._admin.timeout)
            except MQError as exc:
                logger.warning("tail of %s: pull from %s failed: %s", mq, addr, exc)
                await asyncio.sleep(1.0)
                continue
            if result.status is PullStatus.FOUND:
                for msg in process_pull_result(result, mq):
                    self._out.put(msg)
                for bad in result.undecodable:
                    logger.warning("tail of %s: the record at offset %d cannot be decoded (%s); skipped", mq,
                                   bad.queue_offset, bad.reason)
            offset = result.next_begin_offset

    def poll(self, timeout: float = 1.0) -> list[MessageExt]:
        """The messages that arrived (at least one unless ``timeout`` passed first), in arrival order.

        Raises the error that stopped the tail, if any.
        """
        messages: list[MessageExt] = []
        try:
            messages.append(self._out.get(timeout=timeout))
        except queue.Empty:
            self._raise_if_failed()
            return messages
        while True:
            try:
                messages.append(self._out.get_nowait())
            except queue.Empty:
                return messages

    def _raise_if_failed(self) -> None:
        future = self._future
        if future is not None and future.done() and not future.cancelled():
            error = future.exception()
            if error is not None:
                raise error

    def close(self) -> None:
        """Stop following (idempotent)."""
        future, self._future = self._future, None
        if future is None:
            return
        future.cancel()
        try:
            future.result(timeout=5.0)
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
            pass
        except Exception as exc:  # the tail already failed; the caller saw it in poll()
            logger.debug("tail of %s ended with %r", self.topic, exc)

    def __enter__(self) -> MessageTail:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


__all__ = ["MessageTail", "TailHost"]
