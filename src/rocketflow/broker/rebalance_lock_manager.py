"""`RebalanceLockManager`: broker-side queue locks of orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).

``group -> queue -> (client id, last update)`` behind one mutex. A lock held by a client is
refreshed when that client locks again, taken over once it is older than the max live time,
and released only by its owner.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rocketflow.protocol.message import MessageQueue

logger = logging.getLogger(__name__)

#: ``rocketmq.broker.rebalance.lockMaxLiveTime``
DEFAULT_LOCK_MAX_LIVE_TIME_MS = 60_000


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update_timestamp: int

    def is_expired(self, now_ms: int, max_live_ms: int) -> bool:
        return now_ms - self.last_update_timestamp > max_live_ms

    def is_locked_by(self, client_id: str, now_ms: int, max_live_ms: int) -> bool:
        return self.client_id == client_id and not self.is_expired(now_ms, max_live_ms)


def _some(items: Sequence[object], shown: int = 4) -> str:
    """The first few of ``items``, and how many more."""
    text = ", ".join(map(str, items[:shown]))
    return text if len(items) <= shown else f"{text} and {len(items) - shown} more"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class RebalanceLockManager:
    """Try-lock / unlock batches of queues for (group, client id)."""

    def __init__(self, max_live_time_ms: int = DEFAULT_LOCK_MAX_LIVE_TIME_MS,
                 clock_ms: Callable[[], int] = _now_ms) -> None:
        self.max_live_time_ms = max_live_time_ms
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def try_lock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """The subset of ``queues`` held by ``client_id`` after this call."""
        now = self._clock_ms()
        max_live = self.max_live_time_ms
        locked: set[MessageQueue] = set()
        not_locked: list[MessageQueue] = []
        group_table = self._table.get(group, {})
        for queue in queues:
            entry = group_table.get(queue)
            if entry is not None and entry.is_locked_by(client_id, now, max_live):
                entry.last_update_timestamp = now
                locked.add(queue)
            else:
                not_locked.append(queue)
        if not not_locked:
            return locked
        # one log line a batch, naming a few queues: a batch may hold thousands
        newly: list[MessageQueue] = []
        taken_over: list[tuple[MessageQueue, str]] = []
        with self._lock:
            group_table = self._table.setdefault(group, {})
            for queue in not_locked:
                entry = group_table.get(queue)
                if entry is None:
                    group_table[queue] = LockEntry(client_id, now)
                    locked.add(queue)
                    newly.append(queue)
                elif entry.is_locked_by(client_id, now, max_live):
                    entry.last_update_timestamp = now
                    locked.add(queue)
                elif entry.is_expired(now, max_live):
                    taken_over.append((queue, entry.client_id))
                    entry.client_id = client_id
                    entry.last_update_timestamp = now
                    locked.add(queue)
        if newly:
            logger.info("%s: %d queues locked by %s: %s", group, len(newly), client_id, _some(newly))
        if taken_over:
            logger.warning("%s: %d expired locks taken over by %s: %s", group, len(taken_over), client_id,
                           _some([f"{queue} (was {owner})" for queue, owner in taken_over]))
        return locked

    def unlock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues held by ``client_id``; locks of other clients are left alone."""
        unlocked: list[MessageQueue] = []
        refused: list[str] = []
        with self._lock:
            group_table = self._table.get(group)
            if group_table is None:
                return
            for queue in queues:
                entry = group_table.get(queue)
                if entry is None:
                    continue
                if entry.client_id == client_id:
                    del group_table[queue]
                    unlocked.append(queue)
                else:
                    refused.append(f"{queue} (locked by {entry.client_id})")
            if not group_table:
                del self._table[group]
        if unlocked:
            logger.info("%s: %d queues unlocked by %s: %s", group, len(unlocked), client_id, _some(unlocked))
        if refused:
            logger.warning("%s: %s cannot unlock %d queues locked by others: %s", group, client_id, len(refused),
                           _some(refused))

    def entry_counts(self) -> dict[str, int]:
        """group -> lock entries held in the table (expired ones included until taken over or released)."""
        with self._lock:
            return {group: len(entries) for group, entries in self._table.items()}

    def owners(self, group: str) -> dict[MessageQueue, str]:
        """Current (unexpired) lock owners of a group's queues."""
        now = self._clock_ms()
        return {
            queue: entry.client_id
            for queue, entry in self._table.get(group, {}).items()
            if not entry.is_expired(now, self.max_live_time_ms)
        }


__all__ = ["DEFAULT_LOCK_MAX_LIVE_TIME_MS", "LockEntry", "RebalanceLockManager"]
