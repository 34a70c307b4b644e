"""examples/spark_streaming.py runs as written: rocketmq source -> Parquet with availableNow, then exits."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from rocketflow.dev import DevCluster

pq = pytest.importorskip("pyarrow.parquet")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_streaming.py"
COUNT = 60
PER_TRIGGER = 25


def test_spark_example_streams_the_topic_into_parquet(cluster: DevCluster, tmp_path: Path) -> None:
    # no --output: the default is under the temporary directory, and nothing is left where it runs
    temp_dir, work_dir = tmp_path / "tmp", tmp_path / "work"
    temp_dir.mkdir()
    work_dir.mkdir()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "TMPDIR": str(temp_dir)}
    completed = subprocess.run(
        [sys.executable, str(EXAMPLE), "--namesrv", cluster.namesrv_addr, "--topic", "ExampleSparkTest",
         "--count", str(COUNT), "--max-per-trigger", str(PER_TRIGGER)],
        capture_output=True, text=True, env=env, cwd=work_dir, timeout=240, check=False)
    report = f"stdout:\n{completed.stdout[-4000:]}\nstderr:\n{completed.stderr[-4000:]}"
    assert completed.returncode == 0, report
    out = completed.stdout
    assert f"sent {COUNT} order events to ExampleSparkTest" in out, report
    match = re.search(r"the query ran (\d+) micro-batches over (\d+) messages", out)
    assert match is not None, report
    assert int(match.group(2)) == COUNT and int(match.group(1)) >= -(-COUNT // PER_TRIGGER), report
    written = re.search(r"spark wrote (\d+) rows to (\S+)", out)
    assert written is not None and int(written.group(1)) == COUNT, report

    # what the Parquet holds: every event once, parsed from its JSON body
    events_dir = Path(written.group(2))
    assert events_dir.is_relative_to(temp_dir / "rocketflow-spark-example"), events_dir
    assert not any(work_dir.iterdir()), list(work_dir.iterdir())
    rows = pq.read_table(events_dir).to_pylist()
    assert len(rows) == COUNT
    assert len({(row["queue_id"], row["queue_offset"]) for row in rows}) == COUNT
    assert Counter(row["state"] for row in rows) == {"create": 20, "pay": 20, "ship": 20}
    assert all(row["tags"] == row["state"] and row["order_id"].startswith("order-") for row in rows)
    assert sum(row["amount_cents"] for row in rows) == sum(100 * (index % 7 + 1) for index in range(COUNT))
