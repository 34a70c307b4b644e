"""The summary tables printed after a run: the figures by stage and Spark's orders per minute."""

from __future__ import annotations

from typing import Any, Final

from rich import box
from rich.table import Table

from rocketflow.cli.demo.settings import DemoResult


def money(cents: int | None) -> str:
    return "-" if cents is None else f"{cents / 100:,.2f}"



#: Below this console width the summary tables take a compact layout (an 80-column terminal fits).
COMPACT_WIDTH: Final = 100


def summary_table(result: DemoResult, width: int) -> Table:
    """The run's figures by stage; measures wrap rather than being cut on a narrow console."""
    def rate(value: float) -> str:
        return f"{value:,.0f} msg/s"

    def count(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    compact = width < COMPACT_WIDTH
    table = Table(title=f"rocketflow demo: {result.orders:,} orders on {result.topic} in {result.seconds:.1f} s",
                  box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD)
    table.add_column("stage", overflow="fold")
    table.add_column("measure", overflow="fold")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_row("producer", "messages sent / expected", f"{result.sent:,} / {result.expected_messages:,}")
    table.add_row("", "send failures", count(result.send_failures))
    table.add_row("", "throughput", rate(result.producer_rate))
    table.add_row("orderly consumer" if not compact else "consumer", "messages consumed", count(result.consumed))
    table.add_row("", "state machine violations", count(result.violations))
    table.add_row("", "duplicates", count(result.duplicates))
    table.add_row("", "orders not in their planned final state", count(result.wrong_final_states))
    table.add_row("", "group lag at the broker", count(result.consumer_group_lag))
    table.add_row("", "throughput", rate(result.consumer_rate))
    if result.spark_rows is not None:
        table.add_row("Spark", "rows written (distinct message ids)",
                      f"{result.spark_rows:,} ({count(result.spark_distinct)})")
        table.add_row("", "micro-batches", count(result.spark_batches))
        table.add_row("", "revenue (expected)",
                      f"{money(result.spark_revenue_cents)} ({money(result.expected_revenue_cents)})")
        table.add_row("", "lag: end offsets vs broker max offsets", count(result.spark_queue_lag))
        table.add_row("", "group lag at the broker (committed by the progress listener)",
                      count(result.spark_group_lag_from_source))
        if result.spark_group_lag != result.spark_group_lag_from_source:
            table.add_row("", "group lag at the broker (after a final commit)", count(result.spark_group_lag))
        table.add_row("", "throughput (rows / time in batches)", rate(result.spark_rate))
    return table


#: The per-minute table's state columns: (key, header, compact header).
_STATE_HEADERS: Final = (("created", "created", "new"), ("paid", "paid", "paid"), ("shipped", "shipped", "ship"),
                         ("completed", "completed", "done"), ("cancelled", "cancelled", "cancel"))


def per_minute_table(minutes: list[dict[str, Any]], width: int, limit: int = 10) -> Table:
    """Spark's orders per minute; on a narrow console short headers and light borders, nothing cut."""
    compact = width < COMPACT_WIDTH
    table = Table(title="Spark: orders per minute (event time)", box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
                  caption="new, ship, done: created, shipped, completed" if compact else None)
    headers = ["UTC" if compact else "minute (UTC)", "events", "revenue",
               *(short if compact else long for _key, long, short in _STATE_HEADERS)]
    for header in headers:
        table.add_column(header, justify="right", no_wrap=True)
    for row in minutes[:limit]:
        table.add_row(row["minute"].strftime("%H:%M"), f"{row['events']:,}", f"{row['revenue']:,}",
                      *(f"{row[key]:,}" for key, _long, _short in _STATE_HEADERS))
    return table

