"""A streaming driver for the exactly-once test, run as its own process.

``python eo_driver.py NAMESRV TOPIC CHECKPOINT OUTPUT MODE``: reads TOPIC (maxMessagesPerTrigger 150)
into a Parquet sink. MODE ``slow`` keeps running with batches slowed down by a sleeping UDF (the test
kills it with SIGKILL); MODE ``drain`` runs availableNow until the backlog is read, then exits 0.
"""

from __future__ import annotations

import os
import sys
import time

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession
from pyspark.sql.functions import col, udf

from rocketflow.spark import register


def main() -> None:
    namesrv, topic, checkpoint, output, mode = sys.argv[1:6]
    spark = (SparkSession.builder.master("local[2]").appName(f"eo-{mode}")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    @udf("long")
    def slowly(offset: int) -> int:
        if mode == "slow" and offset % 50 == 0:
            time.sleep(0.4)
        return offset

    frame = (spark.readStream.format("rocketmq").option("namesrv", namesrv).option("topic", topic)
             .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", "150").load()
             .select("msg_id", "queue_id", slowly(col("queue_offset")).alias("queue_offset"), "body"))
    writer = (frame.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint))
    if mode == "drain":
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        writer.trigger(processingTime="0 seconds").start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
