"""`rocketflow demo`: the main job, end to end on the embedded default.

One run, on a fresh topic of a `DevCluster` started in this process (temporary store) or of the
cluster behind ``--namesrv``:

1. producer threads send N orders' events, each order ``create -> pay -> ship -> complete`` or
   cancelled after ``create`` or ``pay``, sharded by order id (one order, one queue, in order);
   JSON bodies with amount, state, step and timestamp; keys = order id, tags = state;
2. an orderly push consumer (its own group) checks every order's state machine and counts
   violations and duplicates;
3. a Spark Structured Streaming job (`rocketflow.cli.demo_spark`) reads the topic through the
   ``rocketmq`` source, writes Parquet (events, revenue and state counts per minute, per-queue lag)
   and commits its progress to its own group.

A progress bar shows sent / consumed / Spark rows; at the end a summary table, ``summary.json`` and
a PNG of throughput and lag over time are written next to the Parquet output. The exit code is 1
when an order broke its state machine, a message was lost, or the revenue does not add up.

The modules: `.settings` (settings, results, samples), `.orders` (the order plan, its state machine,
the producer threads and the orderly checker), `.broker_view` (the run's admin calls), `.run`
(`run_demo`, `demo_main`), `.tables` (the summary tables) and `.plot` (the PNG); the Spark job is
`rocketflow.cli.demo_spark`.
"""

from __future__ import annotations

from rocketflow.cli.demo.broker_view import BrokerView
from rocketflow.cli.demo.orders import ALLOWED_NEXT, OrderChecker, OrderProducer, OrderState, PlannedOrder, plan_orders
from rocketflow.cli.demo.orders import Meter as Meter
from rocketflow.cli.demo.plot import MAX_QUEUE_PANELS as MAX_QUEUE_PANELS
from rocketflow.cli.demo.plot import write_plot
from rocketflow.cli.demo.run import STALL_TIMEOUT as STALL_TIMEOUT
from rocketflow.cli.demo.run import configure_logging as configure_logging
from rocketflow.cli.demo.run import demo_main, run_demo
from rocketflow.cli.demo.settings import DEFAULT_ORDERS, DemoError, DemoResult, DemoSettings
from rocketflow.cli.demo.settings import Sample as Sample
from rocketflow.cli.demo.tables import COMPACT_WIDTH as COMPACT_WIDTH
from rocketflow.cli.demo.tables import per_minute_table as per_minute_table
from rocketflow.cli.demo.tables import summary_table as summary_table

__all__ = [
    "ALLOWED_NEXT",
    "DEFAULT_ORDERS",
    "BrokerView",
    "DemoError",
    "DemoResult",
    "DemoSettings",
    "OrderChecker",
    "OrderProducer",
    "OrderState",
    "PlannedOrder",
    "demo_main",
    "plan_orders",
    "run_demo",
    "write_plot",
]
