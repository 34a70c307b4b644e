"""`DeadlineTimer`: one event-loop timer for many deadlines.

Starting and cancelling a loop timer has a cost, paid on every request if each gets its own, while
nearly every request is answered long before its deadline. So the requests of a channel (or the
pulls a broker holds) share one timer, due at the earliest deadline: when it fires, the owner fails
what is due and names its next deadline, and the timer waits for that one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

#: How close to its deadline a wait counts as over: the coarsest loop clock's step (uvloop's, 1 ms),
#: so that the timer is not re-armed for the same instant again and again.
RESOLUTION: Final = 0.001


class DeadlineTimer:
    """A timer due at the earliest deadline it was armed for.

    When it fires, ``expire(now)`` handles every deadline up to ``now`` (the loop's clock plus
    `RESOLUTION`) and returns the earliest one left, or None; the timer then waits for that one.
    """

    __slots__ = ("_at", "_expire", "_handle")

    def __init__(self, expire: Callable[[float], float | None]) -> None:
        self._expire = expire
        self._handle: asyncio.TimerHandle | None = None
        self._at = 0.0

    def arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Make sure the timer fires by ``deadline`` (on ``loop``'s clock)."""
        if self._handle is None or deadline < self._at:
            if self._handle is not None:
                self._handle.cancel()
            self._handle = loop.call_at(deadline, self._fire, loop)
            self._at = deadline

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = None
        following = self._expire(loop.time() + RESOLUTION)
        if following is not None:
            self.arm(loop, following)


__all__ = ["RESOLUTION", "DeadlineTimer"]
