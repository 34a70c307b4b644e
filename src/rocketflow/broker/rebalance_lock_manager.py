"""`RebalanceLockManager`: broker-side queue locks of orderly consumers (PROTOCOL.md 5.3, CONSUMER.md 7).

``group -> queue -> (client id, last update)`` behind one mutex. A lock held by a client is
refreshed when that client locks again, taken over once it is older than the max live time,
and released only by its owner.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rocketflow.protocol.message import MessageQueue

logger = logging.getLogger("rocketflow.broker.locks")

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

    def is_locked(self, group: str, queue: MessageQueue, client_id: str) -> bool:
        entry = self._table.get(group, {}).get(queue)
        return entry is not None and entry.is_locked_by(client_id, self._clock_ms(), self.max_live_time_ms)

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
        with self._lock:
            group_table = self._table.setdefault(group, {})
            for queue in not_locked:
                entry = group_table.get(queue)
                if entry is None:
                    group_table[queue] = LockEntry(client_id, now)
                    locked.add(queue)
                    logger.info("%s: %s locked by %s", group, queue, client_id)
                elif entry.is_locked_by(client_id, now, max_live):
                    entry.last_update_timestamp = now
                    locked.add(queue)
                elif entry.is_expired(now, max_live):
                    logger.warning("%s: %s lock of %s expired, now locked by %s", group, queue, entry.client_id,
                                   client_id)
                    entry.client_id = client_id
                    entry.last_update_timestamp = now
                    locked.add(queue)
                else:
                    logger.debug("%s: %s stays locked by %s (asked by %s)", group, queue, entry.client_id,
                                 client_id)
        return locked

    def unlock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues held by ``client_id``; locks of other clients are left alone."""
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
                    logger.info("%s: %s unlocked by %s", group, queue, client_id)
                else:
                    logger.warning("%s: %s is locked by %s, %s cannot unlock it", group, queue, entry.client_id,
                                   client_id)
            if not group_table:
                del self._table[group]

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
