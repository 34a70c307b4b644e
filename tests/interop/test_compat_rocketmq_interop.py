"""`rocketflow.compat.rocketmq.client` against the client it replaces: the same calls of the 0.4.x API
(``clients/rmq_snippets.py``) run on Apache's C++ client (PyPI ``rocketmq`` 0.4.4) and on the compat layer,
against one ``rocketflow dev``, observe the same things: return types and values, exception classes,
the queue ``send_orderly`` picks, what ``PullConsumer.pull`` yields (bytes where the original has bytes,
b"" for what is missing) and in what order, its offset table, which callbacks run, and the push
consumer's callback contract (the return value ignored, an exception redelivers).

The 2.0.x client cannot be run here (pip does not install its native library).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # fixtures come from this folder's conftest.py, which is not importable as a module
    from conftest import CppClientInstall, DevCluster

SCRIPT = Path(__file__).resolve().parent / "clients" / "rmq_snippets.py"
RUN_TIMEOUT = 180.0


def run_snippets(python: str, impl: str, namesrv: str, prefix: str, home: Path) -> dict[str, Any]:
    """Run the script; its observations by name (fails with its output when it did not finish)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    completed = subprocess.run([python, str(SCRIPT), "--impl", impl, "--namesrv", namesrv, "--prefix", prefix],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                               timeout=RUN_TIMEOUT, cwd=home)
    events = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not events or events[-1]["event"] != "done":
        pytest.fail(f"{impl} snippets did not finish (exit {completed.returncode}):\n{completed.stdout[-3000:]}\n"
                    f"{completed.stderr[-3000:]}", pytrace=False)
    return {event["name"]: event["value"] for event in events if event["event"] == "observed"}


@pytest.mark.dev_settings("messageDelayLevel=1s 1s 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s")
def test_compat_observes_what_the_cpp_client_observes(dev_cluster: DevCluster, cpp_client_install: CppClientInstall,
                                                      tmp_path: Path) -> None:
    real = run_snippets(str(cpp_client_install.python), "real", dev_cluster.namesrv_addr, "Real", tmp_path / "real")
    compat = run_snippets(sys.executable, "compat", dev_cluster.namesrv_addr, "Compat", tmp_path / "compat")

    assert list(compat) == list(real)
    differing = {name: {"real": real[name], "compat": compat[name]} for name in real if real[name] != compat[name]}
    assert not differing, json.dumps(differing, indent=1)[:6000]

    # and what both observed is what the 0.4.x API promises (so that agreeing on nothing cannot pass)
    assert [compat[f"send_orderly {arg}"][1] for arg in range(6)] == [0, 0, 0, 0, 1, 1]
    assert [(msg["queue_id"], msg["body"]) for msg in compat["pull"]] == [
        (0, "b'orderly 0'"), (0, "b'orderly 4'"), (1, "b'orderly 1'"), (1, "b'orderly 5'"), (2, "b'orderly 2'"),
        (3, "b'orderly 3'")]
    first = compat["pull"][0]
    assert (first["class"], first["keys"], first["missing_property"], first["property"]) == (
        "RecvMessage", "b''", "b''", "b'o0'")
    assert compat["pull again"] == []
    assert compat["offset table"] == {"b'TOPIC'@0": 2, "b'TOPIC'@1": 2, "b'TOPIC'@2": 1, "b'TOPIC'@3": 1}
    assert compat["send_sync without body"] == "ProducerSendSyncFailed"
    assert compat["send_async without body"] == "RocketMQException"
    assert compat["push start without subscribe"] == "PushConsumerStartFailed"
    assert compat["push deliveries"] == [["raises once", 2], ["returns 1", 1], ["returns None", 1]]
    assert compat["send after shutdown"] == "ProducerSendSyncFailed"
