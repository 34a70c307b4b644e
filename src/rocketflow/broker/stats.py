"""`BrokerStats`: the broker's put and get counters and their recent rates."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class BrokerStats:
    """Put/get counters and their recent rates (for GET_BROKER_RUNTIME_INFO and GET_CONSUME_STATS)."""

    WINDOW_SECONDS = 10

    def __init__(self) -> None:
        self.put_total = 0
        self.put_bytes = 0
        self.put_failures = 0
        self.get_total = 0
        self.get_bytes = 0
        self.group_get_total: dict[str, int] = {}
        self._samples: deque[tuple[float, int, int, dict[str, int]]] = deque(maxlen=self.WINDOW_SECONDS + 1)
        self.boot_timestamp = time.time_ns() // 1_000_000

    def put_messages(self, count: int, size: int) -> None:
        self.put_total += count
        self.put_bytes += size

    def get_messages(self, count: int, size: int, group: str | None = None) -> None:
        self.get_total += count
        self.get_bytes += size
        if group is not None:
            self.group_get_total[group] = self.group_get_total.get(group, 0) + count

    def sample(self) -> None:
        self._samples.append((time.monotonic(), self.put_total, self.get_total, dict(self.group_get_total)))

    def _rate(self, pick: Callable[[tuple[float, int, int, dict[str, int]]], int]) -> float:
        if len(self._samples) < 2:
            return 0.0
        first, last = self._samples[0], self._samples[-1]
        elapsed = last[0] - first[0]
        return (pick(last) - pick(first)) / elapsed if elapsed > 0 else 0.0

    def put_tps(self) -> float:
        return self._rate(lambda sample: sample[1])

    def get_tps(self) -> float:
        return self._rate(lambda sample: sample[2])

    def group_get_tps(self, group: str) -> float:
        return self._rate(lambda sample: sample[3].get(group, 0))


__all__ = ["BrokerStats"]
