"""The client's public API loads no server-side library at run time (less to import, less for every full
collection). Which of rocketflow's own packages may import which is checked statically by import-linter
(the contracts in pyproject.toml, run by CI); this checks what a static check cannot: that importing and
using the client does not load those libraries lazily either."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
import rocketflow
from rocketflow import Message, Producer, PullConsumer, PushConsumer, TransactionProducer
from rocketflow.client import AllocateMessageQueueAveragely, MessageModel
print(" ".join(sorted(name for name in ("yaml", "prometheus_client", "numpy") if name in sys.modules)))
"""


def test_the_client_api_leaves_server_side_modules_unimported() -> None:
    completed = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60,
                               check=True)
    assert completed.stdout.split() == []


_LOWER_LAYER_PROBE = """
import sys
import rocketflow.remoting.frame, rocketflow.protocol.codec, rocketflow.store
print(sorted(name for name in sys.modules if name.startswith("rocketflow.client")))
"""


def test_importing_a_lower_layer_loads_no_client_module() -> None:
    """The root package's names load on first use: the frame codec or the store come without the client."""
    completed = subprocess.run([sys.executable, "-c", _LOWER_LAYER_PROBE], capture_output=True, text=True,
                               timeout=60, check=True)
    assert completed.stdout.strip() == "[]"
