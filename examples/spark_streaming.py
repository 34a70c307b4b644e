"""A Spark Structured Streaming job reading a topic with the ``rocketmq`` source.

Needs the ``spark`` extra (``pip install 'rocketflow[spark]'``: pyspark >= 4.2, pyarrow) and Java 17+.
Run a name server and a broker first (``rocketflow dev``), then:

    python examples/spark_streaming.py [--namesrv 127.0.0.1:9876] [--count 200] [--sink parquet|console]

The script sends ``--count`` JSON order events, then runs one streaming query:
``readStream.format("rocketmq")`` from the offsets the topic's queues had before the send (a JSON
``startingOffsets``), parses the body with ``from_json``, and writes to Parquet (or prints to the
console) with ``trigger(availableNow=True)``: the query drains what is in the topic now, in
micro-batches of at most ``maxMessagesPerTrigger`` offsets, then stops by itself. With Parquet it
reads the result back and prints ``spark wrote N rows`` and the amount per order state.
Output and checkpoint go to ``--output/<run id>/`` (a checkpoint belongs to one query); by default
``--output`` is ``rocketflow-spark-example`` in the system's temporary directory, not the current one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

from rocketflow import Message, Producer
from rocketflow.client.admin import Admin
from rocketflow.client.errors import MQError

DEFAULT_NAMESRV = os.environ.get("ROCKETFLOW_NAMESRV", "127.0.0.1:9876")
STATES = ("create", "pay", "ship")
EVENT_SCHEMA = "order_id STRING, state STRING, amount_cents BIGINT"


def ensure_topic(namesrv: str, topic: str, queues: int = 4) -> None:
    """Create ``topic`` unless the name server already routes it, then wait for its route."""
    with Admin(namesrv) as admin:
        admin.ensure_topic(topic, queues=queues)


def current_end_offsets(namesrv: str, topic: str) -> str:
    """The topic's queue ends as a ``startingOffsets`` JSON: ``{"topic": {"broker:queue": offset}}``."""
    with Admin(namesrv) as admin:
        stats = admin.topic_stats(topic)
    return json.dumps({topic: {f"{queue.broker_name}:{queue.queue_id}": queue.max_offset for queue in stats}})


def main() -> int:
    parser = argparse.ArgumentParser(description="Spark Structured Streaming from a RocketMQ topic.")
    parser.add_argument("--namesrv", default=DEFAULT_NAMESRV, help="name server(s), host:port[;host:port]")
    parser.add_argument("--topic", default="ExampleSpark")
    parser.add_argument("--count", type=int, default=200, help="order events to send")
    parser.add_argument("--sink", choices=("parquet", "console"), default="parquet")
    parser.add_argument("--output", default=str(Path(tempfile.gettempdir()) / "rocketflow-spark-example"),
                        help="directory for Parquet + checkpoint [default: %(default)s]")
    parser.add_argument("--max-per-trigger", type=int, default=100, help="maxMessagesPerTrigger")
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    if args.max_per_trigger < 1:
        parser.error("--max-per-trigger must be at least 1")
    ensure_topic(args.namesrv, args.topic)
    starting_offsets = current_end_offsets(args.namesrv, args.topic)

    with Producer("example-spark-producer", namesrv=args.namesrv) as producer:
        for index in range(args.count):
            order_id = f"order-{index // len(STATES)}"
            state = STATES[index % len(STATES)]
            event = {"order_id": order_id, "state": state, "amount_cents": 100 * (index % 7 + 1)}
            producer.send(Message(args.topic, json.dumps(event).encode(), tags=state, keys=order_id),
                          sharding_key=order_id)
    print(f"sent {args.count} order events to {args.topic}")

    # pyspark starts a JVM: import it only once the messages are out
    try:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F
    except ImportError as exc:
        print(f"this example needs the spark extra (pip install 'rocketflow[spark]'): {exc}", file=sys.stderr)
        return 1

    # Spark's Python workers must run this interpreter (the one rocketflow is installed in).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("rocketflow-example")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    # format("rocketmq") needs no registration: PySpark finds it through the installed pyspark_rocketflow
    # module (rocketflow.spark.register(spark) does it by hand, e.g. where rocketflow is not pip-installed)

    run_dir = Path(args.output) / uuid.uuid4().hex[:12]
    try:
        events = (spark.readStream.format("rocketmq")
                  .option("namesrv", args.namesrv)
                  .option("topic", args.topic)
                  .option("startingOffsets", starting_offsets)
                  .option("maxMessagesPerTrigger", str(args.max_per_trigger))
                  .option("group", "example-spark-job")    # progress visible in `rocketflow admin`
                  .load()
                  .select("queue_id", "queue_offset", "tags",
                          F.from_json(F.col("body").cast("string"), EVENT_SCHEMA).alias("event"))
                  .select("queue_id", "queue_offset", "tags", "event.*"))
        writer = (events.writeStream.trigger(availableNow=True)
                  .option("checkpointLocation", str(run_dir / "checkpoint")))
        if args.sink == "parquet":
            writer = writer.format("parquet").option("path", str(run_dir / "events"))
        else:
            writer = writer.format("console").option("truncate", "false")
        query = writer.start()
        query.awaitTermination()
        streamed = sum(progress["numInputRows"] for progress in query.recentProgress)
        print(f"the query ran {len(query.recentProgress)} micro-batches over {streamed} messages")
        if args.sink == "console":
            print(f"spark streamed {streamed} rows to the console")
            return 0 if streamed == args.count else 1

        written = spark.read.parquet(str(run_dir / "events"))
        rows = written.count()
        for row in written.groupBy("state").agg(F.count("*").alias("events"),
                                                F.sum("amount_cents").alias("amount_cents")).orderBy("state").collect():
            print(f"  {row['state']:<8} {row['events']:>5} events {row['amount_cents']:>8} cents")
        print(f"spark wrote {rows} rows to {run_dir / 'events'}")
        return 0 if rows == args.count else 1
    finally:
        spark.stop()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MQError as exc:          # e.g. no name server at --namesrv
        sys.exit(f"error: {exc}")
