"""Helpers of the console's tests. The fixtures (conftest.py) share one dev cluster with traffic and two
``rocketflow console`` processes:

- `cluster`: a dev cluster in this process (message tracing on), topics `ORDERS` and `PAYMENTS`;
- `traffic`: a producer thread sending orders faster than the `LAGGING_GROUP` consumes them (so that
  the group lags and its lag moves), `AUDIT_GROUP`, which keeps up and records what it consumes, and
  `DLQ_GROUP`, which dead-letters every ``declined`` payment;
- `readonly_console` / `admin_console`: ``rocketflow console`` subprocesses on free ports, without and
  with an ACL account (the broker has no ACL, so the account only unlocks the console's writes).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

from rocketflow import Message, Producer, PushConsumer

ORDERS = "ConsoleOrders"
PAYMENTS = "ConsolePayments"
LAGGING_GROUP = "console-order-checker"
DLQ_GROUP = "console-payments"
AUDIT_GROUP = "console-auditor"
ACCESS_KEY = "console-operator"
SECRET_KEY = "console-secret-never-shown-0123"
REFRESH_SECONDS = 0.5
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]




@dataclass
class Traffic:
    """What the traffic fixture runs, and what its consumers saw."""

    namesrv: str
    producer: Producer
    stop: threading.Event = field(default_factory=threading.Event)
    consumers: list[PushConsumer] = field(default_factory=list)
    #: bodies seen by `AUDIT_GROUP`'s listener (a fast one), in order (resends included)
    seen: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: int = 0

    def send(self, topic: str, body: bytes, *, keys: str, tags: str | None = None) -> None:
        self.producer.send(Message(topic, body, keys=keys, tags=tags))

    def seen_count(self, body: bytes) -> int:
        with self.lock:
            return self.seen.count(body)


@dataclass
class ConsoleProcess:
    process: subprocess.Popen[str]
    url: str
    banner: list[str]

    @property
    def base(self) -> str:
        return self.url.rstrip("/")


def start_console(namesrv: str, *args: str, env: dict[str, str] | None = None) -> ConsoleProcess:
    """``rocketflow console`` on a free port; waits for its "listening" line (stderr)."""
    argv = [sys.executable, "-c", "from rocketflow.cli.main import cli; cli(prog_name='rocketflow')", "console",
            "-n", namesrv, "--port", "0", "--refresh", str(REFRESH_SECONDS), *args]
    environment = {key: value for key, value in os.environ.items() if not key.startswith("ROCKETFLOW_")}
    environment.update(env or {})
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=environment)
    assert process.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line)
        match = re.search(r"(http://\S+/) \(", line)
        if match:
            threading.Thread(target=process.stderr.read, daemon=True).start()  # keep the pipe drained
            return ConsoleProcess(process, match.group(1), lines)
    process.kill()
    raise AssertionError(f"rocketflow console did not start: {''.join(lines)}")


def stop_console(console: ConsoleProcess) -> None:
    console.process.terminate()
    try:
        console.process.wait(10)
    except subprocess.TimeoutExpired:
        console.process.kill()
        console.process.wait(5)


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"
