"""Consumer statistics (RocketMQ's ``ConsumerStatsManager``).

Per consumer group and topic: pull RT and TPS, consume RT, consume OK / failed TPS and the failed
messages of the last hour. Rates and averages are over the last minute (or since the first sample,
when that is more recent); totals since creation are kept too. Thread-safe: consume threads and
the client's event loop record into it, anyone reads it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from rocketflow.protocol.bodies import ConsumeStatus

#: Seconds a rate or an average looks back.
MINUTE: Final = 60


class StatsKind(StrEnum):
    """What a `ConsumerStats` series counts (names of RocketMQ's stats items).

    A `StrEnum`: its members key the series, and hash as strings do (a plain Enum member's hash is a
    Python-level call, paid for every sample folded)."""

    PULL_RT = "PULL_RT"
    PULL_TPS = "PULL_TPS"
    CONSUME_RT = "CONSUME_RT"
    CONSUME_OK_TPS = "CONSUME_OK_TPS"
    CONSUME_FAILED_TPS = "CONSUME_FAILED_TPS"
    #: rocketflow: pulled records that could not be decoded, sent to the dead-letter queue / skipped
    UNDECODABLE_DEAD_LETTERED = "UNDECODABLE_DEAD_LETTERED"
    UNDECODABLE_SKIPPED = "UNDECODABLE_SKIPPED"


class _Buckets:
    """``size`` buckets of (sum, samples), one per time unit, reused round-robin."""

    __slots__ = ("_counts", "_stamps", "_sums", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._stamps = [-1] * size
        self._sums = [0.0] * size
        self._counts = [0] * size

    def add(self, unit: int, value: float, samples: int = 1) -> None:
        """Add ``samples`` samples summing to ``value`` in ``unit``."""
        index = unit % self.size
        if self._stamps[index] != unit:
            self._stamps[index] = unit
            self._sums[index] = 0.0
            self._counts[index] = 0
        self._sums[index] += value
        self._counts[index] += samples

    def totals(self, unit: int, span: int) -> tuple[float, int]:
        """Sum and sample count of the units ``unit - span + 1 .. unit``."""
        total = 0.0
        samples = 0
        oldest = unit - span
        for index, stamp in enumerate(self._stamps):
            if oldest < stamp <= unit:
                total += self._sums[index]
                samples += self._counts[index]
        return total, samples


class _Series:
    __slots__ = ("created", "hours", "minutes", "total", "total_samples")

    def __init__(self, now: float) -> None:
        self.created = now
        self.minutes = _Buckets(MINUTE + 1)   # per second
        self.hours = _Buckets(MINUTE + 1)     # per minute
        self.total = 0.0
        self.total_samples = 0

    def add(self, second: int, value: float, samples: int = 1) -> None:
        """Add ``samples`` samples summing to ``value``, all taken in ``second``."""
        self.minutes.add(second, value, samples)
        self.hours.add(second // 60, value, samples)
        self.total += value
        self.total_samples += samples

    def last_minute(self, now: float) -> tuple[float, int, float]:
        """(sum, samples, seconds covered) of the last minute."""
        second = int(now)
        total, samples = self.minutes.totals(second, MINUTE)
        covered = min(float(MINUTE), max(1.0, now - self.created))
        return total, samples, covered

    def last_hour_sum(self, now: float) -> float:
        return self.hours.totals(int(now) // 60, MINUTE)[0]


@dataclass(frozen=True, slots=True)
class ConsumeTotals:
    """Counts since the statistics were created, for one group and topic: pulled messages and the pulls
    that brought them, messages consumed OK / failed, listener calls, and pulled records that could not
    be decoded (sent to the dead-letter queue, or skipped when that was not possible)."""

    pulled_msgs: int = 0
    pulls: int = 0
    consume_ok_msgs: int = 0
    consume_failed_msgs: int = 0
    consume_calls: int = 0
    undecodable_dead_lettered: int = 0
    undecodable_skipped: int = 0


class ConsumerStats:
    """Sliding-window statistics keyed by (group, topic).

    Recording only appends to a deque (atomic, no lock: consume threads never queue behind each
    other here); samples are folded into the windows by readers, or by a writer once many piled up.
    Folding sums the samples of each series and second first, so a window is touched once per
    second and series, not once per sample.
    """

    #: Fold pending samples once this many are waiting. A writer that folds, often the event loop,
    #: holds up its own work while it does: a small batch keeps each fold short for the same total work.
    FOLD_THRESHOLD: Final = 256

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock if clock is not None else time.monotonic
        self._lock = threading.Lock()
        self._series: dict[tuple[StatsKind, str, str], _Series] = {}
        self._pending: deque[tuple[StatsKind, str, str, float, float]] = deque()
        #: (group, topic, time, consume RT in ms summed over the calls, messages OK, messages failed, calls)
        self._pending_consumed: deque[tuple[str, str, float, float, int, int, int]] = deque()

    def _add(self, kind: StatsKind, group: str, topic: str, value: float) -> None:
        pending = self._pending
        pending.append((kind, group, topic, self._clock(), value))
        if len(pending) >= self.FOLD_THRESHOLD:
            self._fold_by_writer()

    def _fold_by_writer(self) -> None:
        if self._lock.acquire(blocking=False):
            try:
                self._fold()
            finally:
                self._lock.release()

    def _fold(self) -> None:
        # caller holds self._lock
        # (kind, group, topic, second) -> [sum, samples, time of the first sample]
        sums: dict[tuple[StatsKind, str, str, int], list[float]] = {}
        pending = self._pending
        popleft = pending.popleft
        while pending:
            try:
                kind, group, topic, at, value = popleft()
            except IndexError:
                break
            key = (kind, group, topic, int(at))
            slot = sums.get(key)
            if slot is None:
                sums[key] = [value, 1, at]
            else:
                slot[0] += value
                slot[1] += 1
        consumed = self._pending_consumed
        popleft_consumed = consumed.popleft
        rt_kind, ok_kind, failed_kind = StatsKind.CONSUME_RT, StatsKind.CONSUME_OK_TPS, StatsKind.CONSUME_FAILED_TPS
        while consumed:
            try:
                group, topic, at, rt, ok, failed, calls = popleft_consumed()
            except IndexError:
                break
            second = int(at)
            for key, value, count in (((rt_kind, group, topic, second), rt, calls),
                                      ((ok_kind, group, topic, second), ok, 1),
                                      ((failed_kind, group, topic, second), failed, 1)):
                slot = sums.get(key)
                if slot is None:
                    sums[key] = [value, count, at]
                else:
                    slot[0] += value
                    slot[1] += count
        series_table = self._series
        for (kind, group, topic, second), (total, samples, first_at) in sums.items():
            series_key = (kind, group, topic)
            series = series_table.get(series_key)
            if series is None:
                series = series_table[series_key] = _Series(first_at)
            series.add(second, total, int(samples))

    # ------------------------------------------------------------------ recording

    def inc_pull_rt(self, group: str, topic: str, rt_ms: float) -> None:
        self._add(StatsKind.PULL_RT, group, topic, rt_ms)

    def inc_pull_tps(self, group: str, topic: str, msgs: int) -> None:
        self._add(StatsKind.PULL_TPS, group, topic, msgs)

    def inc_consume_rt(self, group: str, topic: str, rt_ms: float) -> None:
        self._add(StatsKind.CONSUME_RT, group, topic, rt_ms)

    def inc_consume_ok_tps(self, group: str, topic: str, msgs: int) -> None:
        self._add(StatsKind.CONSUME_OK_TPS, group, topic, msgs)

    def inc_consume_failed_tps(self, group: str, topic: str, msgs: int) -> None:
        self._add(StatsKind.CONSUME_FAILED_TPS, group, topic, msgs)

    def inc_undecodable(self, group: str, topic: str, *, dead_lettered: bool) -> None:
        """One pulled record that could not be decoded: sent to the dead-letter queue, or skipped."""
        self._add(StatsKind.UNDECODABLE_DEAD_LETTERED if dead_lettered else StatsKind.UNDECODABLE_SKIPPED,
                  group, topic, 1)

    def inc_consumed(self, group: str, topic: str, rt_ms: float, ok_msgs: int, failed_msgs: int,
                     calls: int = 1) -> None:
        """``calls`` listener calls that took ``rt_ms`` in all: `inc_consume_rt` (one sample a call),
        `inc_consume_ok_tps` and `inc_consume_failed_tps` in one go."""
        pending = self._pending_consumed
        pending.append((group, topic, self._clock(), rt_ms, ok_msgs, failed_msgs, calls))
        if len(pending) >= self.FOLD_THRESHOLD:
            self._fold_by_writer()

    # ------------------------------------------------------------------ reading

    def _minute(self, kind: StatsKind, group: str, topic: str, now: float) -> tuple[float, int, float]:
        series = self._series.get((kind, group, topic))
        if series is None:
            return 0.0, 0, 1.0
        return series.last_minute(now)

    def consume_status(self, group: str, topic: str) -> ConsumeStatus:
        """The last minute of ``group`` on ``topic`` (RTs in ms, rates per second)."""
        now = self._clock()
        with self._lock:
            self._fold()
            pull_rt, pull_rt_samples, _ = self._minute(StatsKind.PULL_RT, group, topic, now)
            pulled, _, pulled_span = self._minute(StatsKind.PULL_TPS, group, topic, now)
            consume_rt, consume_rt_samples, _ = self._minute(StatsKind.CONSUME_RT, group, topic, now)
            ok, _, ok_span = self._minute(StatsKind.CONSUME_OK_TPS, group, topic, now)
            failed, _, failed_span = self._minute(StatsKind.CONSUME_FAILED_TPS, group, topic, now)
            failed_series = self._series.get((StatsKind.CONSUME_FAILED_TPS, group, topic))
            failed_hour = failed_series.last_hour_sum(now) if failed_series is not None else 0.0
        return ConsumeStatus(
            pull_rt=pull_rt / pull_rt_samples if pull_rt_samples else 0.0,
            pull_tps=pulled / pulled_span,
            consume_rt=consume_rt / consume_rt_samples if consume_rt_samples else 0.0,
            consume_ok_tps=ok / ok_span,
            consume_failed_tps=failed / failed_span,
            consume_failed_msgs=int(failed_hour),
        )

    def totals(self, group: str, topic: str) -> ConsumeTotals:
        """Counts since creation for ``group`` on ``topic``."""
        with self._lock:
            self._fold()

            def get(kind: StatsKind) -> _Series | None:
                return self._series.get((kind, group, topic))

            pulled, ok, failed, consumed = (get(StatsKind.PULL_TPS), get(StatsKind.CONSUME_OK_TPS),
                                            get(StatsKind.CONSUME_FAILED_TPS), get(StatsKind.CONSUME_RT))
            dead_lettered, skipped = get(StatsKind.UNDECODABLE_DEAD_LETTERED), get(StatsKind.UNDECODABLE_SKIPPED)
            return ConsumeTotals(
                pulled_msgs=int(pulled.total) if pulled else 0,
                pulls=pulled.total_samples if pulled else 0,
                consume_ok_msgs=int(ok.total) if ok else 0,
                consume_failed_msgs=int(failed.total) if failed else 0,
                consume_calls=consumed.total_samples if consumed else 0,
                undecodable_dead_lettered=int(dead_lettered.total) if dead_lettered else 0,
                undecodable_skipped=int(skipped.total) if skipped else 0,
            )

    def topics(self, group: str) -> list[str]:
        """Topics with any sample for ``group``."""
        with self._lock:
            self._fold()
            return sorted({topic for _, name, topic in self._series if name == group})


__all__ = ["MINUTE", "ConsumeTotals", "ConsumerStats", "StatsKind"]
