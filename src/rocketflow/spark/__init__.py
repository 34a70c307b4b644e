"""The ``rocketmq`` PySpark data source (PySpark >= 4.2's Python Data Source API; no JVM jars).

```python
df = (spark.readStream.format("rocketmq").option("namesrv", "127.0.0.1:9876")
      .option("topic", "Orders").option("startingOffsets", "earliest").load())
```

The format is found without registration where rocketflow is installed (the ``pyspark_rocketflow``
module); `register` registers it by hand.

Schema (`rocketflow.spark.columns.SCHEMA_DDL`): topic, broker, queue_id INT, queue_offset BIGINT,
msg_id, keys, tags, body BINARY, born_timestamp / store_timestamp TIMESTAMP, properties
MAP<STRING,STRING> (only with ``includeProperties=true``), reconsume_times INT, decode_error STRING
(null unless the record cannot be decoded: see ``failOnBadRecords``).

Reader options (case-insensitive, string values):

* ``namesrv`` (required) ``host:port[;host:port]``; ``topic`` (required) one topic or a comma list;
* ``subExpression``: tag filter (``"TagA || TagB"``, default ``*``), applied by the broker and re-checked;
* ``startingOffsets``: ``earliest`` | ``latest`` | ``group`` (the ``group``'s committed offsets; queues
  without one start at earliest) | JSON ``{"Topic": {"broker-a:0": 42}}`` (-2 earliest, -1 latest,
  omitted queues earliest); or ``startingTimestamp`` (ms since the epoch: the first message stored at
  or after it). Default: latest for streams, earliest for batch reads;
* ``endingOffsets`` (batch only): ``latest`` (default) or JSON as above (-1 latest);
* ``maxMessagesPerTrigger``: admission control (``ReadMaxRows``), shared across queues by backlog;
  counted in offsets, so with a tag filter a batch may hold fewer rows;
* ``failOnDataLoss`` (default true): offsets that aged out of the broker (or a range beyond a queue's
  end) fail the query; ``false`` skips them with a warning;
* ``includeProperties`` (default false): add the ``properties`` map column (as Kafka's ``includeHeaders``:
  the map costs every row its conversion whether a query reads it or not);
* ``failOnBadRecords`` (default false): a stored record that cannot be decoded (a compressed body that
  is not zlib, properties that are not UTF-8) is a row with its stored body and the reason in
  ``decode_error``, as Spark's PERMISSIVE mode keeps malformed input; ``true`` fails the query instead;
* ``group``: after each micro-batch, the batch's end offsets are written to this consumer group on the
  broker, **for monitoring only** (lag in the admin tools). Best effort: Spark calls ``commit`` late
  (for batch N only after batch N+1 is planned, never for the last batch), and a failure is logged,
  not raised. The query's checkpoint is the truth for where reading resumes. For a group that tracks
  the query exactly (lag 0 once it caught up), add ``track_group_progress(spark, namesrv, group)``: a
  `StreamingQueryListener` that commits every finished batch's end offsets at once;
* ``pullBatchSize`` (default 1024): messages asked per pull (the broker may cap it);
* ``maxRecordsPerPartition`` (default 1,000,000): larger queue ranges are split into several partitions.

Offsets are ``{"topic": {"brokerName:queueId": next_offset}}`` with sorted keys. Each partition is
one queue's offset range ``[start, end)``, read in queue order; ``queue_id`` / ``queue_offset`` let
you restore order after a shuffle. Exactly-once into an idempotent or transactional sink (file
sinks, ``foreachBatch`` keyed by batch id) follows from Spark's checkpoint: a batch interrupted by a
crash is replayed with the same offset range.

Writer (``df.write`` / ``df.writeStream``): columns ``body`` (binary or string, required), ``keys``,
``tags``, ``sharding_key`` (rows of one key go to one queue, in order) and ``topic`` (per row, else
the ``topic`` option); option ``producerGroup``. At-least-once: retried tasks and replayed batches
send their rows again.

Cluster mode: the reader and writer objects hold configuration only and are pickled to executors;
each Python worker process opens its own client lazily (`rocketflow.spark.connection`). Install
rocketflow (``pip install 'rocketflow[spark]'``) on every node, point ``PYSPARK_PYTHON`` at that
interpreter, and call `register` in the driver before using the format, e.g. with
``spark-submit --master spark://host:7077 --conf spark.pyspark.python=/venv/bin/python job.py``.
"""

from __future__ import annotations

from typing import Any

from rocketflow.spark.columns import ARROW_SCHEMA, SCHEMA_DDL
from rocketflow.spark.connection import SourceError
from rocketflow.spark.progress import GroupProgressListener, track_group_progress
from rocketflow.spark.source import RocketMQDataSource


def register(spark: Any) -> None:
    """Register the ``rocketmq`` format on a `pyspark.sql.SparkSession`."""
    spark.dataSource.register(RocketMQDataSource)


__all__ = ["ARROW_SCHEMA", "SCHEMA_DDL", "GroupProgressListener", "RocketMQDataSource", "SourceError", "register",
           "track_group_progress"]
