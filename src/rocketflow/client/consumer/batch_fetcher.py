"""The pull consumer's fetcher: a background pull task per held queue, and the batches they pulled.

Each queue a `PullConsumer` holds has a `QueueState` (its process queue, pull cursor and positions)
and a pull task on the client instance's event loop. A task pulls while its queue passes flow
control: not while it caches more than ``pull_threshold_for_queue`` messages or
``pull_threshold_size_for_queue`` MiB or spans more than ``consume_max_span`` offsets, nor while all
queues together cache more than ``pull_threshold_for_all`` messages, nor while it is paused. Each
pull result becomes one `Batch` in the cache; `BatchFetcher.take_batch_locked` hands out the oldest
batch of a queue not paused (`PullConsumer.poll`). Seeking or giving up a queue bumps its
generation: a pull in flight or a batch of an older generation is dropped.

The lock (``lock`` / ``cond``) guards the queue states, the cache and the paused set: pull tasks
write them on the loop, polling threads read them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Final, Protocol

from rocketflow.client.api import PullResult, PullStatus
from rocketflow.client.config import ClientConfig
from rocketflow.client.consumer.fetcher import PullAPIWrapper
from rocketflow.client.consumer.offset_store import OffsetStore
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.consumer.pull_settings import PullConsumerSettings
from rocketflow.protocol.bodies import SubscriptionData
from rocketflow.protocol.codec import UndecodableRecord
from rocketflow.protocol.message import MessageExt, MessageQueue
from rocketflow.protocol.sysflag import build_pull_sys_flag

logger = logging.getLogger(__name__)

#: Re-check delay of a paused queue (``PULL_TIME_DELAY_MILLS_WHEN_PAUSE``), seconds; `resume` wakes it at once.
PULL_DELAY_WHEN_PAUSE: Final = 1.0
#: Re-check delay under flow control (``PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL``), seconds.
PULL_DELAY_WHEN_FLOW_CONTROL: Final = 0.05
_FLOW_CONTROL_LOG_EVERY: Final = 1000
_MIB: Final = 1024 * 1024
#: Pull ``sysFlag``: no commit offset, long polling, subscription in the request, lite pull.
_PULL_SYS_FLAG: Final = build_pull_sys_flag(False, True, True, False, True)


class FetchingConsumer(Protocol):
    """What the fetcher uses of its consumer (a `PullConsumer`)."""

    @property
    def group(self) -> str: ...

    @property
    def settings(self) -> PullConsumerSettings: ...

    @property
    def client_config(self) -> ClientConfig: ...

    @property
    def offset_store(self) -> OffsetStore: ...

    def subscription_for(self, topic: str) -> SubscriptionData | None: ...


class StartOffsets(Protocol):
    """Where a queue whose start is unknown begins (the rebalance's `compute_pull_from_where`)."""

    async def compute_pull_from_where(self, mq: MessageQueue) -> int: ...


@dataclass(eq=False, slots=True)
class QueueState:
    """One held queue: its cache, pull cursor and positions."""

    mq: MessageQueue
    process_queue: ProcessQueue
    #: Where the next pull starts (-1: ask the offset store / ``consume_from`` first).
    next_pull_offset: int
    #: The offset after the last polled batch (-1: unknown yet).
    polled_offset: int = -1
    #: `polled_offset` as of the latest poll call (what the application is done with).
    acked_offset: int = -1
    #: Bumped by seek and removal: a pull started before is stale.
    generation: int = 0
    removed: bool = False
    task: asyncio.Task[None] | None = None
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


@dataclass(eq=False, slots=True)
class Batch:
    state: QueueState
    generation: int
    messages: list[MessageExt]
    #: records of the same pull that could not be decoded (held apart in the process queue)
    undecodable: list[UndecodableRecord] = dataclasses.field(default_factory=list)




class BatchFetcher:
    """The held queues of a pull consumer, their pull tasks and the cache of pulled batches."""

    def __init__(self, consumer: FetchingConsumer, start_offsets: StartOffsets) -> None:
        self.consumer = consumer
        self.start_offsets = start_offsets
        #: The pull API (set when the consumer starts).
        self.wrapper: PullAPIWrapper | None = None
        # guards the queue states, the batch cache and the paused set (pull tasks vs. polling threads)
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.queues: dict[MessageQueue, QueueState] = {}
        self.batches: deque[Batch] = deque()
        self.cached_count = 0
        self.paused: set[MessageQueue] = set()
        #: `poll_async` callers waiting for a batch: their loops and futures
        self.async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._flow_control_times = 0

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        """Hold ``mq`` and start its pull task (on the client's loop; -1: ask where it starts)."""
        with self.lock:
            if self.closing:
                pq.dropped = True
                return
            old = self.queues.get(mq)
            if old is not None:
                self.forget_locked(old)
            state = QueueState(mq, pq, next_offset)
            if next_offset >= 0:
                state.polled_offset = state.acked_offset = next_offset
            self.queues[mq] = state
        self.start_pull_task(state)

    def start_pull_task(self, state: QueueState) -> None:
        if self.closing:
            return
        task = asyncio.get_running_loop().create_task(self._pull_loop(state, state.generation),
                                                      name=f"pull {state.mq}")
        state.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget_locked(self, state: QueueState) -> None:
        state.removed = True
        state.generation += 1
        state.process_queue.dropped = True
        if self.queues.get(state.mq) is state:
            del self.queues[state.mq]
        self.drop_batches_locked(state)
        if state.task is not None and state.task is not _current_task():
            state.task.cancel()

    def drop_batches_locked(self, state: QueueState) -> None:
        if any(batch.state is state for batch in self.batches):
            self.batches = deque(batch for batch in self.batches if batch.state is not state)
            self.cached_count = sum(len(batch.messages) for batch in self.batches)
        state.process_queue.clear()

    async def release_queue(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Give up ``mq`` (on the loop): with ``auto_commit`` commit what the application is done with,
        persist the queue's offset, stop its pull task, forget its cached batches and offset."""
        store = self.consumer.offset_store
        with self.lock:
            state = self.queues.get(mq)
            if state is not None and state.process_queue is pq:
                if self.consumer.settings.auto_commit and state.acked_offset >= 0:
                    store.update_offset(mq, state.acked_offset, False)
                self.forget_locked(state)
        pq.dropped = True
        await store.persist(mq)
        store.remove_offset(mq)

    async def _idle(self, state: QueueState, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await state.wake.wait()
        state.wake.clear()

    def _flow_controlled(self, state: QueueState) -> bool:
        settings = self.consumer.settings
        pq = state.process_queue
        reason = None
        if self.cached_count > settings.pull_threshold_for_all:
            reason = f"all queues cache {self.cached_count} messages (threshold {settings.pull_threshold_for_all})"
        elif pq.msg_count > settings.pull_threshold_for_queue:
            reason = f"it caches {pq.msg_count} messages (threshold {settings.pull_threshold_for_queue})"
        elif pq.msg_size // _MIB > settings.pull_threshold_size_for_queue:
            reason = f"it caches {pq.msg_size // _MIB} MiB (threshold {settings.pull_threshold_size_for_queue} MiB)"
        elif pq.max_span > settings.consume_max_span:
            reason = f"its cached offsets span {pq.max_span} (threshold {settings.consume_max_span})"
        if reason is None:
            return False
        if self._flow_control_times % _FLOW_CONTROL_LOG_EVERY == 0:
            logger.warning("%s: not pulling %s: %s; poll faster (flow control %d times)", self.consumer.group, state.mq,
                           reason, self._flow_control_times)
        self._flow_control_times += 1
        return True

    async def _pull_loop(self, state: QueueState, generation: int) -> None:
        mq, pq = state.mq, state.process_queue
        settings = self.consumer.settings
        wrapper = self.wrapper
        assert wrapper is not None
        exception_delay = self.consumer.client_config.pull_time_delay_mills_when_exception / 1000
        while not self.closing and not state.removed and not pq.dropped and state.generation == generation:
            if mq in self.paused:
                await self._idle(state, PULL_DELAY_WHEN_PAUSE)
                continue
            with self.lock:
                controlled = self._flow_controlled(state)
            if controlled:
                await self._idle(state, PULL_DELAY_WHEN_FLOW_CONTROL)
                continue
            offset = state.next_pull_offset
            if offset < 0:
                try:
                    offset = await self.start_offsets.compute_pull_from_where(mq)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    logger.warning("%s: cannot compute where %s starts: %s", self.consumer.group, mq, exc)
                    offset = -1
                if offset < 0:
                    await self._idle(state, exception_delay)
                    continue
                with self.lock:
                    if state.generation != generation:
                        continue
                    state.next_pull_offset = offset
                    if state.polled_offset < 0:
                        state.polled_offset = state.acked_offset = offset
            subscription = self.consumer.subscription_for(mq.topic)
            pq.last_pull_timestamp = pq.now_ms()
            if subscription is None:
                await self._idle(state, exception_delay)
                continue
            try:
                result = await wrapper.pull_kernel_impl(
                    mq, subscription.sub_string, subscription.expression_type, subscription.sub_version, offset,
                    settings.pull_batch_size, _PULL_SYS_FLAG, 0, round(settings.broker_suspend_max_time * 1000),
                    round(settings.consumer_timeout_when_suspend * 1000))
                messages = wrapper.process_pull_result(mq, result, subscription)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("%s: pull of %s from offset %d failed: %s", self.consumer.group, mq, offset, exc)
                await self._idle(state, exception_delay)
                continue
            self._on_pull_result(state, generation, result, messages)
        if pq.dropped and not state.removed:
            # dropped by the rebalance without a removal (its topic is no longer subscribed)
            with self.lock:
                self.forget_locked(state)

    def _on_pull_result(self, state: QueueState, generation: int, result: PullResult,
                        messages: list[MessageExt]) -> None:
        pq = state.process_queue
        with self.cond:
            if state.generation != generation or state.removed or pq.dropped or self.closing:
                return
            if result.status is PullStatus.OFFSET_ILLEGAL:
                logger.warning("%s: offset %d of %s is illegal (broker: min %d, max %d); continuing at %d",
                               self.consumer.group, state.next_pull_offset, state.mq, result.min_offset,
                               result.max_offset, result.next_begin_offset)
            state.next_pull_offset = result.next_begin_offset
            undecodable = result.undecodable
            if undecodable:
                held = {id(msg) for msg in pq.hold_undecodable([record.message for record in undecodable])}
                undecodable = [record for record in undecodable if id(record.message) in held]
            if messages or undecodable:
                pq.put_messages(messages)
                self.batches.append(Batch(state, generation, messages, undecodable))
                self.cached_count += len(messages)
                self.notify_locked()
            elif result.status is not PullStatus.OFFSET_ILLEGAL and pq.msg_count == 0 \
                    and result.next_begin_offset > state.polled_offset >= 0:
                # only filtered-out messages (or none): nothing to hand out up to there
                state.polled_offset = result.next_begin_offset


    def notify_locked(self) -> None:
        self.cond.notify_all()
        for loop, future in self.async_waiters:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future)

    def wake_pollers(self) -> None:
        with self.cond:
            self.notify_locked()

    def take_batch_locked(self) -> Batch | None:
        batches = self.batches
        chosen: int | None = None
        stale = False
        for index, batch in enumerate(batches):
            state = batch.state
            if state.removed or batch.generation != state.generation or state.process_queue.dropped:
                stale = True
                continue
            if state.mq not in self.paused:
                chosen = index
                break
        if stale:
            batches = self.batches = deque(batch for batch in batches if not _is_stale(batch))
            self.cached_count = sum(len(batch.messages) for batch in batches)
            chosen = next((index for index, batch in enumerate(batches) if batch.state.mq not in self.paused), None)
        if chosen is None:
            return None
        batch = batches[chosen]
        del batches[chosen]
        self.cached_count -= len(batch.messages)
        state = batch.state
        offset = state.process_queue.remove_messages(batch.messages)
        if batch.undecodable:
            released = state.process_queue.release_undecodable([record.message for record in batch.undecodable])
            if released >= 0:
                offset = released
        if offset >= 0:
            state.polled_offset = offset
        return batch

    def ack_polled_locked(self) -> None:
        """A poll began: the application is done with every batch polled before it."""
        for state in self.queues.values():
            state.acked_offset = state.polled_offset

    # ------------------------------------------------------------------ positions, seeking, stopping

    def commit_positions(self, *, polled: bool) -> None:
        """Record each held queue's position as the group's offset: after the batches polled (``polled``)
        or only those polled before the latest poll."""
        store = self.consumer.offset_store
        with self.lock:
            for mq, state in self.queues.items():
                offset = state.polled_offset if polled else state.acked_offset
                if offset >= 0 and not state.process_queue.dropped:
                    store.update_offset(mq, offset, False)

    def restart_at(self, mq: MessageQueue, offset: int) -> QueueState | None:
        """Pull ``mq`` again from ``offset`` (on the loop): its cached batches and a pull in flight are
        dropped, its position becomes ``offset``. None when ``mq`` is not held (any more)."""
        with self.lock:
            state = self.queues.get(mq)
            if state is None:
                return None
            state.generation += 1
            self.drop_batches_locked(state)
            state.next_pull_offset = offset
            state.polled_offset = state.acked_offset = offset
            if state.task is not None:
                state.task.cancel()
        self.start_pull_task(state)
        return state

    async def stop_tasks(self) -> None:
        """No pull from now on: cancel the pull tasks and wait for them (on the loop)."""
        self.closing = True
        tasks = [task for task in self._tasks if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def forget_all(self) -> None:
        """Give up every held queue and drop the cache (after `stop_tasks`)."""
        with self.lock:
            for state in self.queues.values():
                state.removed = True
                state.process_queue.dropped = True
            self.queues.clear()
            self.batches.clear()
            self.cached_count = 0


def _is_stale(batch: Batch) -> bool:
    state = batch.state
    return state.removed or batch.generation != state.generation or state.process_queue.dropped


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


__all__ = [
    "PULL_DELAY_WHEN_FLOW_CONTROL",
    "PULL_DELAY_WHEN_PAUSE",
    "Batch",
    "BatchFetcher",
    "FetchingConsumer",
    "QueueState",
    "StartOffsets",
]
