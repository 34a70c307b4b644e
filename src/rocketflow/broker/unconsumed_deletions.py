"""`UnconsumedDeletions`: messages that retention deleted before the consumer groups of their queues
consumed them.

Retention deletes by age, and past ``diskSpaceCleanForciblyRatio`` by disk use alone, whatever the
consumers' progress (RocketMQ does the same). That is kept, but the loss is said: a WARNING per
retention pass naming each group, topic and count, counters in GET_BROKER_RUNTIME_INFO (so `rocketflow
admin broker status` shows them) and a Prometheus counter by group and topic.

A group's loss on a queue is the part of the deleted range at or above its committed offset; groups
that never committed an offset on the queue are not counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from rocketflow.store.clean_service import QueueTrim

logger = logging.getLogger(__name__)

#: () -> "topic@group" -> queue id -> committed offset (a copy is taken of what it returns)
OffsetTable = Callable[[], Mapping[str, Mapping[int, int]]]


def _copy(table: Mapping[str, Mapping[int, int]]) -> list[tuple[str, dict[int, int]]]:
    # the loop thread changes the table while retention runs in its own thread; copies made in one C call
    # each are consistent, and a change of size midway is retried
    for _ in range(10):
        try:
            return [(key, dict(queues)) for key, queues in list(table.items())]
        except RuntimeError:
            continue
    return []


class UnconsumedDeletions:
    """Counts, per consumer group and topic, the messages deleted before the group consumed them."""

    def __init__(self, offsets: OffsetTable) -> None:
        self._offsets = offsets
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        #: messages deleted unconsumed since the broker started, all groups together
        self.total = 0
        #: what the last pass that deleted unconsumed messages said (time, reason, groups), or ""
        self.last = ""

    def counts(self) -> dict[tuple[str, str], int]:
        """(group, topic) -> messages deleted before the group consumed them, since the broker started."""
        with self._lock:
            return dict(self._counts)

    def on_trimmed(self, trims: list[QueueTrim], reason: str) -> dict[tuple[str, str], int]:
        """A retention pass moved these queues' minimum offsets: count and log what groups had not consumed."""
        by_queue = {(trim.topic, trim.queue_id): trim for trim in trims}
        lost: dict[tuple[str, str], int] = {}
        if by_queue:
            for key, queues in _copy(self._offsets()):
                topic, separator, group = key.rpartition("@")
                if not separator:
                    continue
                for queue_id, committed in queues.items():
                    trim = by_queue.get((topic, queue_id))
                    if trim is None or committed < 0 or committed >= trim.new_min:
                        continue
                    count = trim.new_min - max(committed, trim.old_min)
                    if count > 0:
                        lost[(group, topic)] = lost.get((group, topic), 0) + count
        if not lost:
            return lost
        total = sum(lost.values())
        detail = "; ".join(f"group {group} on {topic}: {count}" for (group, topic), count in sorted(lost.items()))
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with self._lock:
            for group_topic, count in lost.items():
                self._counts[group_topic] = self._counts.get(group_topic, 0) + count
            self.total += total
            self.last = f"{stamp} {reason}: {total} ({detail})"
        logger.warning("retention (%s) deleted %d messages before their consumer groups consumed them: %s",
                       reason, total, detail)
        return lost


__all__ = ["UnconsumedDeletions"]
