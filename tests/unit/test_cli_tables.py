"""The CLI's tables fit an 80-column terminal: a compact layout below a width, nothing cut."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from rocketflow.cli.admin import _progress_table
from rocketflow.cli.demo import DemoResult, per_minute_table, summary_table
from rocketflow.client.admin import ConsumerProgress, QueueProgress


def _render(table: Table, width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(table)
    return console.export_text().splitlines()


def _result() -> DemoResult:
    return DemoResult(topic="DemoOrders_5f1c2a9e", output=Path("/tmp"), orders=5000, expected_messages=18_432,
                      expected_revenue_cents=123_456_789, sent=18_432, consumed=18_432, consumer_group_lag=0,
                      spark_rows=18_432, spark_distinct=18_432, spark_revenue_cents=123_456_789, spark_batches=12,
                      spark_queue_lag=0, spark_group_lag_from_source=0, spark_group_lag=0, producer_rate=1234.5,
                      consumer_rate=2345.0, spark_rate=3456.0, seconds=61.2)


@pytest.mark.parametrize("width", [80, 100, 160])
def test_demo_summary_and_per_minute_tables_fit(width: int) -> None:
    minutes = [{"minute": datetime(2026, 11, 27, 20, index, tzinfo=UTC), "events": 12_345,
                "revenue": Decimal("1234567.89"), "created": 5000, "paid": 4000, "shipped": 3500, "completed": 3000,
                "cancelled": 1000} for index in range(3)]
    for table in (summary_table(_result(), width), per_minute_table(minutes, width)):
        lines = _render(table, width)
        assert max(len(line) for line in lines) <= width
        assert not any("…" in line for line in lines), lines
    text = "\n".join(_render(per_minute_table(minutes, width), width))
    assert text.count("1,234,567.89") == 3 and text.count("1,000") == 3     # revenue and the last state column


@pytest.mark.parametrize("width", [80, 200])
def test_consumer_progress_rows_stay_on_one_line(width: int) -> None:
    now = int(time.time() * 1000)
    progress = ConsumerProgress("example-orderly-consumer", [
        QueueProgress("ExampleOrderly", "broker-a", queue_id, 20_000 + queue_id, 19_000, "127.0.0.1@12345#81234567",
                      now) for queue_id in range(4)], 1234.5)
    lines = _render(_progress_table(progress, width), width)
    assert max(len(line) for line in lines) <= width
    rows = [line for line in lines if "19000" in line]
    assert len(rows) == 4                                     # one line a queue, not four
    assert all(str(1000 + queue_id) in row for queue_id, row in enumerate(rows))
