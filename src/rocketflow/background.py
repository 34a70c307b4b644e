"""`BackgroundTask`: the one long-running coroutine of a service, on the event loop that starts it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class BackgroundTask:
    """Runs ``run()`` as a task of the running loop from `start` until `stop` cancels it."""

    def __init__(self, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._run = run
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start ``run()`` on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancel the task, if started, and wait until it has ended (idempotent)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


__all__ = ["BackgroundTask"]
