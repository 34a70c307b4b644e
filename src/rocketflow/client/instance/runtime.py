"""`InstanceRuntime`: the event loop thread of a client instance, running work on it, and its clients.

The base of `ClientInstance`: the state every role of the instance shares (its config and client id,
the loop and its thread, the RPC layer), blocking and non-blocking hand-overs of coroutines to the
loop (`run`, `submit`), background tasks, and the producers and consumers registered on it. The
other roles (`routes`, `heartbeats`, `server_requests`) build on it; `client_instance` starts and
stops it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar, cast

from rocketflow.client.api import ClientAPI
from rocketflow.client.config import ClientConfig
from rocketflow.client.errors import MQClientError, MQTimeoutError
from rocketflow.net import RemotingClient

logger = logging.getLogger(__name__)

#: How long starting or stopping the loop thread may take.
LIFECYCLE_TIMEOUT: Final = 15.0

_T = TypeVar("_T")


def _settle_submitted(running: set[asyncio.Task[Any]], future: concurrent.futures.Future[_T],
                      task: asyncio.Task[_T]) -> None:
    """Copy a finished `ClientInstance.submit` task's outcome to its future (unless that was cancelled)."""
    running.discard(task)
    if task.cancelled():
        future.cancel()
        return
    if not future.set_running_or_notify_cancel():
        return
    error = task.exception()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(task.result())


def _cancel_submitted(loop: asyncio.AbstractEventLoop, task_ref: weakref.ref[asyncio.Task[Any]],
                      future: concurrent.futures.Future[Any]) -> None:
    """A `ClientInstance.submit` future is done: if it was cancelled, cancel its task (from any thread)."""
    if not future.cancelled():
        return
    task = task_ref()
    if task is not None and not task.done() and not loop.is_closed():
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(task.cancel)


class _Waiter:
    """What `ClientInstance.run` blocks on: a lock the loop releases once the task is done.

    Lighter than a ``concurrent.futures.Future`` (no condition variable, no callbacks list, no
    chaining), which matters for a synchronous send: this hand-back is paid once a call.
    """

    __slots__ = ("done", "error", "result", "task")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.result: Any = None
        self.error: BaseException | None = None
        self.task: asyncio.Task[Any] | None = None

    def start(self, running: set[asyncio.Task[Any]], coro: Coroutine[Any, Any, Any]) -> None:
        """On the loop: run ``coro`` as a task that settles this waiter."""
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except BaseException as exc:
            coro.close()
            self.error = exc
            self.done.release()
            raise
        self.task = task
        running.add(task)
        task.add_done_callback(functools.partial(self._settle, running))

    def _settle(self, running: set[asyncio.Task[Any]], task: asyncio.Task[Any]) -> None:
        running.discard(task)
        self.task = None
        if task.cancelled():
            self.error = concurrent.futures.CancelledError()
        else:
            self.error = task.exception()
            if self.error is None:
                self.result = task.result()
        self.done.release()

    def cancel(self) -> None:
        """On the loop: cancel the task if it still runs."""
        task = self.task
        if task is not None and not task.done():
            task.cancel()


