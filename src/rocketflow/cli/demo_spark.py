"""The Spark half of `rocketflow demo`: a Structured Streaming job over the demo's order topic.

The job reads the topic with the ``rocketmq`` source (``group`` set, so its progress shows at the
broker), parses the JSON order events and, per micro-batch (``foreachBatch``, which runs in this
process):

* writes the parsed events to ``<output>/events/batch_id=<n>`` (overwritten if a batch is replayed);
* aggregates the batch per queue, minute and order state (events, revenue in cents, last offset);
* compares each queue's end offset with the broker's max offset at that moment: the lag.

`SparkPipeline.finish` merges the per-batch aggregates into ``orders_per_minute`` and writes the lag
samples to ``queue_lag`` (both Parquet), then re-reads the events to count rows, distinct message
ids and revenue. pyspark is imported only here, so the rest of the demo runs without it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

#: (broker name, queue id)
QueueKey = tuple[str, int]

#: The demo's order event body.
EVENT_SCHEMA_DDL = "order_id STRING, state STRING, step INT, amount_cents BIGINT, refund_cents BIGINT, ts BIGINT"

#: Output columns of ``orders_per_minute`` counting each order state.
STATE_COLUMNS = {"create": "created", "pay": "paid", "ship": "shipped", "complete": "completed", "cancel": "cancelled"}


@dataclass(slots=True, frozen=True)
class LagSample:
    """One queue's lag right after a micro-batch."""

    batch_id: int
    at: float
    broker: str
    queue_id: int
    end_offset: int
    broker_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.end_offset)


@dataclass(slots=True, frozen=True)
class BatchRecord:
    """One micro-batch as the driver saw it (epoch seconds)."""

    batch_id: int
    started: float
    finished: float
    rows: int


@dataclass(slots=True, frozen=True)
class _Partial:
    broker: str
    queue_id: int
    minute: int
    state: str
    events: int
    revenue_cents: int
    last_offset: int


@dataclass(slots=True, frozen=True)
class SparkTotals:
    """What the written Parquet holds at the end."""

    rows: int
    distinct_msg_ids: int
    revenue_cents: int
    per_minute_rows: int


