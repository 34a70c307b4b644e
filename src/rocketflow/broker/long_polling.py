"""`PullRequestHoldService`: long polling of PULL_MESSAGE.

A pull that finds nothing at the end of its queue (and allows suspension) is held, keyed by
``topic@queue``. The store's dispatch listener tells this service about every stored message;
a held pull whose offset the new message reaches and whose tag filter it passes is answered at
once (the pull runs again, without suspension, and its response is sent with
``ctx.respond``). At its suspend timeout it is answered otherwise (one timer, due at the earliest
deadline of the held pulls, serves them all). With long polling disabled, pulls are held for the
short-polling time and only re-run when it ends. See docs/design/broker.md#pulling-and-long-polling.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocketflow.net import Channel, RequestContext
from rocketflow.net.deadline_timer import DeadlineTimer
from rocketflow.remoting.command import RemotingCommand

logger = logging.getLogger(__name__)

#: Re-runs a held pull without suspension, given what its first run parsed (the `HeldPull.parsed` it
#: was suspended with); returns its response (None = nothing to send).
PullRunner = Callable[[RequestContext, RemotingCommand, Any], "RemotingCommand | None"]


def _to_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value & 0x80000000 else value


@dataclass(slots=True, eq=False)
class HeldPull:
    """One suspended pull."""

    ctx: RequestContext
    request: RemotingCommand
    key: tuple[str, int]
    pull_from_offset: int
    #: tag codes that wake it; None = any message
    codes: frozenset[int] | None
    #: when its suspend timeout is up (the loop's clock)
    deadline: float = 0.0
    done: bool = False
    suspended_at: float = field(default=0.0)
    #: what the pull's first run parsed from the request (its header), handed back to the runner
    parsed: Any = None


class PullRequestHoldService:
    """Held pulls by (topic, queue id), woken by new messages or by their own timers."""

    def __init__(self, runner: PullRunner, *, long_polling_enable: bool = True, short_polling_time_ms: int = 1000,
                 check_interval_ms: int = 5000, max_offset: Callable[[str, int], int] | None = None) -> None:
        self._runner = runner
        self.long_polling_enable = long_polling_enable
        self.short_polling_time_ms = short_polling_time_ms
        self.check_interval_ms = check_interval_ms
        self._max_offset = max_offset
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._sweeper: asyncio.Task[None] | None = None
        #: pulls held because they found nothing; of them, those answered because a message arrived /
        #: because their time was up
        self.suspended = 0
        self.woken_by_message = 0
        self.woken_by_timeout = 0
        #: pulls a message woke, answered together once the current turn of the loop is over
        self._to_wake: list[HeldPull] = []
        # (deadline, sequence number, pull) of the held pulls, earliest first; a pull answered early stays
        # until it reaches the top or the heap is compacted. One timer waits for the top.
        self._deadlines: list[tuple[float, int, HeldPull]] = []
        self._sequence = itertools.count()
        self._live = 0
        self._expiry = DeadlineTimer(self._expire_due)

    @property
    def held_count(self) -> int:
        return sum(len(pulls) for pulls in self._held.values())

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self._max_offset is not None and self.check_interval_ms > 0:
            self._sweeper = self._loop.create_task(self._sweep_loop())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        for pulls in self._held.values():
            for held in pulls:
                held.done = True
        self._held.clear()
        self._live = 0
        self._deadlines.clear()
        self._expiry.cancel()

    def suspend(self, ctx: RequestContext, request: RemotingCommand, topic: str, queue_id: int,
                pull_from_offset: int, codes: frozenset[int] | None, suspend_timeout_ms: int,
                parsed: Any = None) -> None:
        """Hold a pull until a matching message arrives or the timeout passes."""
        loop = self._loop or asyncio.get_running_loop()
        key = (topic, queue_id)
        now = loop.time()
        timeout_ms = suspend_timeout_ms if self.long_polling_enable else self.short_polling_time_ms
        deadline = now + max(timeout_ms, 0) / 1000
        held = HeldPull(ctx, request, key, pull_from_offset, codes, deadline=deadline, suspended_at=now,
                        parsed=parsed)
        self._held.setdefault(key, []).append(held)
        self._live += 1
        self.suspended += 1
        deadlines = self._deadlines
        if len(deadlines) > 2 * self._live + 64:  # mostly pulls answered early: keep those still held
            deadlines[:] = [entry for entry in deadlines if not entry[2].done]
            heapq.heapify(deadlines)
        heapq.heappush(deadlines, (deadline, next(self._sequence), held))
        self._expiry.arm(loop, deadline)

    def _expire_due(self, now: float) -> float | None:
        """Answer the pulls whose suspend timeout is up; the next deadline, if any (`DeadlineTimer`)."""
        deadlines = self._deadlines
        while deadlines and (deadlines[0][2].done or deadlines[0][0] <= now):
            held = heapq.heappop(deadlines)[2]
            if not held.done:
                self._expire(held)
        return deadlines[0][0] if deadlines else None

    def release_channel(self, channel: object) -> int:
        """Drop the pulls held for a connection that went away, freeing their slots at once; returns how many."""
        released = 0
        for key, pulls in list(self._held.items()):
            keep: list[HeldPull] = []
            for held in pulls:
                if held.ctx.channel is channel:
                    held.done = True
                    released += 1
                else:
                    keep.append(held)
            if len(keep) != len(pulls):
                if keep:
                    self._held[key] = keep
                else:
                    del self._held[key]
        self._live -= released
        return released

    def notify_messages_arriving(self, topic: str, queue_id: int, first_offset: int, tags_codes: Sequence[int],
                                 store_timestamp: int = 0) -> None:
        """Dispatch run listener: messages were stored at ``first_offset`` on of ``topic@queue_id``."""
        if not self._held:
            return
        pulls = self._held.get((topic, queue_id))
        if not pulls or not self.long_polling_enable or not tags_codes:
            return
        if threading.get_ident() != self._loop_thread:
            loop = self._loop
            if loop is not None:
                loop.call_soon_threadsafe(self.notify_messages_arriving, topic, queue_id, first_offset,
                                          list(tags_codes))
            return
        last_offset = first_offset + len(tags_codes) - 1
        for held in pulls:
            if held.done or last_offset < held.pull_from_offset:
                continue
            codes = held.codes
            if codes is not None:
                wanted = tags_codes[max(0, held.pull_from_offset - first_offset):]
                if not any(_to_int32(code) in codes for code in wanted):
                    continue
            held.done = True
            self.woken_by_message += 1
            # Answer after the put that woke us has finished (and been answered).
            self._to_wake.append(held)
            if len(self._to_wake) == 1:
                assert self._loop is not None
                self._loop.call_soon(self._wake_woken)

    def _expire(self, held: HeldPull) -> None:
        if held.done:
            return
        held.done = True
        self.woken_by_timeout += 1
        self._wake(held)

    def _wake_woken(self) -> None:
        """Answer the pulls messages woke; each connection's answers are written at once, in one write.

        A woken consumer waits for its answer: it is not left for the end of the loop's turn, which
        under load also handles every request read meanwhile.
        """
        woken, self._to_wake = self._to_wake, []
        answered: dict[Channel, None] = {}
        for held in woken:
            try:
                if self._answer(held):
                    answered[held.ctx.channel] = None
            except Exception:  # one pull's bug must not leave the others unanswered
                logger.exception("answering a woken pull failed: %s", held.request.describe())
        for channel in answered:
            channel.flush()

    def _wake(self, held: HeldPull) -> None:
        if self._answer(held):
            held.ctx.channel.flush()

    def _answer(self, held: HeldPull) -> bool:
        """Stop holding ``held`` and run it again; True when an answer was queued on its channel."""
        pulls = self._held.get(held.key)
        if pulls is not None:
            try:
                pulls.remove(held)
            except ValueError:
                pass
            else:
                self._live -= 1
            if not pulls:
                del self._held[held.key]
        if held.ctx.channel.closed:
            return False
        try:
            response = self._runner(held.ctx, held.request, held.parsed)
        except Exception as exc:
            logger.exception("held pull failed on wake-up: %s", held.request.describe())
            response = held.request.make_response(1, remark=f"pull failed: {type(exc).__name__}: {exc}")
        return response is not None and held.ctx.respond(response)

    async def _sweep_loop(self) -> None:
        """Safety net: wake pulls whose queue has grown without a notification (e.g. a missed wake-up)."""
        assert self._max_offset is not None
        while True:
            await asyncio.sleep(self.check_interval_ms / 1000)
            for key, pulls in list(self._held.items()):
                try:
                    newest = self._max_offset(*key)
                except Exception:
                    logger.exception("long-polling sweep cannot read the max offset of %s", key)
                    continue
                for held in list(pulls):
                    if not held.done and newest > held.pull_from_offset:
                        held.done = True
                        self.woken_by_message += 1
                        self._wake(held)


__all__ = ["HeldPull", "PullRequestHoldService", "PullRunner"]
