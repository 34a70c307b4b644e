"""The process queue: a push consumer's consumption snapshot of one message queue.

RocketMQ 4.9.3's ``ProcessQueue``, see docs/design/consumer.md ("The process queue"). The pull side
puts pulled messages in; the consume side removes them (concurrent mode) or takes, commits and
rolls them back (orderly mode). The offsets it hands back are what the offset store may commit:
never past a message that is still held, so a crash loses nothing (at-least-once).

No I/O and no timers: every time-based question takes ``now_ms`` (or asks the injected clock).

Differences from 4.9.3, all deliberate:

* ``commit()`` with nothing being consumed returns -1 (4.9.3 throws ``NoSuchElementException``).
* ``msg_size`` is reset to 0 whenever ``msg_count`` reaches 0 and ``info()`` always reports the
  size in MiB (as 4.9.8+ does).
* An offset held in either map counts as a duplicate in ``put_messages`` (4.9.3 checks only the
  pulled map, so a re-pull of a message being consumed in orderly mode would be consumed twice).
* ``make_message_to_consume_again`` only moves messages that are in the consuming map, and sizes
  are always adjusted by the bodies actually held, so the counters cannot drift.
* ``queue_offset_max`` is the largest newly inserted offset (4.9.3: the last one inserted; the same
  unless a pull re-delivers lower offsets).
* Records the client could not decode are held apart (`hold_undecodable`) while the consumer sends
  them to the dead-letter queue: no listener sees them, but no offset handed back passes them before
  `release_undecodable`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import repeat
from typing import Final

from sortedcontainers import SortedDict

from rocketflow.client.consumer.consume_lock import ConsumeLock
from rocketflow.client.consumer.offset_map import OffsetMap
from rocketflow.protocol.message import MessageConst, MessageExt

#: A push consumer drops a queue it has not pulled for this long (``rocketmq.client.pull.pullMaxIdleTime``).
DEFAULT_PULL_MAX_IDLE_MS: Final = 120_000
#: Client-side life of a broker lock (``rocketmq.client.rebalance.lockMaxLiveTime``); the broker's is 60 s.
DEFAULT_LOCK_MAX_LIVE_MS: Final = 30_000
#: ``consumeTimeout`` (15 minutes): a message consumed for longer than this is sent back.
DEFAULT_CONSUME_TIMEOUT_MS: Final = 15 * 60 * 1000
#: At most this many expired messages are collected per queue per scan (4.9.3 ``cleanExpiredMsg``).
DEFAULT_EXPIRED_SCAN_MAX: Final = 16

_MIB: Final = 1024 * 1024

Clock = Callable[[], int]


def system_clock_ms() -> int:
    """Wall-clock milliseconds, like Java's ``System.currentTimeMillis()``."""
    return int(time.time() * 1000)


@dataclass(slots=True)
class ProcessQueueInfo:
    """A process queue's state for GET_CONSUMER_RUNNING_INFO (Java ``ProcessQueueInfo``).

    ``consuming_msg_*`` describe the orderly consuming map (Java calls them ``transactionMsg*``).
    ``commit_offset`` is filled in by the caller from the offset store.
    """

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    consuming_msg_min_offset: int = 0
    consuming_msg_max_offset: int = 0
    consuming_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    dropped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0

    def to_json_dict(self) -> dict[str, object]:
        """fastjson's shape: Java bean names (``droped`` sic), keys sorted."""
        return {
            "cachedMsgCount": self.cached_msg_count,
            "cachedMsgMaxOffset": self.cached_msg_max_offset,
            "cachedMsgMinOffset": self.cached_msg_min_offset,
            "cachedMsgSizeInMiB": self.cached_msg_size_in_mib,
            "commitOffset": self.commit_offset,
            "droped": self.dropped,
            "lastConsumeTimestamp": self.last_consume_timestamp,
            "lastLockTimestamp": self.last_lock_timestamp,
            "lastPullTimestamp": self.last_pull_timestamp,
            "locked": self.locked,
            "transactionMsgCount": self.consuming_msg_count,
            "transactionMsgMaxOffset": self.consuming_msg_max_offset,
            "transactionMsgMinOffset": self.consuming_msg_min_offset,
            "tryUnlockTimes": self.try_unlock_times,
        }


