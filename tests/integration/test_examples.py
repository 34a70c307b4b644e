"""The scripts in examples/ run as written against a real ``rocketflow dev`` and print what they promise.

One ``rocketflow dev`` subprocess (free ports, fresh store) serves the module; each example runs as a
subprocess of this interpreter with its defaults, pointed at it with ``--namesrv`` (or the
``ROCKETFLOW_NAMESRV`` environment variable). The Spark example is tested in tests/spark.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = REPO_ROOT / "examples"
RUN_TIMEOUT = 120.0
DEV_START_TIMEOUT = 30.0
DEV_STOP_TIMEOUT = 20.0
NAMESRV_LINE = re.compile(r"namesrv listening on (\S+)")


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``rocketflow dev`` on free ports; yields its name server address, stops it by pid afterwards."""
    work_dir = tmp_path_factory.mktemp("examples-dev")
    argv = [sys.executable, "-c", "from rocketflow.cli.main import cli; cli(prog_name='rocketflow')", "dev",
            "--namesrv-port", "0", "--broker-port", "0",
            "--store-dir", str(work_dir / "store"),
            # transactions.py: check pending transactions back every second instead of every minute
            "--set", "transactionCheckInterval=1000", "--set", "transactionTimeOut=1000"]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               cwd=work_dir)
    output: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode("utf-8", errors="replace")
            if len(output) < 500:
                output.append(line)
            if not found and (match := NAMESRV_LINE.search(line)):
                found.append(match.group(1))
            if found and line.startswith("broker "):
                ready.set()
        ready.set()

    reader = threading.Thread(target=pump, name="examples-dev-output", daemon=True)
    reader.start()
    try:
        ready.wait(DEV_START_TIMEOUT)
        if not found or process.poll() is not None:
            pytest.fail(f"rocketflow dev did not start; output:\n{''.join(output)[-3000:]}", pytrace=False)
        yield found[0]
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(DEV_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(5.0)
        reader.join(5.0)
    assert process.returncode == 0, f"rocketflow dev exited {process.returncode}:\n{''.join(output)[-3000:]}"


def run_example(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``examples/<name>`` with this interpreter; assert exit code 0 and return its stdout."""
    completed = subprocess.run([sys.executable, str(EXAMPLES_DIR / name), *args], capture_output=True, text=True,
                               timeout=RUN_TIMEOUT, env={**os.environ, **(env or {})}, cwd=REPO_ROOT, check=False)
    report = f"{name} exited {completed.returncode}\nstdout:\n{completed.stdout[-4000:]}\n" \
             f"stderr:\n{completed.stderr[-4000:]}"
    assert completed.returncode == 0, report
    return completed.stdout


def test_producer_reads_the_name_server_from_the_environment(namesrv: str) -> None:
    out = run_example("producer.py", env={"ROCKETFLOW_NAMESRV": namesrv})
    assert "async: {'SEND_OK': 20}" in out, out
    assert "oneway: 20 messages written" in out, out
    assert re.search(r"ordered: order-0 -> queue \[\d\], order-1 -> queue \[\d\], order-2 -> queue \[\d\]", out), out
    assert "sent 80 messages to ExampleProducer" in out, out


def test_push_concurrently(namesrv: str) -> None:
    out = run_example("push_concurrently.py", "--namesrv", namesrv)
    match = re.search(r"consumed 200 messages concurrently on (\d+) threads", out)
    assert match is not None, out
    assert 1 <= int(match.group(1)) <= 8, out


def test_push_orderly_checks_every_order(namesrv: str) -> None:
    out = run_example("push_orderly.py", "--namesrv", namesrv)
    assert re.search(r"consumed 100 messages in order \(10 orders over 4 queues, \d+ redelivered\)", out), out
    # a second run skips the first run's messages and still sees its own in order
    out = run_example("push_orderly.py", "--namesrv", namesrv, "--count", "30", "--keys", "3")
    assert re.search(r"consumed 30 messages in order \(3 orders over \d queues", out), out


def test_async_listener_overlaps_calls(namesrv: str) -> None:
    out = run_example("async_listener.py", "--namesrv", namesrv)
    match = re.search(r"consumed 200 messages with an async listener \(up to (\d+) calls in flight\)", out)
    assert match is not None, out
    assert 1 < int(match.group(1)) <= 20, out   # consume_thread_max (20) caps async calls in flight


def test_pull_consumer_commits_what_it_polled(namesrv: str) -> None:
    out = run_example("pull_consumer.py", "--namesrv", namesrv)
    assert re.search(r"polled 100 messages in \d+ batches", out), out
    match = re.search(r"committed offsets by queue id: (\{.*\})", out)
    assert match is not None, out
    committed = ast.literal_eval(match.group(1))
    assert sorted(committed) == [0, 1, 2, 3] and sum(committed.values()) == 100, out   # a fresh topic


def test_broadcasting_delivers_everything_to_each_consumer(namesrv: str) -> None:
    out = run_example("broadcasting.py", "--namesrv", namesrv)
    assert out.count("received 50 messages") == 2, out
    assert "each of 2 consumers received all 50 messages" in out, out


def test_delay_and_retry(namesrv: str) -> None:
    out = run_example("delay_and_retry.py", "--namesrv", namesrv)
    lines = re.findall(r"job-\d: first delivered ([\d.]+)s after sending; 3 deliveries \(reconsume_times 0, 1, 2\)",
                       out)
    assert len(lines) == 3, out
    assert all(float(delay) >= 0.8 for delay in lines), out   # delay level 1 is 1 s on the dev broker
    assert "all 3 messages delayed, then succeeded after 2 retries each" in out, out


def test_transactions_deliver_exactly_the_committed_orders(namesrv: str) -> None:
    out = run_example("transactions.py", "--namesrv", namesrv, "--count", "8")
    assert "8 orders: 4 committed at once, 2 committed after a check-back" in out
    assert "2 rolled back; the consumer received 6 orders" in out


def test_request_reply_answers_every_request(namesrv: str) -> None:
    out = run_example("request_reply.py", "--namesrv", namesrv, "--count", "10")
    assert "answered 10 requests one at a time" in out and "10 in flight together" in out


def test_every_example_is_listed_and_says_how_to_run_it() -> None:
    readme = (EXAMPLES_DIR / "README.md").read_text()
    scripts = sorted(path for path in EXAMPLES_DIR.glob("*.py"))
    assert len(scripts) >= 8
    for script in scripts:
        assert f"`{script.name}`" in readme, f"{script.name} is not listed in examples/README.md"
        docstring = ast.get_docstring(ast.parse(script.read_text()))
        assert docstring, f"{script.name} has no module docstring"
        assert f"python examples/{script.name}" in docstring, f"{script.name}'s docstring does not say how to run it"
        assert "--namesrv" in script.read_text() and "ROCKETFLOW_NAMESRV" in script.read_text(), script.name
