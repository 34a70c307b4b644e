"""`ConsumeLock`: a reentrant lock owned by a thread or by an asyncio task.

Each process queue has one (`ProcessQueue.consume_lock`). An orderly consumer holds it around every
listener call on the queue, from a consume thread or, for an ``async def`` listener, from a task on
the client's loop; a rebalance that gives the queue up takes it (without blocking the loop) before
it releases the queue's broker lock, so that lock is never released in the middle of a batch.
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import TracebackType
from typing import Final


class ConsumeLock:
    """A reentrant lock whose owner is either a thread or an asyncio task.

    ``threading.RLock`` is owned by a thread, so a coroutine holding it across an ``await`` would
    not exclude another coroutine of the same loop (they share the thread). Here a thread takes
    the lock with `acquire` (or ``with``) and a coroutine with `acquire_async` (or ``async with``):
    the owner is then the current task, and other tasks of the same loop wait like other threads.
    Either kind of holder releases it with `release`. On an event loop thread never call the
    blocking `acquire`: waiting there would stall the loop (a non-blocking try is fine).
    """

    __slots__ = ("_cond", "_count", "_mutex", "_owner", "_waiters")

    #: How often a coroutine re-tries a held lock (it does not block the loop while waiting).
    ASYNC_POLL_MAX: Final = 0.005

    def __init__(self) -> None:
        # ``with self._mutex`` is C-level (cheaper than entering the condition); the condition
        # shares the mutex and is only notified when a thread waits in `acquire`.
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._owner: object = None
        self._count = 0
        self._waiters = 0

    def _take(self, owner: object) -> bool:
        # caller holds self._mutex
        if self._owner is None:
            self._owner = owner
            self._count = 1
            return True
        if self._owner == owner:
            self._count += 1
            return True
        return False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock for the calling thread (waiting at most ``timeout`` s; -1 = no limit)."""
        owner = threading.get_ident()
        with self._mutex:
            if self._owner is None:  # the common case, inlined
                self._owner = owner
                self._count = 1
                return True
            if self._take(owner):
                return True
            if not blocking:
                return False
            deadline = None if timeout < 0 else time.monotonic() + timeout
            self._waiters += 1
            try:
                while True:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                    if self._take(owner):
                        return True
            finally:
                self._waiters -= 1

    def try_acquire_for_task(self) -> bool:
        """Take the lock for the current asyncio task if it is free (or already the task's)."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("try_acquire_for_task() must be called from an asyncio task")
        return self.try_acquire_for(task)

    async def acquire_async(self, timeout: float | None = None) -> bool:
        """Take the lock for the current task, polling without blocking the loop; False after ``timeout`` s."""
        if self.try_acquire_for_task():
            return True
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        delay = 0.0005
        while True:
            if deadline is not None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                delay = min(delay, remaining)
            await asyncio.sleep(delay)
            if self.try_acquire_for_task():
                return True
            delay = min(delay * 2, self.ASYNC_POLL_MAX)

    def try_acquire_for(self, owner: object) -> bool:
        """Take the lock for ``owner`` if it is free (or already ``owner``'s), without waiting.

        ``owner`` is any object that stands for a holder which is neither one thread nor one task
        (e.g. work spread over several consume threads); release it with `release_for`.
        """
        with self._mutex:
            return self._take(owner)

    def release_for(self, owner: object) -> None:
        """Release one level held by ``owner`` (see `try_acquire_for`), from any thread or task."""
        with self._mutex:
            if self._owner is not owner:
                raise RuntimeError("ConsumeLock released for an owner that does not hold it")
            self._release_level()

    def release(self) -> None:
        """Release one level; the caller must be the owning thread or task (else `RuntimeError`)."""
        with self._mutex:
            owner = self._owner
            if owner is None:
                raise RuntimeError("release of an unlocked ConsumeLock")
            if owner != threading.get_ident():
                try:
                    task = asyncio.current_task()
                except RuntimeError:
                    task = None
                if task is None or owner is not task:
                    raise RuntimeError("ConsumeLock released by a thread or task that does not own it")
            self._release_level()

    def _release_level(self) -> None:
        # caller holds self._mutex and checked the owner
        self._count -= 1
        if self._count == 0:
            self._owner = None
            if self._waiters:
                self._cond.notify()

    def locked(self) -> bool:
        """Whether anyone holds the lock."""
        with self._mutex:
            return self._owner is not None

    def __enter__(self) -> ConsumeLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()

    async def __aenter__(self) -> ConsumeLock:
        await self.acquire_async()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"ConsumeLock(locked={self._owner is not None}, depth={self._count})"


__all__ = ["ConsumeLock"]
