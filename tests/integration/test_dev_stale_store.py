"""``rocketflow dev`` killed outright leaves its temporary store; the next one removes it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from rocketflow import Message, Producer


def _start_dev(temp_root: Path) -> tuple[subprocess.Popen[str], str, Path]:
    argv = [sys.executable, "-c", "from rocketflow.cli.main import cli; cli(prog_name='rocketflow')", "dev",
            "--namesrv-port", "0", "--broker-port", "0"]
    env = {**os.environ, "TMPDIR": str(temp_root)}
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env=env)
    assert process.stdout is not None
    namesrv = store = ""
    for _ in range(10):
        line = process.stdout.readline()
        if found := re.fullmatch(r"namesrv listening on (\S+)\n", line):
            namesrv = found.group(1)
        elif line.startswith("store dir "):
            store = line[len("store dir "):].strip()
            break
    assert namesrv and store, "rocketflow dev did not start"
    return process, namesrv, Path(store)


def _stop(process: subprocess.Popen[str], sig: signal.Signals) -> int:
    if process.poll() is None:
        process.send_signal(sig)
    code = process.wait(timeout=30)
    if process.stdout is not None:
        process.stdout.close()
    return code


def test_a_killed_dev_clusters_store_is_removed_by_the_next_one(tmp_path: Path) -> None:
    first, namesrv, first_store = _start_dev(tmp_path)
    second = None
    try:
        assert first_store.parent == tmp_path
        with Producer("stale_store_pg", namesrv=namesrv) as producer:
            producer.send(Message("StaleStore", b"written before the kill"))
        assert _stop(first, signal.SIGKILL) == -signal.SIGKILL
        assert (first_store / "commitlog").is_dir()  # nothing could clean up

        second, _, second_store = _start_dev(tmp_path)
        assert second_store != first_store
        assert not first_store.exists()
        assert second_store.is_dir()
        assert _stop(second, signal.SIGTERM) == 0
        assert not second_store.exists()
        assert [entry.name for entry in tmp_path.iterdir() if entry.name.startswith("rocketflow-dev-")] == []
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
