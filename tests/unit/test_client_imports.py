"""The client's public API imports no server-side dependency (less to import, less for every full collection)."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
import rocketflow
from rocketflow import Message, Producer, PullConsumer, PushConsumer, TransactionProducer
from rocketflow.client import AllocateMessageQueueAveragely, MessageModel
print(" ".join(sorted(name for name in ("yaml", "prometheus_client", "numpy", "rocketflow.broker",
                                         "rocketflow.store", "rocketflow.namesrv") if name in sys.modules)))
"""


def test_the_client_api_leaves_server_side_modules_unimported() -> None:
    completed = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60,
                               check=True)
    assert completed.stdout.split() == []
