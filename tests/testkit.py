"""Helpers every test folder shares (tests/ is on the import path of every test module)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition", *,
               interval: float = 0.05) -> None:
    """Return once ``predicate()`` is true; `AssertionError` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout:g}s")
        time.sleep(interval)


__all__ = ["wait_until"]
