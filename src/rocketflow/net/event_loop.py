"""Which asyncio event loop the servers and the client instance run on.

uvloop (libuv underneath) costs a fraction of asyncio's own loop per socket read, write and
cross-thread wake-up, which is most of what a broker answering small requests does. It is used
when installed (``auto``, the default); ``asyncio`` picks the standard library's loop, and
``uvloop`` insists on uvloop. The choice changes speed only: both loops run the same code.
"""

from __future__ import annotations

import asyncio
import enum
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: overrides the ``auto`` choice for every loop the process creates (``asyncio`` or ``uvloop``)
EVENT_LOOP_ENV = "ROCKETFLOW_EVENT_LOOP"


class EventLoopKind(enum.StrEnum):
    """An event loop choice: ``auto`` is uvloop when it is installed, else asyncio's own."""

    AUTO = "auto"
    ASYNCIO = "asyncio"
    UVLOOP = "uvloop"


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def parse_event_loop_kind(value: str | EventLoopKind) -> EventLoopKind:
    """``value`` as an `EventLoopKind`; a clear `ValueError` for anything else."""
    if isinstance(value, EventLoopKind):
        return value
    try:
        return EventLoopKind(str(value).strip().lower())
    except ValueError:
        choices = ", ".join(kind.value for kind in EventLoopKind)
        raise ValueError(f"unknown event loop {value!r} (expected one of: {choices})") from None


def resolve_event_loop_kind(kind: str | EventLoopKind = EventLoopKind.AUTO) -> EventLoopKind:
    """The loop ``kind`` stands for on this machine: `ASYNCIO` or `UVLOOP`, never `AUTO`.

    ``auto`` follows the ``ROCKETFLOW_EVENT_LOOP`` environment variable when it is set. Asking for
    uvloop where it is not installed is an error rather than a silent fallback.
    """
    chosen = parse_event_loop_kind(kind)
    if chosen is EventLoopKind.AUTO:
        from_env = os.environ.get(EVENT_LOOP_ENV, "").strip()
        chosen = parse_event_loop_kind(from_env) if from_env else EventLoopKind.AUTO
    if chosen is EventLoopKind.ASYNCIO:
        return chosen
    if _uvloop_factory() is not None:
        return EventLoopKind.UVLOOP
    if chosen is EventLoopKind.UVLOOP:
        raise ValueError("event loop 'uvloop' was asked for, but uvloop is not installed (pip install uvloop)")
    return EventLoopKind.ASYNCIO


def event_loop_factory(kind: str | EventLoopKind = EventLoopKind.AUTO) -> Callable[[], asyncio.AbstractEventLoop]:
    """A function making a new loop of ``kind`` (see `resolve_event_loop_kind`)."""
    if resolve_event_loop_kind(kind) is EventLoopKind.UVLOOP:
        factory = _uvloop_factory()
        assert factory is not None
        return factory
    return asyncio.new_event_loop


def new_event_loop(kind: str | EventLoopKind = EventLoopKind.AUTO) -> asyncio.AbstractEventLoop:
    """A new event loop of ``kind`` (see `resolve_event_loop_kind`)."""
    return event_loop_factory(kind)()


def run(main: Coroutine[Any, Any, T], kind: str | EventLoopKind = EventLoopKind.AUTO) -> T:
    """`asyncio.run` on a loop of ``kind``."""
    try:
        factory = event_loop_factory(kind)
    except BaseException:
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


__all__ = ["EVENT_LOOP_ENV", "EventLoopKind", "event_loop_factory", "new_event_loop", "parse_event_loop_kind",
           "resolve_event_loop_kind", "run"]
