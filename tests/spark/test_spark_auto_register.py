"""``format("rocketmq")`` in a new Spark session that never called `register`: PySpark 4 finds the data
source through the ``pyspark_rocketflow`` module of the wheel (the README's snippet, as written)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from spark_helpers import send_messages

from rocketflow.client import Producer
from rocketflow.dev import DevCluster

SCRIPT = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("auto-register")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    assert "rocketflow.spark" not in sys.modules, "the test must not import rocketflow's Spark module itself"
    rows = (spark.read.format("rocketmq").option("namesrv", sys.argv[1]).option("topic", sys.argv[2])
            .option("startingOffsets", "earliest").load().select("body").collect())
    print("rows", sorted(bytes(row.body).decode() for row in rows))
    spark.stop()
""")


def test_a_new_session_reads_rocketmq_without_register(cluster: DevCluster, producer: Producer,
                                                        new_topic: object, tmp_path: Path) -> None:
    topic = new_topic(queues=2)  # type: ignore[operator]
    send_messages(producer, topic, 5, body=lambda index: b"auto-%d" % index)
    script = tmp_path / "fresh_session.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    completed = subprocess.run([sys.executable, str(script), cluster.namesrv_addr, topic], capture_output=True,
                               text=True, env=env, cwd=tmp_path, timeout=240, check=False)
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert f"rows {[f'auto-{index}' for index in range(5)]}" in completed.stdout, completed.stdout