def _check_duration(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int number of milliseconds, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def _as_batch(msgs: Iterable[MessageExt]) -> list[MessageExt]:
    batch = list(msgs)
    if not all(map(isinstance, batch, repeat(MessageExt))):  # C-level: this runs for every consumed batch
        wrong = next(msg for msg in batch if not isinstance(msg, MessageExt))
        raise TypeError(f"expected MessageExt, got {type(wrong).__name__}")
    return batch


class ProcessQueue:
    """Pulled-but-not-yet-consumed messages of one queue, with the flags the consumer keeps for it.

    Every public method is thread-safe (one internal reentrant lock guards the maps and counters).
    ``consume_lock`` is a separate reentrant `ConsumeLock` the orderly consumer holds around a
    listener call (from a consume thread, or from a task for ``async def`` listeners), so that a
    rebalance cannot release the broker lock in the middle of a batch.

    Plain attributes (``dropped``, ``locked``, ``last_lock_timestamp``, ``last_pull_timestamp``,
    ``last_consume_timestamp``) are single assignments, safe to set from any thread.
    """

    def __init__(
        self,
        *,
        pull_max_idle_ms: int = DEFAULT_PULL_MAX_IDLE_MS,
        lock_max_live_ms: int = DEFAULT_LOCK_MAX_LIVE_MS,
        consume_timeout_ms: int = DEFAULT_CONSUME_TIMEOUT_MS,
        clock: Clock | None = None,
    ) -> None:
        self.pull_max_idle_ms = _check_duration("pull_max_idle_ms", pull_max_idle_ms)
        self.lock_max_live_ms = _check_duration("lock_max_live_ms", lock_max_live_ms)
        self.consume_timeout_ms = _check_duration("consume_timeout_ms", consume_timeout_ms)
        if clock is not None and not callable(clock):
            raise TypeError("clock must be a callable returning milliseconds")
        self._clock: Clock = clock if clock is not None else system_clock_ms

        self._lock = threading.RLock()
        self._consume_lock = ConsumeLock()
        self._msg_tree_map = OffsetMap()
        self._consuming_map = OffsetMap()
        #: undecodable records on their way to the dead-letter queue (counted in msg_count and msg_size)
        self._undecodable = OffsetMap()
        self._msg_count = 0
        self._msg_size = 0
        self._queue_offset_max = 0
        self._msg_acc_cnt = 0
        self._try_unlock_times = 0
        self._consuming = False
        #: called once the cache has drained to these marks (`call_when_drained`)
        self._drained_callback: Callable[[], None] | None = None
        self._drained_max_count = 0
        self._drained_max_size = 0

        now = self._clock()
        self.dropped = False
        self.locked = False
        self.last_lock_timestamp = now
        self.last_pull_timestamp = now
        self.last_consume_timestamp = now

    # -- clock and locks --------------------------------------------------------------------
    def now_ms(self) -> int:
        """The injected clock's current time in milliseconds."""
        return self._clock()

    @property
    def consume_lock(self) -> ConsumeLock:
        """Held by the orderly consumer around each listener call (and tried by rebalance)."""
        return self._consume_lock

    # -- pull side ------------------------------------------------------------------------------
    def put_messages(self, msgs: Iterable[MessageExt]) -> bool:
        """Add pulled messages; offsets already held are ignored (not counted twice).

        Returns ``dispatch_to_consume``: True when messages are held and nobody was consuming
        (``consuming`` is then set, so only one caller gets True until consumption stops).
        """
        batch = _as_batch(msgs)
        with self._lock:
            added, size, largest = self._msg_tree_map.add_absent(batch, self._consuming_map.offsets())
            self._msg_count += added
            self._msg_size += size
            if largest > self._queue_offset_max:
                self._queue_offset_max = largest

            dispatch_to_consume = False
            if self._msg_tree_map and not self._consuming:
                dispatch_to_consume = True
                self._consuming = True

            if batch:
                last = batch[-1]
                max_offset = _parse_int(last.get_property(MessageConst.MAX_OFFSET))
                if max_offset is not None and max_offset - last.queue_offset > 0:
                    self._msg_acc_cnt = max_offset - last.queue_offset
            return dispatch_to_consume

    # -- concurrent consumption ---------------------------------------------------------------
    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Forget consumed messages and return the offset that may now be committed.

        That is the smallest offset still held, or ``queue_offset_max + 1`` when nothing is left,
        or -1 when nothing was held. So if m5 finishes before m4, the result stays at m4.
        """
        batch = _as_batch(msgs)
        with self._lock:
            self.last_consume_timestamp = self._clock()
            tree = self._msg_tree_map
            if not tree:
                return -1
            removed_count, removed_size = tree.remove(batch)
            self._msg_count -= removed_count
            self._msg_size -= removed_size
            self._reset_size_if_empty()
            offset = tree.first_offset() if tree else self._queue_offset_max + 1
            if self._undecodable:
                offset = min(offset, self._undecodable.first_offset())
            drained = self._pop_drained_callback()
        if drained is not None:
            drained()
        return offset

    def expired_messages(
        self, now_ms: int | None = None, max_count: int = DEFAULT_EXPIRED_SCAN_MAX
    ) -> list[MessageExt]:
        """The leading held messages whose consumption started more than ``consume_timeout_ms`` ago.

        Scans from the smallest offset and stops at the first message that has not expired (or has
        no CONSUME_START_TIME property), returning at most ``max_count``. Concurrent mode only; the
        caller sends each one back (delay level 3) and then calls `remove_if_first`.
        """
        if max_count < 0:
            raise ValueError(f"max_count must be >= 0, got {max_count}")
        now = self._clock() if now_ms is None else now_ms
        result: list[MessageExt] = []
        with self._lock:
            for msg in self._msg_tree_map.values_in_order():
                if len(result) >= max_count:
                    break
                started = _parse_int(msg.get_property(MessageConst.CONSUME_START_TIMESTAMP))
                if started is None or now - started <= self.consume_timeout_ms:
                    break
                result.append(msg)
        return result

    def remove_if_first(self, msg: MessageExt) -> bool:
        """Remove ``msg`` only if it is still the smallest held message (after sending it back)."""
        with self._lock:
            if not self._msg_tree_map or self._msg_tree_map.first_offset() != msg.queue_offset:
                return False
            self.remove_messages([msg])
            return True

    # -- orderly consumption ------------------------------------------------------------------
    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """Move up to ``batch_size`` smallest messages into the consuming map and return them.

        When there is nothing to take, ``consuming`` becomes False (the next put dispatches again).
        """
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        with self._lock:
            self.last_consume_timestamp = self._clock()
            tree = self._msg_tree_map
            consuming = self._consuming_map
            taken: list[MessageExt] = []
            for _ in range(min(batch_size, len(tree))):
                offset, msg = tree.pop_first()
                consuming.add(offset, msg)
                taken.append(msg)
            if not taken:
                self._consuming = False
            return taken

    def commit(self) -> int:
        """Finish the messages being consumed; return the largest of their offsets + 1.

        Returns -1 when nothing is being consumed (4.9.3 throws in that case).
        """
        with self._lock:
            consuming = self._consuming_map
            held = len(consuming)
            if not held:
                return -1
            last_offset = consuming.last_offset()
            self._msg_size -= consuming.body_bytes()
            consuming.clear()
            self._msg_count -= held
            self._reset_size_if_empty()
            drained = self._pop_drained_callback()
            commit_offset = last_offset + 1
            if self._undecodable:
                commit_offset = min(commit_offset, self._undecodable.first_offset())
        if drained is not None:
            drained()
        return commit_offset

    def commit_below(self, offset: int) -> int:
        """Finish the messages being consumed whose offsets are below ``offset``; return the largest + 1.

        What `commit` would have returned before the message at ``offset`` was taken (-1 when none is below).
        """
        with self._lock:
            consuming = self._consuming_map
            below = [key for key in consuming if key < offset]
            if not below:
                return -1
            for key in below:
                msg = consuming.pop(key)
                assert msg is not None
                self._msg_size -= len(msg.body)
            self._msg_count -= len(below)
            self._reset_size_if_empty()
            drained = self._pop_drained_callback()
            commit_offset = int(below[-1]) + 1
            if self._undecodable:
                commit_offset = min(commit_offset, self._undecodable.first_offset())
        if drained is not None:
            drained()
        return commit_offset

    def rollback(self) -> None:
        """Put every message being consumed back among the pulled ones."""
        with self._lock:
            for offset, msg in self._consuming_map.items():
                self._msg_tree_map.add(offset, msg)
            self._consuming_map.clear()

    def make_message_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Put these messages (if being consumed) back among the pulled ones, to be taken again."""
        batch = _as_batch(msgs)
        with self._lock:
            for msg in batch:
                held = self._consuming_map.pop(msg.queue_offset)
                if held is None:
                    continue
                # Keep the caller's object (it carries the updated reconsume times), like Java.
                self._msg_tree_map.add(msg.queue_offset, msg)
                self._msg_size += len(msg.body) - len(held.body)

    # -- undecodable records ----------------------------------------------------------------------
    def hold_undecodable(self, msgs: Iterable[MessageExt]) -> list[MessageExt]:
        """Hold records that no listener may see (they could not be decoded) until `release_undecodable`.

        Until then no offset this queue hands back passes them. Returns those held now (an offset
        already held in any map is skipped, so a record pulled twice is sent to the dead-letter queue
        once).
        """
        batch = _as_batch(msgs)
        held: list[MessageExt] = []
        with self._lock:
            aside = self._undecodable
            for msg in batch:
                offset = msg.queue_offset
                if offset in aside or offset in self._msg_tree_map or offset in self._consuming_map:
                    continue
                aside.add(offset, msg)
                held.append(msg)
                self._msg_count += 1
                self._msg_size += len(msg.body)
                if offset > self._queue_offset_max:
                    self._queue_offset_max = offset
        return held

    def release_undecodable(self, msgs: Iterable[MessageExt]) -> int:
        """Stop holding these undecodable records (sent to the dead-letter queue or skipped); return the
        offset that may now be committed: the smallest offset held in any map, ``queue_offset_max + 1``
        when none is, -1 when none of ``msgs`` was held."""
        batch = _as_batch(msgs)
        with self._lock:
            aside = self._undecodable
            removed_count, removed_size = aside.remove(batch)
            if not removed_count:
                return -1
            self._msg_count -= removed_count
            self._msg_size -= removed_size
            self._reset_size_if_empty()
            firsts = [held.first_offset() for held in (self._msg_tree_map, self._consuming_map, aside) if held]
            offset = min(firsts) if firsts else self._queue_offset_max + 1
            drained = self._pop_drained_callback()
        if drained is not None:
            drained()
        return offset

    @property
    def undecodable_count(self) -> int:
        """Undecodable records held (see `hold_undecodable`)."""
        with self._lock:
            return len(self._undecodable)

    # -- views ------------------------------------------------------------------------------------
    @property
    def msg_count(self) -> int:
        """Messages held (pulled plus being consumed, plus undecodable records held apart)."""
        with self._lock:
            return self._msg_count

    @property
    def msg_size(self) -> int:
        """Sum of the body lengths of the held messages, in bytes."""
        with self._lock:
            return self._msg_size

    @property
    def msg_acc_cnt(self) -> int:
        """How far the broker's max offset was ahead of the last pulled message (from MAX_OFFSET)."""
        with self._lock:
            return self._msg_acc_cnt

    @property
    def queue_offset_max(self) -> int:
        """The largest offset ever inserted (0 before the first one or after `clear`)."""
        with self._lock:
            return self._queue_offset_max

    @property
    def max_span(self) -> int:
        """Largest minus smallest pulled offset held (0 if none); concurrent flow control uses it."""
        with self._lock:
            if not self._msg_tree_map:
                return 0
            return self._msg_tree_map.last_offset() - self._msg_tree_map.first_offset()

    def span_with(self, first: int, last: int) -> int:
        """`max_span` once offsets ``first`` to ``last`` (``first <= last``) are held too."""
        with self._lock:
            tree = self._msg_tree_map
            if not tree:
                return last - first
            return max(tree.last_offset(), last) - min(tree.first_offset(), first)

    @property
    def has_temp_message(self) -> bool:
        """True when pulled messages are waiting (the consuming map is not looked at)."""
        with self._lock:
            return bool(self._msg_tree_map)

    @property
    def msg_tree_map(self) -> SortedDict[int, MessageExt]:
        """A snapshot copy of the pulled messages, by queue offset."""
        with self._lock:
            return self._msg_tree_map.snapshot()

    @property
    def consuming_msg_orderly_tree_map(self) -> SortedDict[int, MessageExt]:
        """A snapshot copy of the messages being consumed in orderly mode, by queue offset."""
        with self._lock:
            return self._consuming_map.snapshot()

    @property
    def consuming(self) -> bool:
        """True while a consume request owns this queue (set by `put_messages`, reset by `take_messages`)."""
        with self._lock:
            return self._consuming

    @consuming.setter
    def consuming(self, value: bool) -> None:
        with self._lock:
            self._consuming = bool(value)

    @property
    def try_unlock_times(self) -> int:
        """How often a rebalance failed to take the consume lock to release this queue."""
        with self._lock:
            return self._try_unlock_times

    def inc_try_unlock_times(self) -> int:
        """Count one more failed unlock try; return the new count."""
        with self._lock:
            self._try_unlock_times += 1
            return self._try_unlock_times

    # -- expiry -----------------------------------------------------------------------------------
    def is_pull_expired(self, now_ms: int | None = None) -> bool:
        """True when the last pull was more than ``pull_max_idle_ms`` ago."""
        now = self._clock() if now_ms is None else now_ms
        return now - self.last_pull_timestamp > self.pull_max_idle_ms

    def is_lock_expired(self, now_ms: int | None = None) -> bool:
        """True when the broker lock was last confirmed more than ``lock_max_live_ms`` ago."""
        now = self._clock() if now_ms is None else now_ms
        return now - self.last_lock_timestamp > self.lock_max_live_ms

    # -- housekeeping ------------------------------------------------------------------------------
    def clear(self) -> None:
        """Forget all messages; reset the counters and ``queue_offset_max`` (flags are kept, as in Java)."""
        with self._lock:
            self._msg_tree_map.clear()
            self._consuming_map.clear()
            self._undecodable.clear()
            self._msg_count = 0
            self._msg_size = 0
            self._queue_offset_max = 0

    def info(self, commit_offset: int = 0) -> ProcessQueueInfo:
        """A consistent snapshot for GET_CONSUMER_RUNNING_INFO; ``commit_offset`` is the offset store's."""
        with self._lock:
            info = ProcessQueueInfo(
                commit_offset=commit_offset,
                cached_msg_count=len(self._msg_tree_map),
                cached_msg_size_in_mib=self._msg_size // _MIB,
                consuming_msg_count=len(self._consuming_map),
                locked=self.locked,
                try_unlock_times=self._try_unlock_times,
                last_lock_timestamp=self.last_lock_timestamp,
                dropped=self.dropped,
                last_pull_timestamp=self.last_pull_timestamp,
                last_consume_timestamp=self.last_consume_timestamp,
            )
            if self._msg_tree_map:
                info.cached_msg_min_offset = self._msg_tree_map.first_offset()
                info.cached_msg_max_offset = self._msg_tree_map.last_offset()
            if self._consuming_map:
                info.consuming_msg_min_offset = self._consuming_map.first_offset()
                info.consuming_msg_max_offset = self._consuming_map.last_offset()
            return info

    def _reset_size_if_empty(self) -> None:
        if self._msg_count == 0:
            self._msg_size = 0

    # -- waiting for the cache to drain ----------------------------------------------------------------
    def call_when_drained(self, callback: Callable[[], None], max_count: int, max_size: int) -> None:
        """Call ``callback`` once this queue caches at most ``max_count`` messages and ``max_size`` body bytes.

        At once when it already does; otherwise from the thread whose removal (`remove_messages`,
        `commit`, `commit_below`) brings the cache there, after that removal. A later registration
        replaces one that has not been called yet. The pull service uses it to end a flow-control pause
        early.
        """
        with self._lock:
            if self._msg_count > max_count or self._msg_size > max_size:
                self._drained_callback = callback
                self._drained_max_count = max_count
                self._drained_max_size = max_size
                return
            self._drained_callback = None
        callback()

    def _pop_drained_callback(self) -> Callable[[], None] | None:
        """The `call_when_drained` callback when the cache is down to its marks (caller holds the lock)."""
        callback = self._drained_callback
        if callback is None or self._msg_count > self._drained_max_count or self._msg_size > self._drained_max_size:
            return None
        self._drained_callback = None
        return callback

    def __repr__(self) -> str:
        with self._lock:
            return (
                f"ProcessQueue(msg_count={self._msg_count}, msg_size={self._msg_size}, "
                f"consuming={len(self._consuming_map)}, dropped={self.dropped}, locked={self.locked})"
            )


def _parse_int(value: str | None) -> int | None:
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        return None


__all__ = [
    "DEFAULT_CONSUME_TIMEOUT_MS",
    "DEFAULT_EXPIRED_SCAN_MAX",
    "DEFAULT_LOCK_MAX_LIVE_MS",
    "DEFAULT_PULL_MAX_IDLE_MS",
    "Clock",
    "ProcessQueue",
    "ProcessQueueInfo",
    "system_clock_ms",
]
