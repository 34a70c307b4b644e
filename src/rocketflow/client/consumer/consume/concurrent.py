"""Concurrent consumption (CONSUMER.md section 6, PROTOCOL.md 4.5).

Pulled messages are cut into batches of ``consume_message_batch_max_size`` and handed to the
listener: plain functions on a thread pool of ``consume_thread_max`` threads, ``async def``
functions on the client's event loop (at most ``consume_thread_max`` calls at a time). After each
call, unless the queue was dropped meanwhile:

* clustering: every message past ``ack_index`` is sent back (CONSUMER_SEND_MSG_BACK; if that RPC
  fails, a copy goes to ``%RETRY%<group>`` through the instance's inner producer); a message that
  cannot be sent back at all is retried locally 5 s later;
* broadcasting: failed messages are logged and dropped;
* `ProcessQueue.remove_messages` gives the smallest unconsumed offset, committed increase-only.

Messages whose consumption started more than ``consume_timeout`` ago are sent back with delay
level 3 by a scan every ``consume_timeout``.

`ConsumeMessageService` is the base both consume services share (pool, async tasks, hooks, stats,
shutdown).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

from rocketflow.client.consumer.consume.context import (
    CONSUME_CONTEXT_TYPE,
    CMResult,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeMessageContext,
    ConsumeMessageDirectlyResult,
    ConsumeReturnType,
    is_async_callable,
)
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.protocol.bodies import MessageModel, now_millis
from rocketflow.protocol.message import MessageConst, MessageExt, MessageQueue

if TYPE_CHECKING:
    from rocketflow.client.consumer.push_consumer import PushConsumer

logger = logging.getLogger("rocketflow.client.consume")

#: Delay before messages that could not be sent back are consumed again locally (seconds).
SEND_BACK_FAILED_RETRY_DELAY: Final = 5.0
#: Expired-message scan: at most this many messages per queue, sent back with this delay level.
EXPIRED_SCAN_MAX: Final = 16
EXPIRED_DELAY_LEVEL: Final = 3
#: How long a consume thread waits for a send-back (the RPC has 5 s, the producer fallback 3 s).
SEND_BACK_WAIT: Final = 15.0
#: Most listener calls made in a row (see `ConsumeMessageService.bundle_size`): bounds what a listener
#: that turns slow while its average is still short holds up (other threads idle, a rebalance waiting).
BUNDLE_MAX_CALLS: Final = 32


class ConsumeThreadPool:
    """The consume threads: a C-level call queue served by up to ``max_workers`` threads.

    Lighter than ``ThreadPoolExecutor`` (no future per call, which matters at one call per message).
    Threads are started one per submission until there are ``max_workers`` (as Java's pool does
    for its core threads); they are daemon threads so a listener that never returns cannot keep the
    interpreter alive after `shutdown` gave up waiting for it.
    """

    def __init__(self, max_workers: int, name_prefix: str) -> None:
        self.max_workers = max_workers
        self.name_prefix = name_prefix
        self._queue: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue ``fn(*args)``; raises `RuntimeError` after `shutdown`."""
        if self._shutdown:
            raise RuntimeError("the consume thread pool is shut down")
        self._queue.put((fn, args))
        if len(self._threads) < self.max_workers:
            self._start_thread()

    def _start_thread(self) -> None:
        with self._lock:
            if self._shutdown or len(self._threads) >= self.max_workers:
                return
            thread = threading.Thread(target=self._work, name=f"{self.name_prefix}_{len(self._threads)}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def _work(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except BaseException:
                logger.exception("%s: consume call failed", self.name_prefix)

    def shutdown(self, wait: bool = True) -> None:
        """Forget queued calls, stop the threads (and join them when ``wait``)."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()


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


class CallTally:
    """Listener calls a consume loop settled, for `ConsumeMessageService.record_calls` to record in one go."""

    __slots__ = ("calls", "failed", "ok", "rt_total")

    def __init__(self) -> None:
        self.calls = 0
        self.ok = 0
        self.failed = 0
        self.rt_total = 0.0

    def succeeded(self, messages: int, started: float) -> None:
        """One call that consumed all of its ``messages``, begun at ``started`` (`time.monotonic`)."""
        self.calls += 1
        self.rt_total += (time.monotonic() - started) * 1000
        self.ok += messages


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


class ConsumeMessageService(ABC):
    """What the push consumer needs from a consume service, and the plumbing both services share."""

    def __init__(self, consumer: PushConsumer, listener: Callable[..., Any], kind: str) -> None:
        self.consumer = consumer
        self.listener = listener
        self.is_async = is_async_callable(listener)
        self.group = consumer.group
        self.kind = kind
        self._stopped = False
        self._executor: ConsumeThreadPool | None = None
        self._active = 0
        # A plain lock (C-level ``with``) for the per-call counter; the condition on it only for waiters.
        self._active_lock = threading.Lock()
        self._idle = threading.Condition(self._active_lock)
        self._idle_waiters = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._background: set[asyncio.Task[Any]] = set()
        # coroutines (async listeners) waiting for one of the `consume_thread_max` task slots
        self._queued: deque[Coroutine[Any, Any, None]] = deque()
        #: the listener's average call time in seconds (None until measured)
        self._call_seconds: float | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def thread_name_prefix(self) -> str:
        return f"rocketflow-client-consume[{self.group}]"

    @property
    def core_pool_size(self) -> int:
        return self.consumer.settings.consume_thread_max

    def start(self) -> None:
        """Create the consume thread pool (plain listeners); called once the client instance runs."""
        if not self.is_async:
            self._executor = ConsumeThreadPool(self.consumer.settings.consume_thread_max, self.thread_name_prefix)

    async def start_on_loop(self) -> None:  # noqa: B027 - an optional hook: the base has no periodic work
        """Start the service's periodic work on the client's loop."""

    def _start_background(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def stop_dispatch(self) -> None:
        """No new listener calls from now on (calls already running finish)."""
        self._stopped = True

    async def stop_on_loop(self) -> None:
        """Cancel the periodic work (on the loop)."""
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        while self._queued:
            self._queued.popleft().close()

    @property
    def active_count(self) -> int:
        """Listener calls (or orderly consume loops) running now, or waiting for a slot."""
        with self._idle:
            return self._active + len(self._tasks) + len(self._queued)

    def wait_idle(self, timeout: float) -> bool:
        """Wait (not on the loop) until no listener call runs; False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._idle:
            self._idle_waiters += 1
            try:
                while self._active:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._idle.wait(remaining)
            finally:
                self._idle_waiters -= 1
        if self.is_async and self._tasks:
            instance = self.consumer.instance
            remaining = max(0.0, deadline - time.monotonic())
            try:
                return bool(instance.run(self._wait_tasks(remaining), remaining + 5.0))
            except Exception as exc:
                logger.warning("%s: waiting for consume tasks failed: %s", self.group, exc)
                return False
        return True

    async def _wait_tasks(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._tasks:  # queued coroutines become tasks as the running ones finish
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.wait(list(self._tasks), timeout=remaining)
        return True

    def close(self, wait: bool = True) -> None:
        """Shut the thread pool down (tasks not started yet are cancelled)."""
        executor = self._executor
        if executor is not None:
            executor.shutdown(wait=wait)

    # ------------------------------------------------------------------ running work

    def _run_in_pool(self, fn: Callable[..., None], *args: Any) -> None:
        executor = self._executor
        if executor is None or self._stopped:
            return
        try:
            executor.submit(self._guarded, fn, *args)
        except RuntimeError:
            logger.debug("%s: consume pool is shut down; request dropped", self.group)

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        lock = self._active_lock
        with lock:
            self._active += 1
        try:
            if not self._stopped:
                fn(*args)
        except Exception:
            logger.exception("%s: consume request failed", self.group)
        finally:
            with lock:
                self._active -= 1
                if not self._active and self._idle_waiters:
                    self._idle.notify_all()

    # Async listeners run as tasks, at most `consume_thread_max` at once (as many as the thread pool
    # would run): the others wait in `_queued` and start as running ones finish. A counter and a
    # queue rather than a semaphore around each task: no wrapper coroutine and no acquire per call.
    def _run_task(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a tracked task on the loop once a slot is free (call on the loop)."""
        if self._stopped:
            coro.close()
            return
        if len(self._tasks) >= self.consumer.settings.consume_thread_max:
            self._queued.append(coro)
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            error = task.exception()
            if error is not None:
                logger.error("%s: consume task failed", self.group, exc_info=error)
        queued = self._queued
        while queued and len(self._tasks) < self.consumer.settings.consume_thread_max:
            self._run_task(queued.popleft())

    def on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the client's loop (now if already there)."""
        instance = self.consumer.instance
        if instance.in_loop_thread():
            fn(*args)
        else:
            instance.loop.call_soon_threadsafe(fn, *args)

    async def call_listener_anywhere(self, msgs: list[MessageExt], context: Any) -> Any:
        """Call the listener from the loop: awaited if async, else on the pool (or the default executor)."""
        if self.is_async:
            return await self.listener(msgs, context)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def call() -> None:
            try:
                result = self.listener(list(msgs), context)
            except Exception as exc:
                loop.call_soon_threadsafe(settle, None, exc)
            else:
                loop.call_soon_threadsafe(settle, result, None)

        executor = self._executor
        if executor is None:
            raise RuntimeError("the consume thread pool is not running")
        executor.submit(call)
        return await future

    # ------------------------------------------------------------------ bundling fast listener calls

    def bundle_size(self, calls: int) -> int:
        """How many listener calls (of up to ``consume_message_batch_max_size`` messages each) to make in a row.

        RocketMQ hands every batch to the pool on its own (concurrent) or takes, locks and commits
        around every call (orderly). Each call here still gets its own batch, context and status,
        but that per-call machinery costs ~10 us of GIL-bound work: far more than a fast listener.
        So up to ``calls`` consecutive calls share one consume request (concurrent) or one hold of
        the consume lock (orderly) while the listener's average call time says they finish within
        ``consume_bundle_time``; a slow listener (or one not measured yet) gets one call at a time,
        keeping every consume thread busy in parallel as RocketMQ does.
        """
        average = self._call_seconds
        if average is None or calls <= 1:
            return 1
        return max(1, min(calls, int(self.consumer.settings.consume_bundle_time / max(average, 1e-7))))

    def record_calls(self, tally: CallTally, topic: str) -> None:
        """Record what ``tally`` counted (stats; the listener's average call time) and start it afresh."""
        if not tally.calls:
            return
        # a moving average of the mean call time; racing updates from threads only lose a sample
        seconds = tally.rt_total / tally.calls / 1000
        average = self._call_seconds
        self._call_seconds = seconds if average is None else average * 0.9 + seconds * 0.1
        self.consumer.consumer_stats.inc_consumed(self.group, topic, tally.rt_total, tally.ok, tally.failed,
                                                  tally.calls)
        tally.calls = tally.ok = tally.failed = 0
        tally.rt_total = 0.0

    # ------------------------------------------------------------------ hooks and results

    def hooks_before(self, mq: MessageQueue, msgs: list[MessageExt]) -> ConsumeMessageContext | None:
        hooks = self.consumer.hooks
        if not hooks:
            return None
        context = ConsumeMessageContext(self.group, mq, msgs)
        hooks.before(context)
        return context

    def hooks_after(self, context: ConsumeMessageContext | None, status_name: str, success: bool,
                    return_type: ConsumeReturnType) -> None:
        if context is None:
            return
        context.props[CONSUME_CONTEXT_TYPE] = return_type.name
        context.status = status_name
        context.success = success
        self.consumer.hooks.after(context)

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        """Messages pulled from ``%RETRY%<group>`` get their original topic back (RETRY_TOPIC)."""
        retry_topic = self.consumer.retry_topic
        for msg in msgs:
            if msg.topic == retry_topic:
                original = msg.properties.get(MessageConst.RETRY_TOPIC)
                if original:
                    msg.topic = original

    def check_listener_result(self, result: object, expected: type[Any]) -> tuple[Any, BaseException | None]:
        """(status or None, error): a result that is neither a status nor None counts as an error."""
        if result is None or isinstance(result, expected):
            return result, None
        if inspect.iscoroutine(result):
            result.close()
            message = (f"the {self.kind} listener returned a coroutine: register an 'async def' function "
                       "(it is awaited on the client's loop) or return a status")
        else:
            message = f"the {self.kind} listener returned {result!r}; expected a {expected.__name__} or None"
        logger.error("%s: %s", self.group, message)
        return None, TypeError(message)

    # ------------------------------------------------------------------ the service's own part

    @abstractmethod
    def submit_consume_request(self, msgs: list[MessageExt], process_queue: ProcessQueue,
                               message_queue: MessageQueue, dispatch_to_consume: bool) -> None:
        """Hand freshly pulled messages (already in ``process_queue``) to the listener (call on the loop)."""

    @abstractmethod
    async def consume_message_directly(self, msg: MessageExt, broker_name: str) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY: run the listener on ``msg`` alone and report how it went."""


class ConsumeMessageConcurrentlyService(ConsumeMessageService):
    """Concurrent consumption of a push consumer (RocketMQ's ``ConsumeMessageConcurrentlyService``)."""

    def __init__(self, consumer: PushConsumer, listener: Callable[..., Any]) -> None:
        super().__init__(consumer, listener, "concurrent")

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
            await self.consumer.send_message_back(msg, self._delay_level(context), mq.broker_name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("%s: sending back %s failed: %s; consuming it again locally later", self.group, msg, exc)
            return False
        return True

    def _send_back_blocking(self, msg: MessageExt, context: ConsumeConcurrentlyContext, mq: MessageQueue) -> bool:
        try:
            self.consumer.instance.run(self.consumer.send_message_back(msg, self._delay_level(context),
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
        for mq, pq in list(self.consumer.rebalance.process_queue_table.items()):
            for msg in pq.expired_messages(max_count=EXPIRED_SCAN_MAX):
                try:
                    await self.consumer.send_message_back(msg, EXPIRED_DELAY_LEVEL, None)
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
        context = ConsumeConcurrentlyContext(mq)
        self._prepare([msg], mq)
        begin = time.monotonic()
        try:
            answer = await self.call_listener_anywhere([msg], context)
            status, error = self.check_listener_result(answer, ConsumeConcurrentlyStatus)
            if error is not None:
                result.consume_result = CMResult.CR_THROW_EXCEPTION
                result.remark = str(error)
            elif status is None:
                result.consume_result = CMResult.CR_RETURN_NULL
            elif status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
                result.consume_result = CMResult.CR_SUCCESS
            else:
                result.consume_result = CMResult.CR_LATER
        except Exception as exc:
            result.consume_result = CMResult.CR_THROW_EXCEPTION
            result.remark = f"{type(exc).__name__}: {exc}"
        result.spent_time_mills = round((time.monotonic() - begin) * 1000)
        return result


__all__ = [
    "BUNDLE_MAX_CALLS",
    "EXPIRED_DELAY_LEVEL",
    "EXPIRED_SCAN_MAX",
    "SEND_BACK_FAILED_RETRY_DELAY",
    "CallTally",
    "ConsumeMessageConcurrentlyService",
    "ConsumeMessageService",
    "ConsumeRequest",
    "ConsumeThreadPool",
]
