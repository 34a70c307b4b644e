"""Orderly consumption (RocketMQ's ``ConsumeMessageOrderlyService``).

Three locks keep one queue's messages in order and on one consumer:

1. the **broker lock** of (group, queue), won by the rebalance before a queue is taken, renewed by
   `RebalanceImpl.lock_all` 1 s after start and then every 20 s (clustering only);
2. a **per-queue local lock** (`MessageQueueLock`) so that two consume requests of one queue never
   run at once, whichever threads or tasks run them;
3. the process queue's **consume lock**, held around each listener call, so that a rebalance
   cannot release the broker lock in the middle of a batch.

A consume request keeps taking batches from the process queue until it is empty, the queue is
dropped, the lock is lost or expired (try-lock later, 10 ms) or it ran for
``max_time_consume_continuously`` (submit later, 10 ms). A request for a queue that is not locked
tries to lock it after 100 ms. Failed batches (SUSPEND_CURRENT_QUEUE_A_MOMENT, an exception or no
answer) are put back and retried in place after ``suspend_current_queue_time_millis``, in order;
after ``max_reconsume_times`` a message is sent to the dead-letter queue (through the retry topic)
and the queue moves on.

Plain listeners run on the consume thread pool; ``async def`` listeners run on the client's loop
(the local and consume locks are then held by the consume task, so they exclude the rebalance
even though it runs on the same thread).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Literal, Protocol

from rocketflow.client.consumer.consume.base import (
    BUNDLE_MAX_CALLS,
    CallTally,
    ConsumeMessageService,
    ConsumingConsumer,
)
from rocketflow.client.consumer.consume.context import (
    CMResult,
    ConsumeMessageContext,
    ConsumeMessageDirectlyResult,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    ConsumeReturnType,
)
from rocketflow.client.consumer.consume.retry import MessageSendBack
from rocketflow.client.consumer.consume_lock import ConsumeLock
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.protocol.bodies import MessageModel
from rocketflow.protocol.message import MessageExt, MessageQueue

logger = logging.getLogger(__name__)

#: Delays of the consume loop (ms): re-lock from inside the loop / at entry; resubmit after a lock was
#: won / lost; resubmit after the continuous-consume cap.
TRY_LOCK_LATER_IN_LOOP_MILLS: Final = 10
TRY_LOCK_LATER_AT_ENTRY_MILLS: Final = 100
RESUBMIT_AFTER_LOCK_MILLS: Final = 10
RESUBMIT_AFTER_LOCK_FAILED_MILLS: Final = 3000
RESUBMIT_AFTER_CONTINUOUS_MILLS: Final = 10
#: The clamp of a submit-later delay (ms).
SUSPEND_MIN_MILLS: Final = 10
SUSPEND_MAX_MILLS: Final = 30_000
#: How long a consume thread waits for a dead-letter send (seconds).
DLQ_SEND_WAIT: Final = 15.0
#: Listener calls settled inline whose stats a consume loop keeps before recording them.
STATS_FLUSH_CALLS: Final = 256


#: The CONSUME_MESSAGE_DIRECTLY outcome of each status.
_DIRECT_OUTCOMES: Final = {
    ConsumeOrderlyStatus.SUCCESS: CMResult.CR_SUCCESS,
    ConsumeOrderlyStatus.COMMIT: CMResult.CR_COMMIT,
    ConsumeOrderlyStatus.ROLLBACK: CMResult.CR_ROLLBACK,
    ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT: CMResult.CR_LATER,
}


class QueueLocks(Protocol):
    """The broker queue locks the orderly service takes and renews (its consumer's rebalance)."""

    async def lock(self, mq: MessageQueue) -> bool: ...

    async def lock_all(self) -> None: ...


class MessageQueueLock:
    """One `ConsumeLock` per message queue, created on first use (RocketMQ's ``MessageQueueLock``)."""

    def __init__(self) -> None:
        self._locks: dict[MessageQueue, ConsumeLock] = {}
        self._guard = threading.Lock()

    def fetch_lock_object(self, mq: MessageQueue) -> ConsumeLock:
        lock = self._locks.get(mq)
        if lock is None:
            with self._guard:
                lock = self._locks.setdefault(mq, ConsumeLock())
        return lock


class ConsumeMessageOrderlyService(ConsumeMessageService):
    """Orderly consumption of a push consumer (RocketMQ's ``ConsumeMessageOrderlyService``)."""

    def __init__(self, consumer: ConsumingConsumer, listener: Callable[..., Any], locks: QueueLocks,
                 send_back: MessageSendBack) -> None:
        super().__init__(consumer, listener, "orderly")
        self.locks = locks
        self.send_back = send_back
        self.message_queue_lock = MessageQueueLock()
        self._clustering = consumer.message_model is MessageModel.CLUSTERING

    async def start_on_loop(self) -> None:
        await super().start_on_loop()
        if self._clustering:
            self._start_background(self._lock_periodically())

    async def _lock_periodically(self) -> None:
        settings = self.consumer.settings
        await asyncio.sleep(settings.lock_first_delay)
        while not self._stopped:
            try:
                await self.locks.lock_all()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("%s: periodic lock of the queues failed", self.group)
            await asyncio.sleep(settings.lock_interval)

    @property
    def max_reconsume_times(self) -> int:
        return self.consumer.effective_max_reconsume_times

    # ------------------------------------------------------------------ submission

    def submit_consume_request(self, msgs: list[MessageExt], process_queue: ProcessQueue,
                               message_queue: MessageQueue, dispatch_to_consume: bool) -> None:
        if dispatch_to_consume:
            self._submit(process_queue, message_queue)

    def _submit(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        if self.is_async:
            self.on_loop(self._start_async_request, pq, mq)
        else:
            self._run_in_pool(self._consume_sync, pq, mq)

    def _start_async_request(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        self._run_task(self._consume_async(pq, mq))

    def submit_consume_request_later(self, pq: ProcessQueue, mq: MessageQueue, suspend_millis: int) -> None:
        """Resubmit after ``suspend_millis`` (-1 = the consumer's setting), clamped to [10, 30000] ms."""
        self.consumer.call_later(self._suspend_seconds(suspend_millis), lambda: self._submit(pq, mq))

    def _suspend_seconds(self, millis: object) -> float:
        """A suspend time in ms (-1, or not an int: the consumer's setting) clamped to [10, 30000] ms, in seconds."""
        if isinstance(millis, bool) or not isinstance(millis, int):
            logger.error("%s: suspend_current_queue_time_millis must be an int, got %r; using the consumer's setting",
                         self.group, millis)
            millis = -1
        if millis == -1:
            millis = self.consumer.settings.suspend_current_queue_time_millis
        assert isinstance(millis, int)
        return min(max(millis, SUSPEND_MIN_MILLS), SUSPEND_MAX_MILLS) / 1000

    def try_lock_later_and_reconsume(self, mq: MessageQueue, pq: ProcessQueue, delay_millis: int) -> None:
        """After ``delay_millis``, lock ``mq`` at the broker; resubmit 10 ms later if won, 3 s if not."""
        self.consumer.call_later(delay_millis / 1000,
                                 lambda: self.consumer.spawn(self._lock_and_resubmit(mq, pq)))

    async def _lock_and_resubmit(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        locked = await self.lock_one_mq(mq)
        self.submit_consume_request_later(pq, mq, RESUBMIT_AFTER_LOCK_MILLS if locked
                                          else RESUBMIT_AFTER_LOCK_FAILED_MILLS)

    async def lock_one_mq(self, mq: MessageQueue) -> bool:
        if self._stopped:
            return False
        return await self.locks.lock(mq)

    # ------------------------------------------------------------------ the consume loop

    def _may_consume(self, pq: ProcessQueue) -> bool:
        return not self._clustering or (pq.locked and not pq.is_lock_expired())

    def _keep_going(self, pq: ProcessQueue, mq: MessageQueue, begin: float) -> bool:
        """The checks at the top of each loop round; schedules what must happen when it stops."""
        if pq.dropped:
            logger.info("%s: %s was dropped; stop consuming it", self.group, mq)
            return False
        if self._stopped:
            return False
        if self._clustering and not pq.locked:
            logger.warning("%s: %s is not locked; consuming it later", self.group, mq)
            self.try_lock_later_and_reconsume(mq, pq, TRY_LOCK_LATER_IN_LOOP_MILLS)
            return False
        if self._clustering and pq.is_lock_expired():
            logger.warning("%s: the lock of %s expired; consuming it later", self.group, mq)
            self.try_lock_later_and_reconsume(mq, pq, TRY_LOCK_LATER_IN_LOOP_MILLS)
            return False
        if time.monotonic() - begin > self.consumer.settings.max_time_consume_continuously:
            self.submit_consume_request_later(pq, mq, RESUBMIT_AFTER_CONTINUOUS_MILLS)
            return False
        return True

    def _settled_inline(self, pq: ProcessQueue, mq: MessageQueue, msgs: list[MessageExt],
                        context: ConsumeOrderlyContext, result: object, error: BaseException | None,
                        hook_context: ConsumeMessageContext | None, started: float, tally: CallTally) -> bool:
        """Settle the common outcome (SUCCESS, no error or hook, auto-commit) at once: commit and go on.
        False leaves the batch to the full result handling."""
        if (result is not ConsumeOrderlyStatus.SUCCESS or error is not None or hook_context is not None
                or context.auto_commit is not True or pq.dropped):
            return False
        tally.succeeded(len(msgs), started)
        commit_offset = pq.commit()
        if commit_offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, commit_offset, False)
        if tally.calls >= STATS_FLUSH_CALLS:
            self.record_calls(tally, mq.topic)
        return True

    def _consume_sync(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            return
        with self.message_queue_lock.fetch_lock_object(mq):
            if not self._may_consume(pq):
                if not pq.dropped:
                    self.try_lock_later_and_reconsume(mq, pq, TRY_LOCK_LATER_AT_ENTRY_MILLS)
                return
            begin = time.monotonic()
            batch_size = self.consumer.settings.consume_message_batch_max_size
            tally = CallTally()
            from_retry_topic = mq.topic == self.consumer.retry_topic
            hooks = self.consumer.hooks
            while self._keep_going(pq, mq, begin):
                calls = self.bundle_size(BUNDLE_MAX_CALLS) if not hooks else 1
                hook_context: ConsumeMessageContext | None = None
                if calls > 1:
                    leftover = self._consume_bundle_sync(pq, mq, batch_size, calls, tally, from_retry_topic)
                    if leftover is None:
                        if tally.calls >= STATS_FLUSH_CALLS:
                            self.record_calls(tally, mq.topic)
                        continue
                    if leftover is False:
                        break
                    msgs, context, result, error, started = leftover
                else:
                    msgs = pq.take_messages(batch_size)
                    if not msgs:
                        break
                    if from_retry_topic:
                        self.reset_retry_topic(msgs)
                    context = ConsumeOrderlyContext(mq)
                    hook_context = self.hooks_before(mq, msgs)
                    started = time.monotonic()
                    result = None
                    error = None
                    consume_lock = pq.consume_lock
                    consume_lock.acquire()
                    try:
                        if pq.dropped:
                            logger.info("%s: %s was dropped; stop consuming it", self.group, mq)
                            break
                        result = self.listener(list(msgs), context)
                    except Exception as exc:
                        error = exc
                        logger.warning("%s: orderly listener raised for %s (%d messages)", self.group, mq, len(msgs),
                                       exc_info=True)
                    finally:
                        consume_lock.release()
                    if self._settled_inline(pq, mq, msgs, context, result, error, hook_context, started, tally):
                        continue
                status = self._after_listener(mq, msgs, result, error, started, hook_context)
                dead_letter_sent: dict[int, bool] = {}
                if status is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT:
                    for msg in self._over_max(msgs):
                        dead_letter_sent[id(msg)] = self._send_to_dead_letter_blocking(msg)
                if not self.process_consume_result(msgs, status, context, pq, mq, dead_letter_sent):
                    break
            self.record_calls(tally, mq.topic)

    def _consume_bundle_sync(self, pq: ProcessQueue, mq: MessageQueue, batch_size: int, calls: int,
                             tally: CallTally, from_retry_topic: bool,
                             ) -> tuple[list[MessageExt], ConsumeOrderlyContext, object, BaseException | None,
                                        float] | Literal[False] | None:
        """Up to ``calls`` listener calls in a row under one hold of the consume lock (a fast listener).

        Each call gets its own batch and context, exactly as one round of the loop would. Successful
        auto-commit calls are committed together before the lock is released, so a rebalance sees the
        same offsets as after calls one by one. Returns None when every call succeeded, False when the
        loop must stop (nothing to take, queue dropped), or the first call that needs the full
        treatment, as (msgs, context, result, error, start time): what came before it is committed,
        what follows it is handed back to the process queue untouched, to be taken again.
        """
        taken = pq.take_messages(batch_size * calls)
        if not taken:
            return False
        if from_retry_topic:
            self.reset_retry_topic(taken)
        success = ConsumeOrderlyStatus.SUCCESS
        listener = self.listener
        update_offset = self.consumer.offset_store.update_offset
        settled = 0
        consume_lock = pq.consume_lock
        consume_lock.acquire()
        try:
            for start in range(0, len(taken), batch_size):
                if pq.dropped:
                    logger.info("%s: %s was dropped; stop consuming it", self.group, mq)
                    return False
                msgs = taken[start:start + batch_size]
                context = ConsumeOrderlyContext(mq)
                started = time.monotonic()
                result: object = None
                error: BaseException | None = None
                try:
                    result = listener(list(msgs), context)
                except Exception as exc:
                    error = exc
                    logger.warning("%s: orderly listener raised for %s (%d messages)", self.group, mq, len(msgs),
                                   exc_info=True)
                if result is success and error is None and context.auto_commit is True:
                    tally.succeeded(len(msgs), started)
                    settled = start + len(msgs)
                    continue
                rest = taken[start + len(msgs):]
                if rest:
                    pq.make_message_to_consume_again(rest)
                if settled:
                    commit_offset = pq.commit_below(msgs[0].queue_offset)
                    if commit_offset >= 0 and not pq.dropped:
                        update_offset(mq, commit_offset, False)
                return msgs, context, result, error, started
            commit_offset = pq.commit()
            if commit_offset >= 0 and not pq.dropped:
                update_offset(mq, commit_offset, False)
            return None
        finally:
            consume_lock.release()

    async def _consume_async(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            return
        mq_lock = self.message_queue_lock.fetch_lock_object(mq)
        await mq_lock.acquire_async()
        try:
            if not self._may_consume(pq):
                if not pq.dropped:
                    self.try_lock_later_and_reconsume(mq, pq, TRY_LOCK_LATER_AT_ENTRY_MILLS)
                return
            begin = time.monotonic()
            batch_size = self.consumer.settings.consume_message_batch_max_size
            tally = CallTally()
            from_retry_topic = mq.topic == self.consumer.retry_topic
            while self._keep_going(pq, mq, begin):
                msgs = pq.take_messages(batch_size)
                if not msgs:
                    break
                if from_retry_topic:
                    self.reset_retry_topic(msgs)
                context = ConsumeOrderlyContext(mq)
                hook_context = self.hooks_before(mq, msgs)
                started = time.monotonic()
                result: object = None
                error: BaseException | None = None
                consume_lock = pq.consume_lock
                await consume_lock.acquire_async()
                try:
                    if pq.dropped:
                        logger.info("%s: %s was dropped; stop consuming it", self.group, mq)
                        break
                    result = await self.listener(list(msgs), context)
                except Exception as exc:
                    error = exc
                    logger.warning("%s: orderly listener raised for %s (%d messages)", self.group, mq, len(msgs),
                                   exc_info=True)
                finally:
                    consume_lock.release()
                if self._settled_inline(pq, mq, msgs, context, result, error, hook_context, started, tally):
                    continue
                status = self._after_listener(mq, msgs, result, error, started, hook_context)
                dead_letter_sent: dict[int, bool] = {}
                if status is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT:
                    for msg in self._over_max(msgs):
                        dead_letter_sent[id(msg)] = await self.send_back.send_to_dead_letter(msg)
                if not self.process_consume_result(msgs, status, context, pq, mq, dead_letter_sent):
                    break
            self.record_calls(tally, mq.topic)
        finally:
            mq_lock.release()

    def _after_listener(self, mq: MessageQueue, msgs: list[MessageExt], result: object, error: BaseException | None,
                        started: float, hook_context: ConsumeMessageContext | None) -> ConsumeOrderlyStatus:
        status: ConsumeOrderlyStatus | None
        status, type_error = self.check_listener_result(result, ConsumeOrderlyStatus)
        error = error or type_error
        if status is None or status in (ConsumeOrderlyStatus.ROLLBACK,
                                        ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT):
            logger.warning("%s: orderly consumption of %s not OK (%s); offsets %s", self.group, mq,
                           status.name if status is not None else "no status",
                           [msg.queue_offset for msg in msgs])
        consume_rt = (time.monotonic() - started) * 1000
        return_type = ConsumeReturnType.SUCCESS
        if status is None:
            return_type = ConsumeReturnType.EXCEPTION if error is not None else ConsumeReturnType.RETURNNULL
        elif consume_rt >= self.consumer.settings.consume_timeout * 1000:
            return_type = ConsumeReturnType.TIME_OUT
        elif status is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT:
            return_type = ConsumeReturnType.FAILED
        if status is None:
            status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        self.hooks_after(hook_context, status.name,
                         status in (ConsumeOrderlyStatus.SUCCESS, ConsumeOrderlyStatus.COMMIT), return_type)
        self.consumer.consumer_stats.inc_consume_rt(self.group, mq.topic, consume_rt)
        return status

    # ------------------------------------------------------------------ results

    def process_consume_result(self, msgs: list[MessageExt], status: ConsumeOrderlyStatus,
                               context: ConsumeOrderlyContext, pq: ProcessQueue, mq: MessageQueue,
                               dead_letter_sent: dict[int, bool]) -> bool:
        """Apply a listener's status (see docs/design/consumer.md, "Orderly consumption"); returns whether
        the loop continues.

        ``dead_letter_sent`` tells, per ``id(msg)``, whether a message over the reconsume limit went
        to the dead-letter path (sent by the caller, which may block or await).
        """
        continue_consume = True
        commit_offset = -1
        stats = self.consumer.consumer_stats
        topic = mq.topic
        auto_commit = context.auto_commit
        if not isinstance(auto_commit, bool):
            logger.error("%s: auto_commit must be a bool, got %r; treating it as True", self.group, auto_commit)
            auto_commit = True
        suspend = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if auto_commit:
            if status in (ConsumeOrderlyStatus.COMMIT, ConsumeOrderlyStatus.ROLLBACK):
                logger.warning("%s: %s with auto_commit is treated as SUCCESS (%s)", self.group, status.name, mq)
            if status is suspend:
                stats.inc_consume_failed_tps(self.group, topic, len(msgs))
                if self.check_reconsume_times(msgs, dead_letter_sent):
                    pq.make_message_to_consume_again(msgs)
                    self.submit_consume_request_later(pq, mq, context.suspend_current_queue_time_millis)
                    continue_consume = False
                else:
                    commit_offset = pq.commit()
            else:
                commit_offset = pq.commit()
                stats.inc_consume_ok_tps(self.group, topic, len(msgs))
        else:
            if status is ConsumeOrderlyStatus.SUCCESS:
                stats.inc_consume_ok_tps(self.group, topic, len(msgs))
            elif status is ConsumeOrderlyStatus.COMMIT:
                commit_offset = pq.commit()
            elif status is ConsumeOrderlyStatus.ROLLBACK:
                pq.rollback()
                self.submit_consume_request_later(pq, mq, context.suspend_current_queue_time_millis)
                continue_consume = False
            else:
                stats.inc_consume_failed_tps(self.group, topic, len(msgs))
                if self.check_reconsume_times(msgs, dead_letter_sent):
                    pq.make_message_to_consume_again(msgs)
                    self.submit_consume_request_later(pq, mq, context.suspend_current_queue_time_millis)
                    continue_consume = False
        if commit_offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, commit_offset, False)
        return continue_consume

    def _over_max(self, msgs: list[MessageExt]) -> list[MessageExt]:
        limit = self.max_reconsume_times
        return [msg for msg in msgs if msg.reconsume_times >= limit]

    def check_reconsume_times(self, msgs: list[MessageExt], dead_letter_sent: dict[int, bool]) -> bool:
        """Whether the batch must be suspended: a message below the limit, or over it but not sent to the
        dead-letter path; each such message counts one more reconsume."""
        suspend = False
        limit = self.max_reconsume_times
        for msg in msgs:
            if msg.reconsume_times >= limit and dead_letter_sent.get(id(msg), False):
                continue
            suspend = True
            msg.reconsume_times += 1
        return suspend

    def _send_to_dead_letter_blocking(self, msg: MessageExt) -> bool:
        try:
            return bool(self.consumer.instance.run(self.send_back.send_to_dead_letter(msg), DLQ_SEND_WAIT))
        except Exception as exc:
            logger.error("%s: sending %s to the dead-letter queue failed: %s", self.group, msg, exc)
            return False

    # ------------------------------------------------------------------ consume directly

    async def consume_message_directly(self, msg: MessageExt, broker_name: str) -> ConsumeMessageDirectlyResult:
        result = ConsumeMessageDirectlyResult(order=True)
        mq = MessageQueue(msg.topic, broker_name, msg.queue_id)
        context = ConsumeOrderlyContext(mq)
        self.reset_retry_topic([msg])
        await self._call_directly(msg, context, result, ConsumeOrderlyStatus, _DIRECT_OUTCOMES)
        result.auto_commit = bool(context.auto_commit)
        return result


__all__ = [
    "RESUBMIT_AFTER_CONTINUOUS_MILLS",
    "RESUBMIT_AFTER_LOCK_FAILED_MILLS",
    "RESUBMIT_AFTER_LOCK_MILLS",
    "SUSPEND_MAX_MILLS",
    "SUSPEND_MIN_MILLS",
    "TRY_LOCK_LATER_AT_ENTRY_MILLS",
    "TRY_LOCK_LATER_IN_LOOP_MILLS",
    "ConsumeMessageOrderlyService",
    "MessageQueueLock",
    "QueueLocks",
]
