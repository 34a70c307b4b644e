"""What every consume service shares: the consume threads, ``async def`` listener tasks, hooks and stats.

A consume service calls a push consumer's listener on the messages the pull service put in a
process queue. Plain listeners run on `ConsumeThreadPool` (up to ``consume_thread_max`` threads);
``async def`` listeners run as tasks on the client's event loop, at most ``consume_thread_max`` at a
time. A fast listener's calls are bundled (`ConsumeMessageService.bundle_size`): each call keeps its
own batch, context and status, but several share one hand-over to a consume thread. The subclasses
(`concurrent`, `orderly`, `key_ordered`) decide what a call's outcome means for the offsets.
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
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from enum import Enum
from typing import Any, Final, Protocol

from rocketflow.client.consumer.consume.context import (
    CONSUME_CONTEXT_TYPE,
    CMResult,
    ConsumeMessageContext,
    ConsumeMessageDirectlyResult,
    ConsumeReturnType,
    is_async_callable,
)
from rocketflow.client.consumer.consume.hooks import ConsumeHooks
from rocketflow.client.consumer.offset_store import OffsetStore
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.consumer.push_settings import PushConsumerSettings
from rocketflow.client.consumer.stats import ConsumerStats
from rocketflow.client.instance import ClientInstance
from rocketflow.protocol.bodies import MessageModel
from rocketflow.protocol.message import MessageConst, MessageExt, MessageQueue

logger = logging.getLogger(__name__)

#: Most listener calls made in a row (see `ConsumeMessageService.bundle_size`): bounds what a listener
#: that turns slow while its average is still short holds up (other threads idle, a rebalance waiting).
BUNDLE_MAX_CALLS: Final = 32


class ConsumingConsumer(Protocol):
    """What a consume service uses of its consumer (a `PushConsumer`)."""

    @property
    def group(self) -> str: ...

    @property
    def message_model(self) -> MessageModel: ...

    @property
    def settings(self) -> PushConsumerSettings: ...

    @property
    def retry_topic(self) -> str: ...

    @property
    def effective_max_reconsume_times(self) -> int: ...

    @property
    def instance(self) -> ClientInstance: ...

    @property
    def offset_store(self) -> OffsetStore: ...

    @property
    def hooks(self) -> ConsumeHooks: ...

    @property
    def consumer_stats(self) -> ConsumerStats: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...


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



class ConsumeMessageService(ABC):
    """What the push consumer needs from a consume service, and the plumbing both services share."""

    def __init__(self, consumer: ConsumingConsumer, listener: Callable[..., Any], kind: str) -> None:
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
        but that per-call machinery is GIL-bound work that can cost more than a fast listener itself.
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

    async def _call_directly(self, msg: MessageExt, context: Any, result: ConsumeMessageDirectlyResult,
                             expected: type[Enum], outcomes: Mapping[Any, CMResult]) -> None:
        """Call the listener on ``msg`` alone and fill in ``result``: the `CMResult` of its status of type
        ``expected`` (per ``outcomes``), or of its error or None, and the time spent."""
        begin = time.monotonic()
        try:
            answer = await self.call_listener_anywhere([msg], context)
            status, error = self.check_listener_result(answer, expected)
            if error is not None:
                result.consume_result = CMResult.CR_THROW_EXCEPTION
                result.remark = str(error)
            elif status is None:
                result.consume_result = CMResult.CR_RETURN_NULL
            else:
                result.consume_result = outcomes[status]
        except Exception as exc:
            result.consume_result = CMResult.CR_THROW_EXCEPTION
            result.remark = f"{type(exc).__name__}: {exc}"
        result.spent_time_mills = round((time.monotonic() - begin) * 1000)


__all__ = [
    "BUNDLE_MAX_CALLS",
    "CallTally",
    "ConsumeMessageService",
    "ConsumeThreadPool",
    "ConsumingConsumer",
]
