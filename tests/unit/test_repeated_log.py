"""`RepeatedLog`: the first failure of a kind at once, then one line per interval with a count."""

from __future__ import annotations

import logging

import pytest

from rocketflow.client.repeated_log import RepeatedLog


def test_repeats_are_counted_and_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    limiter = RepeatedLog(logging.getLogger("test.repeated"), 30.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "test.repeated"):
        assert limiter.log(logging.WARNING, "a", "pull failed: %s", "down")
        for _ in range(5):
            now[0] += 1
            assert not limiter.log(logging.WARNING, "a", "pull failed: %s", "down")
        assert limiter.log(logging.WARNING, "b", "other kind")  # kinds are apart
        now[0] += 30
        assert limiter.log(logging.WARNING, "a", "pull failed: %s", "down")
        now[0] += 31
        assert limiter.log(logging.WARNING, "a", "pull failed: %s", "down")  # nothing in between: no count
    lines = [record.getMessage() for record in caplog.records]
    assert lines == ["pull failed: down", "other kind", "pull failed: down (5 more like it in the last 35s)",
                     "pull failed: down"]


def test_clear_logs_the_next_failure_at_once() -> None:
    now = [0.0]
    limiter = RepeatedLog(logging.getLogger("test.repeated"), 30.0, clock=lambda: now[0])
    assert limiter.log(logging.INFO, "a", "x")
    assert not limiter.log(logging.INFO, "a", "x")
    limiter.clear("a")
    assert limiter.log(logging.INFO, "a", "x")
    assert len(limiter) == 1
