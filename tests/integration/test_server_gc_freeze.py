"""``rocketflow dev`` serves the same with its start-up heap frozen (the default) or not."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rocketflow import Message, Producer, PullConsumer


@pytest.mark.parametrize("flag", ["--gc-freeze", "--no-gc-freeze"])
def test_dev_serves_with_and_without_the_frozen_heap(tmp_path: Path, flag: str) -> None:
    argv = [sys.executable, "-c", "from rocketflow.cli.main import cli; cli(prog_name='rocketflow')", "dev",
            "--namesrv-port", "0", "--broker-port", "0", "--store-dir", str(tmp_path / "store"), flag]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    try:
        assert process.stdout is not None
        found = re.fullmatch(r"namesrv listening on (\S+)\n", process.stdout.readline())
        assert found
        namesrv = found.group(1)
        with Producer("gc_freeze_pg", namesrv=namesrv) as producer:
            sent = producer.send(Message("GcFreeze", b"after start-up"))
        with PullConsumer("gc_freeze_cg", namesrv=namesrv) as consumer:
            consumer.assign([sent.message_queue])
            consumer.seek(sent.message_queue, 0)
            polled = consumer.poll(timeout=10)
        assert [msg.body for msg in polled] == [b"after start-up"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
