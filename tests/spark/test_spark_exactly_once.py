"""Exactly-once through the checkpoint: SIGKILL a streaming driver mid-batch, restart it, count the sink."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession
from spark_helpers import send_messages

from rocketflow.client import Producer
from rocketflow.dev import DevCluster

DRIVER = Path(__file__).with_name("eo_driver.py")
TOTAL = 1200


def _start(cluster: DevCluster, topic: str, checkpoint: Path, output: Path, mode: str,
           log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, str(DRIVER), cluster.namesrv_addr, topic, str(checkpoint), str(output),
                                 mode], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(os.environ))


def _batches(directory: Path) -> set[int]:
    return {int(path.name) for path in directory.glob("*") if path.name.isdigit()} if directory.is_dir() else set()


def test_sigkill_mid_batch_then_restart_gives_every_message_once(spark: SparkSession, cluster: DevCluster,
                                                                  producer: Producer, new_topic: Callable[..., str],
                                                                  tmp_path: Path) -> None:
    topic = new_topic(4)
    send_messages(producer, topic, TOTAL)
    checkpoint, output, log = tmp_path / "checkpoint", tmp_path / "out", tmp_path / "driver.log"
    driver = _start(cluster, topic, checkpoint, output, "slow", log)
    killed_during: int | None = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and driver.poll() is None:
            planned, committed = _batches(checkpoint / "offsets"), _batches(checkpoint / "commits")
            running = planned - committed
            # kill once two batches are committed and the next one is planned but not committed
            if len(committed) >= 2 and running:
                killed_during = max(running)
                driver.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
    finally:
        if driver.poll() is None and killed_during is None:
            driver.kill()
        driver.wait(30)
    assert killed_during is not None, "the driver never got mid-batch:\n" + log.read_text(errors="replace")[-3000:]
    assert killed_during not in _batches(checkpoint / "commits")

    restarted = _start(cluster, topic, checkpoint, output, "drain", log)
    try:
        assert restarted.wait(180) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        if restarted.poll() is None:
            restarted.kill()
            restarted.wait(30)

    sink = spark.read.parquet(str(output))
    rows = sink.collect()
    assert len(rows) == TOTAL
    assert sorted(bytes(row.body) for row in rows) == sorted(b"m-%06d" % i for i in range(TOTAL))
    assert sink.select("msg_id").distinct().count() == TOTAL
