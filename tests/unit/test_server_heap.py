"""The server commands freeze their start-up heap (``--gc-freeze``, on by default)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import gc, sys
from rocketflow.cli.servers import _settle_heap
garbage = []
garbage.append(garbage)  # a cycle only a collection frees
del garbage
_settle_heap(sys.argv[1] == "on")
print(gc.get_freeze_count(), gc.collect())
"""


@pytest.mark.parametrize("enabled", [True, False])
def test_settling_the_heap_collects_then_freezes_what_is_alive(enabled: bool) -> None:
    completed = subprocess.run([sys.executable, "-c", _PROBE, "on" if enabled else "off"], capture_output=True,
                               text=True, timeout=60, check=True)
    frozen, collected_after = map(int, completed.stdout.split())
    if enabled:
        assert frozen > 10_000  # the modules' objects (rocketflow imports ~30k)
        assert collected_after == 0  # the cycle went in the collection before the freeze
    else:
        assert frozen == 0
        assert collected_after > 0  # the cycle is still there for this one
