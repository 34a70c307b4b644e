"""Concurrent consumption (RocketMQ's ``ConsumeMessageConcurrentlyService``).

Pulled messages are cut into batches of ``consume_message_batch_max_size`` and handed to the
listener: plain functions on a thread pool of ``consume_thread_max`` threads, ``async def``
functions on the client's event loop (at most ``consume_thread_max`` calls at a time). After each
call, unless the queue was dropped meanwhile:

* clustering: every message past ``ack_index`` is sent back (`rocketflow.client.consumer.consume.retry`);
  a message that cannot be sent back at all is retried locally 5 s later;
* broadcasting: failed messages are logged and dropped;
* `ProcessQueue.remove_messages` gives the smallest unconsumed offset, committed increase-only.

Messages whose consumption started more than ``consume_timeout`` ago are sent back with delay
level 3 by a scan every ``consume_timeout``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from rocketflow.client.consumer.consume.base import (
    BUNDLE_MAX_CALLS,
    CallTally,
    ConsumeMessageService,
    ConsumingConsumer,
)
from rocketflow.client.consumer.consume.context import (
    CMResult,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeMessageContext,
    ConsumeMessageDirectlyResult,
    ConsumeReturnType,
)
from rocketflow.client.consumer.consume.retry import MessageSendBack
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.protocol.bodies import MessageModel, now_millis
from rocketflow.protocol.message import MessageConst, MessageExt, MessageQueue

logger = logging.getLogger(__name__)

#: Delay before messages that could not be sent back are consumed again locally (seconds).
SEND_BACK_FAILED_RETRY_DELAY: Final = 5.0
#: Expired-message scan: at most this many messages per queue, sent back with this delay level.
EXPIRED_SCAN_MAX: Final = 16
EXPIRED_DELAY_LEVEL: Final = 3
#: How long a consume thread waits for a send-back (the RPC has 5 s, the producer fallback 3 s).
SEND_BACK_WAIT: Final = 15.0


#: The CONSUME_MESSAGE_DIRECTLY outcome of each status.
_DIRECT_OUTCOMES: Final = {
    ConsumeConcurrentlyStatus.CONSUME_SUCCESS: CMResult.CR_SUCCESS,
    ConsumeConcurrentlyStatus.RECONSUME_LATER: CMResult.CR_LATER,
}


class HeldQueues(Protocol):
    """The queues the consumer holds (its rebalance's table), scanned for expired messages."""

    @property
    def process_queue_table(self) -> Mapping[MessageQueue, ProcessQueue]: ...


class ConsumeRequest:
    """Messages of one queue for a concurrent listener: one call per batch, one after the other."""

    __slots__ = ("message_queue", "msgs", "process_queue")

    def __init__(self, msgs: list[MessageExt], process_queue: ProcessQueue, message_queue: MessageQueue) -> None:
        self.msgs = msgs
        self.process_queue = process_queue
        self.message_queue = message_queue


def _calls(msgs: list[MessageExt], batch_size: int) -> list[list[MessageExt]]:
    """``msgs`` cut into the batches of the listener calls."""
    if batch_size == 1:
        return [[msg] for msg in msgs]
    return [msgs[start:start + batch_size] for start in range(0, len(msgs), batch_size)]


class _BundleTally(CallTally):
    """The calls of one consume request, plus the messages to forget or to consume again locally."""

    __slots__ = ("consumed", "retry_later")

    def __init__(self) -> None:
        super().__init__()
        self.consumed: list[MessageExt] = []
        self.retry_later: list[MessageExt] = []

    def done(self, msgs: list[MessageExt], send_back_failed: list[MessageExt]) -> None:
        """A call settled: its messages leave the process queue, except those to consume again locally."""
        if send_back_failed:
            failed_ids = {id(msg) for msg in send_back_failed}
            self.consumed.extend(msg for msg in msgs if id(msg) not in failed_ids)
            self.retry_later.extend(send_back_failed)
        else:
            self.consumed.extend(msgs)


class ConsumeMessageConcurrentlyService(ConsumeMessageService):
    """Concurrent consumption of a push consumer (RocketMQ's ``ConsumeMessageConcurrentlyService``)."""

    def __init__(self, consumer: ConsumingConsumer, listener: Callable[..., Any], queues: HeldQueues,
                 send_back: MessageSendBack) -> None:
        super().__init__(consumer, listener, "concurrent")
        self.queues = queues
        self.send_back = send_back

    async def start_on_loop(self) -> None:
        await super().start_on_loop()
        self._start_background(self._clean_expired_periodically())

    # ------------------------------------------------------------------ submission

    def submit_consume_request(self, msgs: list[MessageExt], process_queue: ProcessQueue,
                               message_queue: MessageQueue, dispatch_to_consume: bool) -> None:
        batch_size = self.consumer.settings.consume_message_batch_max_size
        calls = -(-len(msgs) // batch_size)
        per_request = self.bundle_size(min(calls, BUNDLE_MAX_CALLS)) * batch_size
        if per_request >= len(msgs):
            self._submit(ConsumeRequest(msgs, process_queue, message_queue))
            return
        for start in range(0, len(msgs), per_request):
            self._submit(ConsumeRequest(msgs[start:start + per_request], process_queue, message_queue))

    def _submit(self, request: ConsumeRequest) -> None:
        if self.is_async:
            self._run_task(self._consume_async(request))
        else:
            self._run_in_pool(self._consume_sync, request)

    def submit_consume_request_later(self, msgs: list[MessageExt], process_queue: ProcessQueue,
                                     message_queue: MessageQueue) -> None:
        """Consume ``msgs`` again locally after 5 s (they could not be sent back)."""
        self.consumer.call_later(SEND_BACK_FAILED_RETRY_DELAY,
                                 lambda: self.submit_consume_request(msgs, process_queue, message_queue, True))

    # ------------------------------------------------------------------ one bundle of requests

    def _prepare(self, msgs: list[MessageExt], mq: MessageQueue) -> None:
        if mq.topic == self.consumer.retry_topic:  # a queue's messages are of its topic
            self.reset_retry_topic(msgs)
        started = ((MessageConst.CONSUME_START_TIMESTAMP, str(now_millis())),)
        for msg in msgs:
            msg.put_properties(started)

    def _consume_sync(self, request: ConsumeRequest) -> None:
        pq, mq = request.process_queue, request.message_queue
        tally = _BundleTally()
        success = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        listener = self.listener
        hooked = bool(self.consumer.hooks)
        monotonic = time.monotonic
        self._prepare(request.msgs, mq)  # the calls of a request follow each other within ~consume_bundle_time
        # the common outcome (all consumed, nothing to send back, no hooks) is settled inline and counted here
        calls = consumed = 0
        rt_seconds = 0.0
        for msgs in _calls(request.msgs, self.consumer.settings.consume_message_batch_max_size):
            if pq.dropped:
                break
            context = ConsumeConcurrentlyContext(mq)
            hook_context = self.hooks_before(mq, msgs) if hooked else None
            begin = monotonic()
            result: object = None
            error: BaseException | None = None
            try:
                result = listener(list(msgs), context)
            except Exception as exc:
                error = exc
                logger.warning("%s: concurrent listener raised for %s (%d messages)", self.group, mq, len(msgs),
                               exc_info=True)
            else:
                if (result is success and hook_context is None and type(context.ack_index) is int
                        and context.ack_index >= len(msgs) - 1 and not pq.dropped):
                    rt_seconds += monotonic() - begin
                    calls += 1
                    consumed += len(msgs)
                    tally.consumed += msgs
                    continue
            to_send_back = self._outcome(request, msgs, context, result, error, begin, hook_context, tally)
            if to_send_back is None:
                break
            failed = [msg for msg in to_send_back if not self._send_back_blocking(msg, context, mq)]
            tally.done(msgs, failed)
        tally.calls += calls
        tally.ok += consumed
        tally.rt_total += rt_seconds * 1000
        self._finish(pq, mq, tally)

    async def _consume_async(self, request: ConsumeRequest) -> None:
        pq, mq = request.process_queue, request.message_queue
        tally = _BundleTally()
        success = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        self._prepare(request.msgs, mq)  # the calls of a request follow each other within ~consume_bundle_time
        for msgs in _calls(request.msgs, self.consumer.settings.consume_message_batch_max_size):
            if pq.dropped:
                break
            context = ConsumeConcurrentlyContext(mq)
            hook_context = self.hooks_before(mq, msgs)
            begin = time.monotonic()
            result: object = None
            error: BaseException | None = None
            try:
                result = await self.listener(list(msgs), context)
            except Exception as exc:
                error = exc
                logger.warning("%s: concurrent listener raised for %s (%d messages)", self.group, mq, len(msgs),
                               exc_info=True)
            else:
                if (result is success and hook_context is None and type(context.ack_index) is int
                        and context.ack_index >= len(msgs) - 1 and not pq.dropped):
                    # the common outcome, settled inline: all consumed, nothing to send back
                    tally.succeeded(len(msgs), begin)
                    tally.consumed += msgs
                    continue
            to_send_back = self._outcome(request, msgs, context, result, error, begin, hook_context, tally)
            if to_send_back is None:
                break
            failed = [msg for msg in to_send_back if not await self._send_back(msg, context, mq)]
            tally.done(msgs, failed)
        self._finish(pq, mq, tally)

    def _outcome(self, request: ConsumeRequest, msgs: list[MessageExt], context: ConsumeConcurrentlyContext,
                 result: object,
                 error: BaseException | None, begin: float, hook_context: ConsumeMessageContext | None,
                 tally: _BundleTally) -> list[MessageExt] | None:
        """Settle one listener call: the messages to send back, or None when the queue was dropped meanwhile."""
        status, consume_rt = self._after_listener(request, result, error, begin, hook_context)
        tally.calls += 1
        tally.rt_total += consume_rt
        if request.process_queue.dropped:
            logger.info("%s: %s was dropped while consuming; result ignored", self.group, request.message_queue)
            return None
        return self._acknowledge(status, context, msgs, tally)

    def _after_listener(self, request: ConsumeRequest, result: object, error: BaseException | None, begin: float,
                        hook_context: ConsumeMessageContext | None) -> tuple[ConsumeConcurrentlyStatus, float]:
        """The status to act on and the consume RT in ms (recorded by the caller with the outcome)."""
        status: ConsumeConcurrentlyStatus | None
        status, type_error = self.check_listener_result(result, ConsumeConcurrentlyStatus)
        error = error or type_error
        consume_rt = (time.monotonic() - begin) * 1000
        if status is None:
            return_type = ConsumeReturnType.EXCEPTION if error is not None else ConsumeReturnType.RETURNNULL
        elif consume_rt >= self.consumer.settings.consume_timeout * 1000:
            return_type = ConsumeReturnType.TIME_OUT
        elif status is ConsumeConcurrentlyStatus.RECONSUME_LATER:
            return_type = ConsumeReturnType.FAILED
        else:
            return_type = ConsumeReturnType.SUCCESS
        if status is None:
            if error is None:
                logger.warning("%s: concurrent listener returned None for %s; will retry", self.group,
                               request.message_queue)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        self.hooks_after(hook_context, status.name, status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS, return_type)
        return status, consume_rt

    def _acknowledge(self, status: ConsumeConcurrentlyStatus, context: ConsumeConcurrentlyContext,
                     msgs: list[MessageExt], tally: _BundleTally) -> list[MessageExt]:
        """Count the outcome of the call on ``msgs`` in ``tally``; return the messages to send back (clustering)."""
        size = len(msgs)
        if not size:
            return []
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack_index = context.ack_index
            if isinstance(ack_index, bool) or not isinstance(ack_index, int):
                logger.error("%s: ack_index must be an int, got %r; the whole batch will be retried", self.group,
                             ack_index)
                ack_index = -1
            ack_index = max(-1, min(ack_index, size - 1))
            tally.ok += ack_index + 1
            tally.failed += size - ack_index - 1
        else:
            ack_index = -1
            tally.failed += size
        failed = msgs[ack_index + 1:]
        if not failed:
            return []
        if self.consumer.message_model is MessageModel.BROADCASTING:
            for msg in failed:
                logger.warning("%s: broadcasting consumption of %s failed; dropped", self.group, msg)
            return []
        return failed

    def _delay_level(self, context: ConsumeConcurrentlyContext) -> int:
        level = context.delay_level_when_next_consume
        if isinstance(level, bool) or not isinstance(level, int):
            logger.error("%s: delay_level_when_next_consume must be an int, got %r; the broker picks the delay",
                         self.group, level)
            return 0
        return level

    async def _send_back(self, msg: MessageExt, context: ConsumeConcurrentlyContext, mq: MessageQueue) -> bool:
        try:
            await self.send_back.send_message_back(msg, self._delay_level(context), mq.broker_name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("%s: sending back %s failed: %s; consuming it again locally later", self.group, msg, exc)
            return False
        return True

    def _send_back_blocking(self, msg: MessageExt, context: ConsumeConcurrentlyContext, mq: MessageQueue) -> bool:
        try:
            self.consumer.instance.run(self.send_back.send_message_back(msg, self._delay_level(context),
                                                                        mq.broker_name), SEND_BACK_WAIT)
        except Exception as exc:
            logger.warning("%s: sending back %s failed: %s; consuming it again locally later", self.group, msg, exc)
            return False
        return True

    def _finish(self, pq: ProcessQueue, mq: MessageQueue, tally: _BundleTally) -> None:
        """Record a bundle's stats, forget its consumed messages and commit the offset that allows."""
        self.record_calls(tally, mq.topic)
        if pq.dropped:
            return
        retry_later = tally.retry_later
        if retry_later:
            for msg in retry_later:
                msg.reconsume_times += 1
            self.submit_consume_request_later(retry_later, pq, mq)
        if not tally.consumed:
            return
        offset = pq.remove_messages(tally.consumed)
        if offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, offset, True)

    # ------------------------------------------------------------------ expired messages

    async def _clean_expired_periodically(self) -> None:
        interval = self.consumer.settings.consume_timeout
        while not self._stopped:
            await asyncio.sleep(interval)
            try:
                await self.clean_expired_messages()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("%s: expired-message scan failed", self.group)

    async def clean_expired_messages(self) -> None:
        """Send back messages consumed for longer than ``consume_timeout`` (delay level 3) and forget them."""
        for mq, pq in list(self.queues.process_queue_table.items()):
            for msg in pq.expired_messages(max_count=EXPIRED_SCAN_MAX):
                try:
                    await self.send_back.send_message_back(msg, EXPIRED_DELAY_LEVEL, None)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    logger.error("%s: sending back expired %s of %s failed: %s", self.group, msg, mq, exc)
                    continue
                logger.info("%s: %s of %s was consumed for too long; sent back", self.group, msg, mq)
                pq.remove_if_first(msg)

    # ------------------------------------------------------------------ consume directly

    async def consume_message_directly(self, msg: MessageExt, broker_name: str) -> ConsumeMessageDirectlyResult:
        result = ConsumeMessageDirectlyResult(order=False, auto_commit=True)
        mq = MessageQueue(msg.topic, broker_name, msg.queue_id)
        self._prepare([msg], mq)
        await self._call_directly(msg, ConsumeConcurrentlyContext(mq), result, ConsumeConcurrentlyStatus,
                                  _DIRECT_OUTCOMES)
        return result


__all__ = [
    "EXPIRED_DELAY_LEVEL",
    "EXPIRED_SCAN_MAX",
    "SEND_BACK_FAILED_RETRY_DELAY",
    "ConsumeMessageConcurrentlyService",
    "ConsumeRequest",
    "HeldQueues",
]
