"""The source and sink on a real Spark standalone cluster (``spark://``), not ``local[*]``.

A master and one worker started with ``spark-class`` from the pyspark wheel, on 127.0.0.1 and free
ports. A driver in its own process (one SparkContext per JVM: the suite's local session is taken)
writes rows to a topic with ``df.write.format("rocketmq")`` and streams them back with
``readStream.format("rocketmq")`` + ``availableNow`` into Parquet. The executors are processes of the
worker, running the venv's Python (``spark.pyspark.python``): the "same venv on every node" way of
shipping rocketflow, with ``format("rocketmq")`` found without `register` (``pyspark_rocketflow``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketflow.dev import DevCluster

pytestmark = pytest.mark.slow

DRIVER = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession

    master, namesrv, topic, out, checkpoint = sys.argv[1:6]
    spark = (SparkSession.builder.master(master).appName("rocketflow-cluster-test")
             .config("spark.executor.cores", "1").config("spark.cores.max", "2")
             .config("spark.executor.memory", "512m").config("spark.driver.memory", "512m")
             .config("spark.pyspark.python", sys.executable).config("spark.pyspark.driver.python", sys.executable)
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    rows = [(f"cluster-{i}", f"key-{i % 5}", "cluster") for i in range(200)]
    (spark.createDataFrame(rows, "body STRING, sharding_key STRING, tags STRING").repartition(2)
     .write.mode("append").format("rocketmq").option("namesrv", namesrv).option("topic", topic).save())
    query = (spark.readStream.format("rocketmq").option("namesrv", namesrv).option("topic", topic)
             .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", "64").load()
             .selectExpr("CAST(body AS STRING) AS body", "tags", "queue_id", "queue_offset")
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    written = spark.read.parquet(out).collect()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print("RESULT " + json.dumps({"bodies": sorted(row.body for row in written),
                                   "tags": sorted({row.tags for row in written}),
                                   "queues": sorted({row.queue_id for row in written}), "executors": executors,
                                   "batches": len(query.recentProgress)}))
    spark.stop()
""")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class _Daemon:
    """A ``spark-class`` process in its own process group, stopped with the group."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen([str(_spark_home() / "bin" / "spark-class"), *args], stdout=self._log_file,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_for(self, text: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in {self.log}:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log_file.close()


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "SPARK_HOME": str(_spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false", "SPARK_WORKER_DIR": str(tmp_path / "work"),
           "PYSPARK_PYTHON": sys.executable}
    master = _Daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                      "--webui-port", str(_free_port())], tmp_path / "master.log", env)
    worker: _Daemon | None = None
    try:
        master.wait_for("I have been elected leader")
        worker = _Daemon(["org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host", "127.0.0.1",
                          "--cores", "2", "--memory", "1g", "--webui-port", str(_free_port()),
                          "--work-dir", str(tmp_path / "work")], tmp_path / "worker.log", env)
        master.wait_for("Registering worker")
        yield f"spark://127.0.0.1:{port}"
    finally:
        if worker is not None:
            worker.stop()
        master.stop()


def test_write_and_stream_through_a_standalone_cluster(standalone: str, cluster: DevCluster, new_topic: object,
                                                        tmp_path: Path) -> None:
    topic = new_topic(queues=4)  # type: ignore[operator]
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    completed = subprocess.run([sys.executable, str(script), standalone, cluster.namesrv_addr, topic,
                                str(tmp_path / "out"), str(tmp_path / "checkpoint")], capture_output=True, text=True,
                               env=env, cwd=tmp_path, timeout=420, check=False)
    assert completed.returncode == 0, completed.stderr[-5000:]
    line = next(line for line in completed.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert result["bodies"] == sorted(f"cluster-{index}" for index in range(200))
    assert result["tags"] == ["cluster"] and result["queues"] == [0, 1, 2, 3]
    assert result["executors"] >= 1 and result["batches"] >= 200 // 64
