"""`ConsumerStats`: per group/topic rates and averages over the last minute, hourly failures, totals."""

from __future__ import annotations

import pytest

from rocketflow.client.consumer.stats import ConsumerStats


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rates_and_averages_over_the_last_minute() -> None:
    clock = Clock()
    stats = ConsumerStats(clock)
    for _ in range(10):
        stats.inc_consume_ok_tps("g", "T", 5)
        stats.inc_consume_rt("g", "T", 2.0)
        stats.inc_pull_tps("g", "T", 5)
        stats.inc_pull_rt("g", "T", 10.0)
        clock.now += 1
    stats.inc_consume_failed_tps("g", "T", 3)
    status = stats.consume_status("g", "T")
    assert status.consume_ok_tps == pytest.approx(50 / 10)      # 50 messages over the 10 s seen so far
    assert status.pull_tps == pytest.approx(5.0)
    assert status.consume_rt == pytest.approx(2.0)
    assert status.pull_rt == pytest.approx(10.0)
    assert status.consume_failed_tps == pytest.approx(3.0)      # one sample, one second of history
    assert status.consume_failed_msgs == 3
    clock.now += 120                                            # the minute window moves on
    later = stats.consume_status("g", "T")
    assert later.consume_ok_tps == 0 and later.consume_rt == 0 and later.pull_rt == 0
    assert later.consume_failed_msgs == 3                       # still within the hour
    clock.now += 3600
    assert stats.consume_status("g", "T").consume_failed_msgs == 0


def test_full_minute_window_and_totals() -> None:
    clock = Clock()
    stats = ConsumerStats(clock)
    for _ in range(120):
        stats.inc_consume_ok_tps("g", "T", 2)
        clock.now += 1
    assert stats.consume_status("g", "T").consume_ok_tps == pytest.approx(2.0, rel=0.05)
    totals = stats.totals("g", "T")
    assert totals.consume_ok_msgs == 240 and totals.pulled_msgs == 0
    assert stats.totals("g", "other").consume_ok_msgs == 0
    assert stats.topics("g") == ["T"] and stats.topics("h") == []


def test_groups_and_topics_are_separate() -> None:
    stats = ConsumerStats(Clock())
    stats.inc_consume_ok_tps("g1", "T", 4)
    stats.inc_consume_ok_tps("g2", "T", 1)
    assert stats.totals("g1", "T").consume_ok_msgs == 4
    assert stats.totals("g2", "T").consume_ok_msgs == 1
    assert stats.consume_status("g3", "T").consume_ok_tps == 0


def test_inc_consumed_matches_the_three_separate_recordings_across_folds() -> None:
    """`inc_consumed` (one call per listener run) folds into the same windows as the three calls it replaces,
    also when many samples of one second are folded together by a writer."""
    clock_a, clock_b = Clock(), Clock()
    combined, separate = ConsumerStats(clock_a), ConsumerStats(clock_b)
    calls = ConsumerStats.FOLD_THRESHOLD * 3 + 7          # several writer-side folds plus a remainder
    for index in range(calls):
        ok, failed, rt = (index % 5), (index % 3 == 0), 1.0 + index % 4
        combined.inc_consumed("g", "T", rt, ok, int(failed))
        separate.inc_consume_rt("g", "T", rt)
        separate.inc_consume_ok_tps("g", "T", ok)
        separate.inc_consume_failed_tps("g", "T", int(failed))
        if index % 97 == 0:
            clock_a.now += 0.5
            clock_b.now += 0.5
    for clock in (clock_a, clock_b):
        clock.now += 1
    got, want = combined.consume_status("g", "T"), separate.consume_status("g", "T")
    assert got.consume_rt == pytest.approx(want.consume_rt)
    assert got.consume_ok_tps == pytest.approx(want.consume_ok_tps)
    assert got.consume_failed_tps == pytest.approx(want.consume_failed_tps)
    assert got.consume_failed_msgs == want.consume_failed_msgs == sum(1 for i in range(calls) if i % 3 == 0)
    assert combined.totals("g", "T").consume_ok_msgs == sum(i % 5 for i in range(calls))
    assert combined.totals("g", "T") == separate.totals("g", "T")
