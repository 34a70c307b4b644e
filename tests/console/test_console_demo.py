"""``rocketflow demo --console``: the console serves the demo's embedded cluster while the pipeline runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def test_demo_console_shows_the_demos_topic_while_it_runs(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "from rocketflow.cli.main import cli; cli(prog_name='rocketflow')", "demo",
            "--no-spark", "--orders", "100", "--rate", "150", "--producer-threads", "1", "--console",
            "--console-port", "0", "-o", str(tmp_path / "out")]
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env)
    assert process.stdout is not None
    lines: list[str] = []
    url = None
    deadline = time.monotonic() + 60
    try:
        while url is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            match = re.search(r"console: (http://127\.0\.0\.1:\d+/)", line)
            if match:
                url = match.group(1)
        assert url is not None, "".join(lines)
        topic_line = next((line for line in lines if "topic DemoOrders_" in line), None)
        while topic_line is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            lines.append(line)
            if "topic DemoOrders_" in line:
                topic_line = line
        assert topic_line is not None, "".join(lines)
        topic = re.search(r"(DemoOrders_\w+)", topic_line)
        assert topic is not None
        with urllib.request.urlopen(f"{url}topics", timeout=15) as response:
            assert response.status == 200
            assert topic.group(1) in response.read().decode()
        output, _ = process.communicate(timeout=90)
        lines.append(output)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0, "".join(lines)