#: The JVM's log configuration: errors only, without Spark's start-up banners.
_LOG4J2_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex{3}
"""


def local_session(work_dir: Path, app_name: str = "rocketflow-demo") -> Any:
    """A local[2] session with the ``rocketmq`` format registered (Python workers run this interpreter;
    the JVM logs errors only, configured by a file written to ``work_dir``)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from rocketflow.spark import register

    log_config = work_dir / "log4j2.properties"
    log_config.write_text(_LOG4J2_PROPERTIES)
    spark = (SparkSession.builder.master("local[2]").appName(app_name)
             .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log_config.as_uri()}")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "1g")
             .config("spark.sql.streaming.stopTimeout", "20s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def events_of(raw: Any) -> Any:
    """The order events of a frame with the source's columns (body parsed, revenue and event time added)."""
    from pyspark.sql import functions as F

    event = F.from_json(F.col("body").cast("string"), EVENT_SCHEMA_DDL)
    parsed = raw.select("broker", "queue_id", "queue_offset", "msg_id", "keys", "tags", "store_timestamp",
                        event.alias("event"))
    state = F.col("event.state")
    return parsed.select(
        "broker", "queue_id", "queue_offset", "msg_id", "keys", "tags", "store_timestamp",
        F.col("event.order_id").alias("order_id"), state.alias("state"), F.col("event.step").alias("step"),
        F.col("event.amount_cents").alias("amount_cents"),
        F.when(state == "pay", F.col("event.amount_cents"))
         .when(state == "cancel", -F.col("event.refund_cents")).otherwise(F.lit(0)).alias("revenue_cents"),
        # event time from the body, the broker's store time when the body has none
        F.coalesce(F.timestamp_millis(F.col("event.ts")), F.col("store_timestamp")).alias("event_time"),
    )


def _write_and_aggregate(events: Any, path: Path) -> list[Any]:
    """Write a batch of events as Parquet at ``path``; return its per queue, minute and state aggregates."""
    from pyspark.sql import functions as F

    events.persist()
    try:
        events.write.mode("overwrite").parquet(str(path))
        return list(events.groupBy("broker", "queue_id", F.date_trunc("minute", "event_time").alias("minute"), "state")
                    .agg(F.count(F.lit(1)).alias("events"), F.sum("revenue_cents").alias("revenue_cents"),
                         F.max("queue_offset").alias("last_offset"))
                    .select("broker", "queue_id", F.unix_timestamp("minute").alias("minute"), "state", "events",
                            "revenue_cents", "last_offset")
                    .collect())
    finally:
        events.unpersist()


class SparkPipeline:
    """The streaming job; `start` runs on a background thread, the counters are read from any thread."""

    def __init__(self, *, namesrv: str, topic: str, group: str, output: Path, trigger_seconds: float,
                 max_per_batch: int, broker_offsets: Callable[[], dict[QueueKey, int]],
                 warm_up_topic: str | None = None) -> None:
        """``warm_up_topic``: a topic holding a few messages, read once as a batch before the stream starts."""
        self.namesrv = namesrv
        self.topic = topic
        self.group = group
        self.output = output
        self.trigger_seconds = trigger_seconds
        self.max_per_batch = max_per_batch
        self._broker_offsets = broker_offsets
        self.warm_up_topic = warm_up_topic
        self._lock = threading.Lock()
        self._partials: dict[int, list[_Partial]] = {}
        self._batches: dict[int, BatchRecord] = {}
        self.end_offsets: dict[QueueKey, int] = {}
        self.lag_samples: list[LagSample] = []
        self.status = "starting Spark"
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.started_at: float | None = None
        self._spark: Any = None
        self._query: Any = None
        self._listener: Any = None
        self._work_dir = tempfile.mkdtemp(prefix="rocketflow-demo-spark-")

    # ------------------------------------------------------------------ lifecycle

    def start_in_background(self) -> threading.Thread:
        thread = threading.Thread(target=self._start, name="rocketflow-demo-spark", daemon=True)
        thread.start()
        return thread

    def _start(self) -> None:
        try:
            spark = local_session(Path(self._work_dir))
            self._spark = spark
            if self.warm_up_topic is not None:
                # One small batch read through the same steps first: the first Parquet write and
                # aggregation of a JVM, and the Python workers' imports and broker connections, are
                # slow, and would otherwise hold up the first micro-batch for many seconds.
                self.status = "warming up"
                sample = (spark.read.format("rocketmq").option("namesrv", self.namesrv)
                          .option("topic", self.warm_up_topic).load())
                _write_and_aggregate(events_of(sample), Path(self._work_dir) / "warm-up")
            from rocketflow.spark.progress import track_group_progress

            # every finished batch's end offsets go to the group at once (the source's commit lags a batch)
            self._listener = track_group_progress(spark, self.namesrv, self.group, topics=[self.topic])
            # the job reads body, keys and tags: the properties map stays out (includeProperties=true would
            # add it, for jobs that read user properties)
            raw = (spark.readStream.format("rocketmq").option("namesrv", self.namesrv).option("topic", self.topic)
                   .option("startingOffsets", "earliest").option("group", self.group)
                   .option("maxMessagesPerTrigger", str(self.max_per_batch)).load())
            self._query = (events_of(raw).writeStream.queryName("rocketflow_demo").foreachBatch(self._on_batch)
                           .option("checkpointLocation", str(self.output / "checkpoint"))
                           .trigger(processingTime=f"{self.trigger_seconds} seconds").start())
            self.started_at = time.time()
            self.status = "streaming"
        except BaseException as exc:  # reported by the demo's main loop
            self.error = exc
            self.status = "failed to start"
        finally:
            self.ready.set()

    def _on_batch(self, frame: Any, batch_id: int) -> None:
        started = time.time()
        groups = _write_and_aggregate(frame, self.output / "events" / f"batch_id={batch_id}")
        partials = [_Partial(row.broker, row.queue_id, int(row.minute or 0), str(row.state), int(row.events),
                             int(row.revenue_cents or 0), int(row.last_offset)) for row in groups]
        broker_offsets = self._broker_offsets()
        now = time.time()
        with self._lock:
            self._partials[batch_id] = partials  # a replayed batch replaces its first run
            for partial in partials:
                key = (partial.broker, partial.queue_id)
                self.end_offsets[key] = max(self.end_offsets.get(key, 0), partial.last_offset + 1)
            for (broker, queue_id), broker_offset in sorted(broker_offsets.items()):
                self.lag_samples.append(LagSample(batch_id, now, broker, queue_id,
                                                  self.end_offsets.get((broker, queue_id), 0), broker_offset))
            rows = sum(partial.events for partial in partials)
            self._batches[batch_id] = BatchRecord(batch_id, started, now, rows)
            self.status = f"batch {batch_id}: {rows} rows in {now - started:.1f} s"

    # ------------------------------------------------------------------ reading the counters

    @property
    def rows(self) -> int:
        with self._lock:
            return sum(record.rows for record in self._batches.values())

    @property
    def batches(self) -> list[BatchRecord]:
        with self._lock:
            return sorted(self._batches.values(), key=lambda record: record.batch_id)

    def end_offset_total(self) -> int:
        with self._lock:
            return sum(self.end_offsets.values())

    def caught_up(self, broker_offsets: dict[QueueKey, int]) -> bool:
        with self._lock:
            return all(self.end_offsets.get(queue, 0) >= offset for queue, offset in broker_offsets.items())

    def query_failure(self) -> str | None:
        """Why the query stopped, if it failed."""
        if self.error is not None:
            return f"{type(self.error).__name__}: {self.error}"
        if self._query is not None and not self._query.isActive:
            failure = self._query.exception()
            return str(failure) if failure is not None else "the streaming query stopped"
        return None

    # ------------------------------------------------------------------ the end

    def stop_query(self) -> None:
        if self._query is not None:
            self._query.stop()
        if self._listener is not None and self._spark is not None:
            self._spark.streams.removeListener(self._listener)
            self._listener = None
        self.status = "stopped"

    def per_minute(self) -> list[dict[str, Any]]:
        """The merged per-minute table: events, revenue and a count per order state."""
        merged: dict[int, dict[str, Any]] = {}
        with self._lock:
            partials = [partial for batch in self._partials.values() for partial in batch]
        for partial in partials:
            row = merged.setdefault(partial.minute, {"events": 0, "revenue_cents": 0,
                                                     **dict.fromkeys(STATE_COLUMNS.values(), 0)})
            row["events"] += partial.events
            row["revenue_cents"] += partial.revenue_cents
            column = STATE_COLUMNS.get(partial.state)
            if column is not None:
                row[column] += partial.events
        return [{"minute": datetime.fromtimestamp(minute, UTC), **row,
                 "revenue": Decimal(row["revenue_cents"]).scaleb(-2)} for minute, row in sorted(merged.items())]

    def finish(self) -> SparkTotals:
        """Write ``orders_per_minute`` and ``queue_lag``; count what the events Parquet holds."""
        from pyspark.sql import functions as F

        spark = self._spark
        per_minute = self.per_minute()
        columns = ["minute", "events", "revenue", "revenue_cents", *STATE_COLUMNS.values()]
        schema = ("minute TIMESTAMP, events BIGINT, revenue DECIMAL(18,2), revenue_cents BIGINT, "
                  + ", ".join(f"{name} BIGINT" for name in STATE_COLUMNS.values()))
        (spark.createDataFrame([tuple(row[name] for name in columns) for row in per_minute], schema)
         .coalesce(1).write.mode("overwrite").parquet(str(self.output / "orders_per_minute")))
        with self._lock:
            lag_rows = [(sample.batch_id, datetime.fromtimestamp(sample.at, UTC), sample.broker, sample.queue_id,
                         sample.end_offset, sample.broker_offset, sample.lag) for sample in self.lag_samples]
        (spark.createDataFrame(lag_rows, "batch_id BIGINT, at TIMESTAMP, broker STRING, queue_id INT, "
                                         "end_offset BIGINT, broker_offset BIGINT, lag BIGINT")
         .coalesce(1).write.mode("overwrite").parquet(str(self.output / "queue_lag")))
        events_dir = self.output / "events"
        if not events_dir.exists():
            return SparkTotals(0, 0, 0, len(per_minute))
        totals = spark.read.parquet(str(events_dir)).agg(
            F.count(F.lit(1)).alias("rows"), F.countDistinct("msg_id").alias("distinct"),
            F.sum("revenue_cents").alias("revenue")).collect()[0]
        return SparkTotals(int(totals["rows"]), int(totals["distinct"]), int(totals["revenue"] or 0), len(per_minute))

    def stop_session(self) -> None:
        if self._spark is not None:
            self._spark.stop()
            self._spark = None
        shutil.rmtree(self._work_dir, ignore_errors=True)


__all__ = ["EVENT_SCHEMA_DDL", "STATE_COLUMNS", "BatchRecord", "LagSample", "QueueKey", "SparkPipeline", "SparkTotals",
           "local_session"]