async def maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class InstanceRuntime:
    """The loop, the hand-overs to it and the registered clients of one client instance."""

    def __init__(self, config: ClientConfig, client_id: str | None = None) -> None:
        self.config = config
        self.client_id = client_id or config.build_client_id()
        # never the registry lock here: start() holds that one while it waits for the loop
        self._clients_lock = threading.Lock()
        self._producers: dict[str, Any] = {}
        self._consumers: dict[str, Any] = {}
        #: shut down for good (a new instance is needed)
        self._closed = False
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._thread_id: int | None = None
        self._remoting: RemotingClient | None = None
        self._api: ClientAPI | None = None
        self._rebalance_event: asyncio.Event | None = None
        self._background: set[asyncio.Task[Any]] = set()
        #: tasks of `submit` still running (not cancelled at shutdown, as run_coroutine_threadsafe's are not)
        self._submitted: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ properties

    @property
    def started(self) -> bool:
        return self._loop is not None and not self._closed

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The instance's event loop (raises `MQClientError` if not started)."""
        if self._loop is None:
            raise MQClientError(f"client instance {self.client_id} is not started")
        return self._loop

    @property
    def api(self) -> ClientAPI:
        """The RPC layer (use it on `loop`)."""
        if self._api is None:
            raise MQClientError(f"client instance {self.client_id} is not started")
        return self._api

    @property
    def loop_thread(self) -> threading.Thread | None:
        return self._thread

    def in_loop_thread(self) -> bool:
        return self._thread_id is not None and threading.get_ident() == self._thread_id

    # ------------------------------------------------------------------ registration

    def register_producer(self, group: str, producer: Any) -> None:
        """Register a producer group; a second producer of the same group raises `MQClientError`."""
        with self._clients_lock:
            if group in self._producers:
                raise MQClientError(f"the producer group {group!r} is already registered on client {self.client_id} "
                                    "in this process; use another group name or share the producer")
            self._producers[group] = producer

    def register_consumer(self, group: str, consumer: Any) -> None:
        """Register a consumer group; a second consumer of the same group raises `MQClientError`."""
        if not callable(getattr(consumer, "consumer_data", None)):
            raise MQClientError(f"consumer {consumer!r} has no consumer_data() method")
        with self._clients_lock:
            if group in self._consumers:
                raise MQClientError(f"the consumer group {group!r} is already registered on client {self.client_id} "
                                    "in this process; use another group name or share the consumer")
            self._consumers[group] = consumer

    def producers(self) -> dict[str, Any]:
        with self._clients_lock:
            return dict(self._producers)

    def consumers(self) -> dict[str, Any]:
        with self._clients_lock:
            return dict(self._consumers)

    def select_consumer(self, group: str) -> Any:
        with self._clients_lock:
            return self._consumers.get(group)

    def select_producer(self, group: str) -> Any:
        with self._clients_lock:
            return self._producers.get(group)

    # ------------------------------------------------------------------ running coroutines

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        """Run ``coro`` on the instance's loop and wait for its result (from any other thread).

        Raises `MQClientError` when called on the loop thread (waiting there would deadlock: await
        the coroutine instead) or when the instance is not started; `MQTimeoutError` after ``timeout``.
        """
        if self.in_loop_thread():
            coro.close()
            raise MQClientError("blocking call on the client's own event loop thread would deadlock; "
                                "await the coroutine (or use the *_async variant) instead")
        loop = self._loop
        if loop is None or loop.is_closed():
            coro.close()
            raise MQClientError(f"client instance {self.client_id} is not started")
        waiter = _Waiter()
        try:
            loop.call_soon_threadsafe(waiter.start, self._submitted, coro)
        except RuntimeError:  # closed since the check above
            coro.close()
            raise MQClientError(f"client instance {self.client_id} is not started") from None
        if not waiter.done.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(waiter.cancel)
            raise MQTimeoutError(f"no result within {timeout}s")
        error = waiter.error
        if error is not None:
            waiter.error = None  # no cycle through the traceback's frames
            raise error
        return cast(_T, waiter.result)

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Schedule ``coro`` on the instance's loop; returns a thread-safe future.

        As `asyncio.run_coroutine_threadsafe` (cancelling the future cancels the task), except that
        the finished future keeps no reference to the task: the stdlib's chaining callbacks keep the
        task, its coroutine and context alive for as long as the future, so a caller holding many
        ``send_async`` futures grows the heap, and the full garbage collections that growth triggers
        stall the process.
        """
        loop = self._loop
        if loop is None or loop.is_closed():
            coro.close()
            raise MQClientError(f"client instance {self.client_id} is not started")
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        loop.call_soon_threadsafe(self._start_submitted, coro, future)
        return future

    def _start_submitted(self, coro: Coroutine[Any, Any, _T], future: concurrent.futures.Future[_T]) -> None:
        """On the loop: run a `submit`-ted coroutine as a task whose outcome settles ``future``."""
        if future.cancelled():
            coro.close()
            return
        try:
            loop = asyncio.get_running_loop()
            task = loop.create_task(coro)
        except BaseException as exc:
            coro.close()
            if future.set_running_or_notify_cancel():
                future.set_exception(exc)
            raise
        # Strong reference while it runs (the future no longer holds the task); a weak one to cancel it.
        self._submitted.add(task)
        task.add_done_callback(functools.partial(_settle_submitted, self._submitted, future))
        future.add_done_callback(functools.partial(_cancel_submitted, loop, weakref.ref(task)))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _periodic(self, name: str, first_delay: float, interval: float,
                        action: Callable[[], Awaitable[object]]) -> None:
        await asyncio.sleep(first_delay)
        while not self._stopping:
            try:
                await action()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("%s: periodic %s failed", self.client_id, name)
            await asyncio.sleep(interval)

    def rebalance_immediately(self) -> None:
        """Wake the rebalance service now (thread-safe)."""
        loop, event = self._loop, self._rebalance_event
        if loop is None or event is None or loop.is_closed():
            return
        if self.in_loop_thread():
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)


__all__ = ["LIFECYCLE_TIMEOUT", "InstanceRuntime", "maybe_await"]
