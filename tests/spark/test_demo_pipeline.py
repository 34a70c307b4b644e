"""`rocketflow demo` end to end with tiny sizes: producer, orderly checker, Spark job, Parquet, summary, plot."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketflow.cli.demo import plan_orders
from rocketflow.cli.main import cli

pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("matplotlib")

ORDERS = 50
SEED = 11


def _rocketflow_command() -> list[str]:
    script = Path(sys.executable).with_name("rocketflow")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from rocketflow.cli.main import cli; cli()"]


def test_demo_runs_the_whole_pipeline(tmp_path: Path) -> None:
    output = tmp_path / "out"
    plan = plan_orders(ORDERS, seed=SEED, cancel_ratio=0.3)
    expected_messages = sum(len(order.steps) for order in plan)
    expected_revenue = sum(order.revenue_cents for order in plan)
    env = {**os.environ, "COLUMNS": "200"}
    completed = subprocess.run(
        [*_rocketflow_command(), "demo", "--orders", str(ORDERS), "--seed", str(SEED), "--cancel-ratio", "0.3",
         "--trigger", "0.5", "--timeout", "150", "--output", str(output)],
        capture_output=True, text=True, env=env, timeout=240, check=False)
    report = f"stdout:\n{completed.stdout[-6000:]}\nstderr:\n{completed.stderr[-6000:]}"
    assert completed.returncode == 0, report

    # the printed summary
    out = completed.stdout
    assert re.search(rf"messages sent / expected\s*│\s*{expected_messages:,} / {expected_messages:,}\s*│", out), report
    assert re.search(r"state machine violations\s*│\s*0\s*│", out), report
    assert re.search(r"duplicates\s*│\s*0\s*│", out), report
    rows = rf"rows written \(distinct message ids\)\s*│\s*{expected_messages:,} \({expected_messages:,}\)"
    assert re.search(rows, out), report
    assert "OK: every order followed its state machine" in out, report

    summary = json.loads((output / "summary.json").read_text())
    assert summary["ok"] is True and summary["problems"] == []
    assert summary["expected_messages"] == expected_messages
    assert summary["sent"] == summary["consumed"] == summary["spark_distinct"] == expected_messages
    assert summary["violations"] == summary["duplicates"] == summary["wrong_final_states"] == 0
    assert summary["spark_queue_lag"] == 0 and summary["spark_group_lag"] == 0
    # the query's progress listener, not a final commit by the demo, brought the group to lag 0
    assert summary["spark_group_lag_from_source"] == 0

    # the Parquet the Spark job wrote
    events = pq.read_table(output / "events").to_pylist()
    assert len(events) == expected_messages
    assert len({row["msg_id"] for row in events}) == expected_messages
    sent_steps = Counter((order.order_id, state.value) for order in plan for state in order.steps)
    assert Counter((row["order_id"], row["state"]) for row in events) == sent_steps
    per_minute = pq.read_table(output / "orders_per_minute").to_pylist()
    assert sum(row["revenue_cents"] for row in per_minute) == expected_revenue
    assert sum(row["revenue"] for row in per_minute) * 100 == expected_revenue
    assert sum(row["created"] for row in per_minute) == ORDERS
    assert sum(row["completed"] for row in per_minute) == sum(1 for order in plan if order.revenue_cents)
    lag = pq.read_table(output / "queue_lag").to_pylist()
    last_batch = max(row["batch_id"] for row in lag)
    final = [row for row in lag if row["batch_id"] == last_batch]
    assert len(final) == 4 and all(row["lag"] == 0 for row in final)
    assert sum(row["broker_offset"] for row in final) == expected_messages

    plot = output / "throughput_lag.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_demo_without_spark_checks_the_orders(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["demo", "--no-spark", "--orders", "40", "--producer-threads", "2",
                                      "--output", str(tmp_path / "out")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    expected = sum(len(order.steps) for order in plan_orders(40))
    assert summary["consumed"] == summary["sent"] == expected and summary["violations"] == 0
    assert summary["spark_rows"] is None and (tmp_path / "out" / "throughput_lag.png").exists()


def test_demo_refuses_a_non_empty_output_directory(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("keep me")
    result = CliRunner().invoke(cli, ["demo", "--no-spark", "--output", str(tmp_path)])
    assert result.exit_code == 2
    assert "exists and is not empty" in result.output
    assert (tmp_path / "old.txt").read_text() == "keep me"
