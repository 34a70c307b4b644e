"""Key-ordered consumption (rocketflow's own): order per key, parallelism across the keys of a queue.

Each message has a key: ``key(msg)`` when the consumer was given one, else its sharding key (the
``__SHARDINGKEY`` property `Producer.send(..., sharding_key=...)` records), else the first of its
KEYS, else none (such a message is ordered with nothing). Messages of one key are consumed one at a
time in queue-offset order; different keys of one queue run at the same time, at most
``max_in_flight_per_queue`` of them, on the consume thread pool (``async def`` listeners: as tasks
on the client's loop, at most ``consume_thread_max`` at once across queues).

Ownership is the orderly mode's (`rocketflow.client.consumer.consume.orderly`): the consumer
registers as orderly, so the rebalance locks a queue at the broker before taking it and `lock_all`
renews the locks; each queue holds the process queue's consume lock while any of its keys is in
flight: the lock is taken (on the loop) when keys start on an idle queue and released by whichever
consume thread finishes the last of them, so a busy queue costs no hand-over per batch. A rebalance that drops the queue
therefore waits (up to its consume-lock timeout, then retries at the next rebalance) for the keys in
flight to finish before it releases the broker lock; no new key starts once the queue is dropped.
Each queue also has a *driver* task on the loop for what cannot be done in passing: waiting for a
consume lock the rebalance holds, re-locking a queue whose broker lock is missing or expired (a key
does not start then, as in orderly mode), resuming suspended keys, and forgetting a dropped queue.

Messages stay in the process queue until consumed, so the usual flow control (cached count and size)
applies and the committed offset is always the smallest offset not consumed yet: a crash replays
only unfinished work, and a key's replays come in order.

Flow control counts a suspended (retrying) key's waiting messages too. A key that keeps failing while
its messages keep arriving can fill its queue's cache (``pull_threshold_for_queue`` messages or
``pull_threshold_size_for_queue`` MiB). Pulls of that queue then pause, and keys whose messages are
not pulled yet wait until the key succeeds or its message is dead-lettered. That takes at most
``max_reconsume_times`` suspensions of ``suspend_current_queue_time_millis``, or forever with
``MAX_RECONSUME_TIMES_UNLIMITED``. This is deliberate: the cache bounds memory, as in orderly
consumption, where a failing message stops its whole queue. Pulling past the backlog could not move
the committed offset anyway, because it stays at the key's oldest unconsumed message. To bound the
delay, keep the retries few and short, or raise the thresholds. The span limit of concurrent
consumption (``consume_concurrently_max_span``) does not apply.

Failures (SUSPEND_CURRENT_QUEUE_A_MOMENT, an exception or no status) suspend the message's key for
``suspend_current_queue_time_millis`` (the context's, else the consumer's; clamped to 10..30000 ms)
and retry the message in place; other keys go on. A message that failed after
``max_reconsume_times`` retries is sent to the dead-letter queue (CONSUMER_SEND_MSG_BACK with delay
level -1; if that RPC fails, a copy past the limit to ``%RETRY%<group>``, which the broker
dead-letters) and its key continues; if both fail it is retried again. COMMIT and ROLLBACK count as
SUCCESS and ``auto_commit`` is ignored.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from rocketflow.client.consumer.consume.base import CallTally, ConsumingConsumer
from rocketflow.client.consumer.consume.context import ConsumeOrderlyContext, ConsumeOrderlyStatus
from rocketflow.client.consumer.consume.orderly import (
    STATS_FLUSH_CALLS,
    TRY_LOCK_LATER_AT_ENTRY_MILLS,
    ConsumeMessageOrderlyService,
    QueueLocks,
)
from rocketflow.client.consumer.consume.retry import MessageSendBack
from rocketflow.client.consumer.consume_lock import ConsumeLock
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.consumer.push_settings import KeyOrderedConfig
from rocketflow.protocol.message import MessageConst, MessageExt, MessageQueue

logger = logging.getLogger(__name__)

#: ``fn(msg) -> str``: a message's ordering key.
KeyFunction: TypeAlias = Callable[[MessageExt], str]
#: A message's key inside a queue: a string, or the queue offset for a message without a key.
MessageKey: TypeAlias = "str | int"
#: Delay level that sends a message straight to the dead-letter queue (CONSUMER_SEND_MSG_BACK).
DEAD_LETTER_DELAY_LEVEL: Final = -1
#: How long a consume thread waits for a dead-letter send (seconds).
DEAD_LETTER_WAIT: Final = 15.0
#: A worker serves ready keys of its queue for this long (seconds), then queues the rest of its run
#: behind the other queues' work, so that one busy queue cannot hold every consume thread.
KEY_RUN_SLICE: Final = 0.05
#: How often idle drivers are checked for a dropped queue or a lapsed lock (seconds).
WATCH_INTERVAL: Final = 1.0


def default_message_key(msg: MessageExt) -> str | None:
    """The sharding key, else the first of KEYS, else None (no ordering)."""
    sharding = msg.properties.get(MessageConst.SHARDING_KEY)
    if sharding:
        return sharding
    keys = msg.key_list
    return keys[0] if keys else None


@dataclass(slots=True)
class ConsumeKeyOrderedContext(ConsumeOrderlyContext):
    """Passed to a key-ordered listener with each message: the orderly context plus the message's ``key``
    (None: it has none). ``suspend_current_queue_time_millis`` (-1 = the consumer's setting) is how long
    the key pauses after a failure; ``auto_commit`` is ignored."""

    key: str | None = None


class _Outcome(enum.Enum):
    DONE = "DONE"          # consumed (or dead-lettered): remove, commit, the key goes on
    RETRY = "RETRY"        # put back at the head of its key, which is suspended for a while
    SKIPPED = "SKIPPED"    # not consumed (the queue was dropped or the service stopped first)


class _QueueState:
    """The keys of one process queue. ``mutex`` guards every container; the driver task owns the rest.

    A key with waiting messages is in exactly one of ``ready`` (may start), ``running`` (a message
    of it is being consumed) or ``suspended`` (waiting to retry its head message). ``pending`` has
    the waiting messages of each key; a running key may have no entry there (nothing waits behind it).
    """

    __slots__ = ("admitted", "driver", "holding", "message_queue", "mutex", "pending", "process_queue", "ready",
                 "relocking", "running", "suspended", "wakeup")

    def __init__(self, message_queue: MessageQueue, process_queue: ProcessQueue) -> None:
        self.message_queue = message_queue
        self.process_queue = process_queue
        self.mutex = threading.Lock()
        self.pending: dict[MessageKey, deque[MessageExt]] = {}
        self.ready: deque[MessageKey] = deque()
        self.running: set[MessageKey] = set()
        self.suspended: set[MessageKey] = set()
        #: Offsets handed to the keys and not consumed yet (a re-delivered one is not queued twice).
        self.admitted: set[int] = set()
        self.wakeup = asyncio.Event()
        self.relocking = False
        #: The process queue's consume lock is held (owner: this state) while any key runs; under ``mutex``.
        self.holding = False
        self.driver: asyncio.Task[None] | None = None


class ConsumeMessageKeyOrderedService(ConsumeMessageOrderlyService):
    """Key-ordered consumption of a push consumer; see the module docstring."""

    def __init__(self, consumer: ConsumingConsumer, listener: Callable[..., Any], locks: QueueLocks,
                 send_back: MessageSendBack, config: KeyOrderedConfig | None = None) -> None:
        super().__init__(consumer, listener, locks, send_back)
        self.kind = "key-ordered"
        config = config if config is not None else KeyOrderedConfig()
        self.key_function = config.key
        self.max_in_flight_per_queue = config.max_in_flight_per_queue
        self._states: dict[ProcessQueue, _QueueState] = {}

    async def start_on_loop(self) -> None:
        await super().start_on_loop()
        self._start_background(self._watch_queues())

    async def _watch_queues(self) -> None:
        # a driver sleeps while its queue is idle: wake it when the queue is dropped or its lock lapses
        while not self._stopped:
            await asyncio.sleep(WATCH_INTERVAL)
            for pq, state in list(self._states.items()):
                if pq.dropped or not self._lock_valid(pq):
                    state.wakeup.set()

    async def stop_on_loop(self) -> None:
        await super().stop_on_loop()
        drivers = [state.driver for state in self._states.values() if state.driver is not None]
        for driver in drivers:
            driver.cancel()
        if drivers:
            await asyncio.gather(*drivers, return_exceptions=True)

    def in_flight(self, process_queue: ProcessQueue) -> int:
        """Keys of ``process_queue`` being consumed now."""
        state = self._states.get(process_queue)
        if state is None:
            return 0
        with state.mutex:
            return len(state.running)

    # ------------------------------------------------------------------ keys

    def message_key(self, msg: MessageExt) -> MessageKey:
        """``msg``'s key; a message without one gets its queue offset (ordered with nothing)."""
        key: object = None
        if self.key_function is not None:
            try:
                key = self.key_function(msg)
            except Exception as exc:
                logger.error("%s: the key function raised for %s: %r; using the message's own key", self.group,
                             msg, exc)
                key = None
            else:
                if not isinstance(key, str):
                    logger.error("%s: the key function returned %r for %s (expected a str); using the message's "
                                 "own key", self.group, key, msg)
                    key = None
        if key is None:
            key = default_message_key(msg)
        return key if isinstance(key, str) else msg.queue_offset

    # ------------------------------------------------------------------ submission (on the loop)

    def submit_consume_request(self, msgs: list[MessageExt], process_queue: ProcessQueue,
                               message_queue: MessageQueue, dispatch_to_consume: bool) -> None:
        if process_queue.dropped or self._stopped:
            return
        state = self._state_for(process_queue, message_queue)
        admitted, pending, running, make_ready = state.admitted, state.pending, state.running, state.ready.append
        key_of = self.message_key
        may_start = self._may_start(process_queue)
        limit = self.max_in_flight_per_queue
        started: list[tuple[MessageKey, MessageExt]] = []
        start = started.append
        with state.mutex:
            # Fast lane: a message whose key has nothing waiting or running starts at once (no
            # per-key queue); keys already ready go first, so the lane is closed while any is.
            lane_open = may_start and not state.ready and self._hold_consume_lock(state)
            for msg in msgs:
                offset = msg.queue_offset
                if offset in admitted:
                    continue
                admitted.add(offset)
                key = key_of(msg)
                waiting = pending.get(key)
                if waiting is not None:
                    waiting.append(msg)
                elif key in running:
                    pending[key] = deque((msg,))   # ready when its running message is settled
                elif lane_open and len(running) < limit:
                    running.add(key)
                    start((key, msg))
                else:
                    pending[key] = deque((msg,))
                    make_ready(key)
            self._release_if_idle(state)
        if started:
            self._dispatch(state, started)
        # keys that could not start: here if the lock is to be had, else the driver sees to them
        if not may_start or (state.ready and not self._start_ready_keys(state)):
            state.wakeup.set()

    def _state_for(self, pq: ProcessQueue, mq: MessageQueue) -> _QueueState:
        state = self._states.get(pq)
        if state is None:
            state = _QueueState(mq, pq)
            self._states[pq] = state
            state.driver = asyncio.ensure_future(self._drive(state))
        return state

    def _submit(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        # the orderly re-lock path ends here (on the loop): wake the queue's driver
        state = self._states.get(pq)
        if state is not None:
            state.relocking = False
            state.wakeup.set()

    def _wake(self, state: _QueueState) -> None:
        instance = self.consumer.instance
        if instance.in_loop_thread():
            state.wakeup.set()
        else:
            instance.loop.call_soon_threadsafe(state.wakeup.set)

    # ------------------------------------------------------------------ the driver (one task per queue)

    def _lock_valid(self, pq: ProcessQueue) -> bool:
        return not self._clustering or (pq.locked and not pq.is_lock_expired())

    def _may_start(self, pq: ProcessQueue) -> bool:
        return not pq.dropped and not self._stopped and self._lock_valid(pq)

    async def _drive(self, state: _QueueState) -> None:
        """Start ready keys that could not start in passing, re-lock a queue whose lock lapsed, and forget
        the queue once it is dropped and idle."""
        pq, mq = state.process_queue, state.message_queue
        try:
            while True:
                state.wakeup.clear()
                with state.mutex:
                    idle = not state.running
                    has_ready = bool(state.ready)
                if pq.dropped or self._stopped:
                    if idle:
                        logger.debug("%s: %s dropped; its keys stop", self.group, mq)
                        return
                elif not self._lock_valid(pq):
                    if not state.relocking:
                        state.relocking = True
                        logger.warning("%s: %s is not locked (or the lock expired); consuming it later", self.group,
                                       mq)
                        self.try_lock_later_and_reconsume(mq, pq, TRY_LOCK_LATER_AT_ENTRY_MILLS)
                elif has_ready and not self._start_ready_keys(state):
                    # the consume lock is taken (a rebalance checking the queue): try again shortly
                    await asyncio.sleep(ConsumeLock.ASYNC_POLL_MAX)
                    continue
                await state.wakeup.wait()
        finally:
            with state.mutex:
                self._release_if_idle(state)
            if self._states.get(pq) is state:
                del self._states[pq]

    @staticmethod
    def _release_if_idle(state: _QueueState) -> None:
        # caller holds state.mutex
        if state.holding and not state.running:
            state.holding = False
            state.process_queue.consume_lock.release_for(state)

    @staticmethod
    def _hold_consume_lock(state: _QueueState) -> bool:
        # caller holds state.mutex; False: someone else (a rebalance) holds the consume lock
        if not state.holding:
            if not state.process_queue.consume_lock.try_acquire_for(state):
                return False
            state.holding = True
        return True

    def _start_ready_keys(self, state: _QueueState) -> bool:
        """Start ready keys (on the loop; the caller checked `_may_start`). False: the consume lock is
        held by someone else (a rebalance), nothing started."""
        started: list[tuple[MessageKey, MessageExt]] = []
        limit = self.max_in_flight_per_queue
        with state.mutex:
            if not state.ready:
                return True
            if not self._hold_consume_lock(state):
                return False
            while state.ready and len(state.running) < limit:
                key = state.ready.popleft()
                state.running.add(key)
                started.append((key, state.pending[key].popleft()))
            self._release_if_idle(state)
        if started:
            self._dispatch(state, started)
        return True

    def _dispatch(self, state: _QueueState, started: list[tuple[MessageKey, MessageExt]]) -> None:
        """Run the head messages of freshly started keys (on the loop)."""
        if self.is_async:
            for key, msg in started:
                self._run_task(self._run_keys_async(state, key, msg))
            return
        # a fast listener's keys go to a worker several at a time (see `bundle_size`), bounded by
        # max_in_flight_per_queue rather than BUNDLE_MAX_CALLS: fewer keys per worker is slower
        per_worker = self.bundle_size(len(started))
        for first in range(0, len(started), per_worker):
            self._run_in_pool(self._run_keys_sync, state, started[first:first + per_worker])

    # ------------------------------------------------------------------ running keys

    def _run_keys_sync(self, state: _QueueState, batch: list[tuple[MessageKey, MessageExt]]) -> None:
        """Consume the head message of each key of ``batch`` (distinct keys, one after the other), then
        whichever keys are ready next: one pool call serves keys until none is ready."""
        begin = time.monotonic()
        pq = state.process_queue
        tally = CallTally()
        try:
            while batch:
                settled: list[tuple[MessageKey, MessageExt, _Outcome, int]] = []
                lock_valid = self._lock_valid(pq)  # once a batch: its calls take ~consume_bundle_time
                for key, msg in batch:
                    if pq.dropped or self._stopped or not lock_valid:
                        settled.append((key, msg, _Outcome.SKIPPED, -1))
                        continue
                    context = self._context(state, key)
                    outcome = self._consume_one_sync(state, msg, context, tally)
                    settled.append((key, msg, outcome, context.suspend_current_queue_time_millis))
                batch = self._finish_many(state, settled, self.bundle_size(self.max_in_flight_per_queue))
                if batch and time.monotonic() - begin > KEY_RUN_SLICE:
                    self._run_in_pool(self._run_keys_sync, state, batch)
                    return
        finally:
            self.record_calls(tally, state.message_queue.topic)

    async def _run_keys_async(self, state: _QueueState, key: MessageKey, msg: MessageExt) -> None:
        begin = time.monotonic()
        item: tuple[MessageKey, MessageExt] | None = (key, msg)
        while item is not None:
            key, msg = item
            if not self._may_start(state.process_queue):
                item = self._finish(state, key, msg, _Outcome.SKIPPED, -1)
                continue
            context = self._context(state, key)
            outcome = await self._consume_one_async(state, msg, context)
            item = self._finish(state, key, msg, outcome, context.suspend_current_queue_time_millis)
            if item is not None and time.monotonic() - begin > KEY_RUN_SLICE:
                self._run_task(self._run_keys_async(state, *item))
                return

    @staticmethod
    def _context(state: _QueueState, key: MessageKey) -> ConsumeKeyOrderedContext:
        return ConsumeKeyOrderedContext(state.message_queue, key=key if isinstance(key, str) else None)

    def _consume_one_sync(self, state: _QueueState, msg: MessageExt, context: ConsumeKeyOrderedContext,
                          tally: CallTally) -> _Outcome:
        mq = state.message_queue
        msgs = [msg]
        if mq.topic == self.consumer.retry_topic:
            self.reset_retry_topic(msgs)
        hook_context = self.hooks_before(mq, msgs) if self.consumer.hooks else None
        started = time.monotonic()
        result: object = None
        error: BaseException | None = None
        try:
            result = self.listener([msg], context)
        except Exception as exc:
            error = exc
            logger.warning("%s: key-ordered listener raised for %s offset %d", self.group, mq, msg.queue_offset,
                           exc_info=True)
        else:
            if result is ConsumeOrderlyStatus.SUCCESS and hook_context is None:
                # the common outcome, counted in the worker's tally (recorded in one go)
                tally.succeeded(1, started)
                if tally.calls >= STATS_FLUSH_CALLS:
                    self.record_calls(tally, mq.topic)
                return _Outcome.DONE
        status = self._after_listener(mq, msgs, result, error, started, hook_context)
        if status is not ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT:
            return self._consumed(mq)
        dead_lettered = msg.reconsume_times >= self.max_reconsume_times and self._dead_letter_blocking(msg, mq)
        return self._failed(mq, msg, dead_lettered)

    async def _consume_one_async(self, state: _QueueState, msg: MessageExt,
                             context: ConsumeKeyOrderedContext) -> _Outcome:
        mq = state.message_queue
        msgs = [msg]
        self.reset_retry_topic(msgs)
        hook_context = self.hooks_before(mq, msgs)
        started = time.monotonic()
        result: object = None
        error: BaseException | None = None
        try:
            result = await self.listener(list(msgs), context)
        except Exception as exc:
            error = exc
            logger.warning("%s: key-ordered listener raised for %s offset %d", self.group, mq, msg.queue_offset,
                           exc_info=True)
        status = self._after_listener(mq, msgs, result, error, started, hook_context)
        if status is not ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT:
            return self._consumed(mq)
        dead_lettered = msg.reconsume_times >= self.max_reconsume_times and await self._dead_letter(msg, mq)
        return self._failed(mq, msg, dead_lettered)

    def _consumed(self, mq: MessageQueue) -> _Outcome:
        self.consumer.consumer_stats.inc_consume_ok_tps(self.group, mq.topic, 1)
        return _Outcome.DONE

    def _failed(self, mq: MessageQueue, msg: MessageExt, dead_lettered: bool) -> _Outcome:
        self.consumer.consumer_stats.inc_consume_failed_tps(self.group, mq.topic, 1)
        if dead_lettered:
            return _Outcome.DONE
        msg.reconsume_times += 1
        return _Outcome.RETRY

    def _finish(self, state: _QueueState, key: MessageKey, msg: MessageExt, outcome: _Outcome,
                suspend_millis: int) -> tuple[MessageKey, MessageExt] | None:
        """Settle ``msg`` of ``key``; return the next (key, message) this worker should consume, if any."""
        following = self._finish_many(state, [(key, msg, outcome, suspend_millis)], 1)
        return following[0] if following else None

    def _finish_many(self, state: _QueueState, settled: list[tuple[MessageKey, MessageExt, _Outcome, int]],
                     want: int) -> list[tuple[MessageKey, MessageExt]]:
        """Settle messages of distinct keys as (key, message, outcome, suspend ms); return up to ``want``
        next (key, message) pairs this worker should consume."""
        pq, mq = state.process_queue, state.message_queue
        done = [msg for _, msg, outcome, _ in settled if outcome is _Outcome.DONE]
        if done:
            offset = pq.remove_messages(done)
            if offset >= 0 and not pq.dropped:
                self.consumer.offset_store.update_offset(mq, offset, True)
        following: list[tuple[MessageKey, MessageExt]] = []
        skipped = False
        with state.mutex:
            for key, msg, outcome, _ in settled:
                state.running.discard(key)
                waiting = state.pending.get(key)
                if outcome is _Outcome.DONE:
                    state.admitted.discard(msg.queue_offset)
                    if waiting:
                        state.ready.append(key)
                    elif waiting is not None:
                        del state.pending[key]
                else:
                    if waiting is None:
                        waiting = state.pending[key] = deque()
                    waiting.appendleft(msg)
                    if outcome is _Outcome.RETRY:
                        state.suspended.add(key)
                    else:
                        state.ready.appendleft(key)
                        skipped = True
            if not skipped and state.ready and self._may_start(pq):
                ready, running, limit = state.ready, state.running, self.max_in_flight_per_queue
                while ready and len(following) < want and len(running) < limit:
                    next_key = ready.popleft()
                    running.add(next_key)
                    following.append((next_key, state.pending[next_key].popleft()))
            idle = not state.running
            self._release_if_idle(state)
        for key, _, outcome, suspend_millis in settled:
            if outcome is _Outcome.RETRY:
                self.consumer.call_later(self._suspend_seconds(suspend_millis),
                                         functools.partial(self._resume_key, state, key))
        if idle and (skipped or pq.dropped or self._stopped or state.ready or not self._lock_valid(pq)):
            self._wake(state)   # the driver has something to do (the consume lock is already released)
        return following

    def _resume_key(self, state: _QueueState, key: MessageKey) -> None:
        """A suspended key may retry its head message (on the loop)."""
        with state.mutex:
            state.suspended.discard(key)
            if state.pending.get(key) and key not in state.running:
                state.ready.append(key)
        state.wakeup.set()

    # ------------------------------------------------------------------ the dead-letter queue

    async def _dead_letter(self, msg: MessageExt, mq: MessageQueue) -> bool:
        try:
            await self.send_back.send_message_back(msg, DEAD_LETTER_DELAY_LEVEL, mq.broker_name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.error("%s: sending %s to the dead-letter queue failed: %s; retrying it", self.group, msg, exc)
            return False
        logger.info("%s: %s failed %d times; sent to the dead-letter queue", self.group, msg,
                    msg.reconsume_times + 1)
        return True

    def _dead_letter_blocking(self, msg: MessageExt, mq: MessageQueue) -> bool:
        try:
            return bool(self.consumer.instance.run(self._dead_letter(msg, mq), DEAD_LETTER_WAIT))
        except Exception as exc:
            logger.error("%s: sending %s to the dead-letter queue failed: %s; retrying it", self.group, msg, exc)
            return False


__all__ = [
    "DEAD_LETTER_DELAY_LEVEL",
    "KEY_RUN_SLICE",
    "WATCH_INTERVAL",
    "ConsumeKeyOrderedContext",
    "ConsumeMessageKeyOrderedService",
    "KeyFunction",
    "MessageKey",
    "default_message_key",
]
