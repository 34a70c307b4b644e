"""What a demo run takes and gives: `DemoSettings`, `DemoResult`, the `Sample` of its counters, `DemoError`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from rocketflow.errors import RocketflowError

#: Orders of a default run: about a minute on 2 cores, Spark's start included.
DEFAULT_ORDERS: Final = 5000


class DemoError(RocketflowError, ValueError):
    """Bad demo settings or an unusable environment, with what to change."""


@dataclass(slots=True, frozen=True)
class DemoSettings:
    """Everything `run_demo` takes (the CLI's flags)."""

    orders: int = DEFAULT_ORDERS
    queues: int = 4
    producer_threads: int = 4
    open_orders: int = 32
    cancel_ratio: float = 0.2
    rate: float = 0.0
    trigger_seconds: float = 1.0
    max_per_batch: int = 20_000
    timeout: float = 600.0
    namesrv: str | None = None
    output: Path | None = None
    spark: bool = True
    seed: int = 7
    #: serve ``rocketflow console`` on this port beside the pipeline (None: no console; 0: a free port)
    console_port: int | None = None

    def __post_init__(self) -> None:
        checks: list[tuple[str, object, float, float]] = [
            ("orders", self.orders, 1, 10_000_000), ("queues", self.queues, 1, 1024),
            ("producer_threads", self.producer_threads, 1, 256), ("open_orders", self.open_orders, 1, 100_000),
            ("cancel_ratio", self.cancel_ratio, 0.0, 1.0), ("rate", self.rate, 0.0, 10_000_000.0),
            ("trigger_seconds", self.trigger_seconds, 0.0, 3600.0), ("max_per_batch", self.max_per_batch, 1, 1 << 31),
            ("timeout", self.timeout, 1.0, 86_400.0),
        ]
        for name, value, low, high in checks:
            if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
                raise DemoError(f"{name} must be a number in {low}..{high}, got {value!r}")


@dataclass(slots=True, frozen=True)
class Sample:
    """The run's counters at one moment (seconds since the producer started)."""

    at: float
    sent: int
    consumed: int
    spark_rows: int
    stored: int
    spark_end: int


@dataclass(slots=True)
class DemoResult:
    """What `run_demo` found; ``ok`` decides the exit code."""

    topic: str
    output: Path
    orders: int
    expected_messages: int
    expected_revenue_cents: int
    sent: int = 0
    send_failures: int = 0
    consumed: int = 0
    duplicates: int = 0
    violations: int = 0
    wrong_final_states: int = 0
    consumer_group_lag: int | None = None
    spark_rows: int | None = None
    spark_distinct: int | None = None
    spark_revenue_cents: int | None = None
    spark_batches: int | None = None
    spark_queue_lag: int | None = None
    spark_group_lag_from_source: int | None = None
    spark_group_lag: int | None = None
    producer_rate: float = 0.0
    consumer_rate: float = 0.0
    spark_rate: float = 0.0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

