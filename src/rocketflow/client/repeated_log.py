"""`RepeatedLog`: log a failure that repeats once per interval, with how many times it happened since."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass


@dataclass(slots=True)
class _Seen:
    logged_at: float
    since: int = 0


class RepeatedLog:
    """Logs the first failure of a kind at once, then at most once per ``interval`` seconds, saying how
    many failures of that kind the quiet time held. Kinds are any hashable key (e.g. a response code and
    a broker address). Not thread-safe: use it from one thread (the client's loop)."""

    def __init__(self, logger: logging.Logger, interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval = interval
        self._clock = clock
        self._seen: dict[Hashable, _Seen] = {}

    def log(self, level: int, kind: Hashable, message: str, *args: object) -> bool:
        """Log ``message % args`` unless a failure of ``kind`` was logged less than ``interval`` ago; True if
        it was logged now."""
        now = self._clock()
        seen = self._seen.get(kind)
        if seen is not None and now - seen.logged_at < self.interval:
            seen.since += 1
            return False
        if seen is not None and seen.since:
            message += f" ({seen.since} more like it in the last {now - seen.logged_at:.0f}s)"
        self._seen[kind] = _Seen(now)
        self.logger.log(level, message, *args)
        return True

    def clear(self, kind: Hashable) -> None:
        """The failure of ``kind`` is over: the next one is logged at once (the count is dropped)."""
        self._seen.pop(kind, None)

    def __len__(self) -> int:
        return len(self._seen)


__all__ = ["RepeatedLog"]
