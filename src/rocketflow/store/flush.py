"""Disk flushing off the caller's thread: async commit-log flush, sync group commit, consume-queue flush.

Sync flush acknowledges a put only once an fsync covers its bytes. Putters hand their end offset
to `GroupCommitService`; its thread takes every request that queued up while the previous fsync
ran and covers them all with one fsync, so concurrent putters share flushes.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from rocketflow.store.commit_log import CommitLog
from rocketflow.store.mapped_file import PAGE_SIZE
from rocketflow.store.put_request import AppendResult, PutMessageStatus

log = logging.getLogger(__name__)


class ServiceThread:
    """A daemon thread running `run_once` every `interval_s`, woken early by `wakeup()`."""

    name = "service"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stopped = threading.Event()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"rocketflow-{self.name}", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        self._wakeup.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def shutdown(self) -> None:
        self._stopped.set()
        self._wakeup.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        self._thread = None

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._wakeup.wait(self.interval_s)
            self._wakeup.clear()
            if self._stopped.is_set():
                break
            try:
                self.run_once()
            except Exception:
                log.exception("%s failed", self.name)
        try:
            self.on_shutdown()
        except Exception:
            log.exception("%s shutdown failed", self.name)

    def run_once(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def on_shutdown(self) -> None:
        """Runs once on the service's thread after the loop ends."""


class FlushStats:
    """Counters shared by the flush services (tests check that group commit shares fsyncs)."""

    def __init__(self) -> None:
        self.commit_log_flushes = 0
        self.group_commit_requests = 0
        self.consume_queue_flushes = 0
        #: called with the seconds each commit-log flush (all dirty segments) took; None = not timed
        self.flush_latency_observer: Callable[[float], None] | None = None


class AsyncFlushService(ServiceThread):
    """Flushes the commit log every `flush_interval_commit_log_ms` (ASYNC_FLUSH)."""

    name = "flush-commitlog"

    def __init__(self, commit_log: CommitLog, stats: FlushStats, interval_ms: int, least_pages: int,
                 thorough_interval_ms: int, release_pages: bool) -> None:
        super().__init__(interval_ms / 1000)
        self.commit_log = commit_log
        self.stats = stats
        self.least_bytes = least_pages * PAGE_SIZE
        self.thorough_interval_s = thorough_interval_ms / 1000
        self.release_pages = release_pages
        self._last_thorough = time.monotonic()

    def run_once(self) -> None:
        now = time.monotonic()
        files = self.commit_log.files
        dirty = files.max_offset - files.flushed_offset
        if dirty <= 0:
            return
        if dirty < self.least_bytes and now - self._last_thorough < self.thorough_interval_s:
            return
        self._last_thorough = now
        flush_commit_log(self.commit_log, self.stats, self.release_pages)

    def on_shutdown(self) -> None:
        flush_commit_log(self.commit_log, self.stats, self.release_pages)


def flush_commit_log(commit_log: CommitLog, stats: FlushStats, release_pages: bool = False) -> int:
    """fsync every dirty segment; returns the flushed offset."""
    files = commit_log.files
    flushed = 0
    observer = stats.flush_latency_observer
    began = time.perf_counter() if observer is not None else 0.0
    wrote = False
    for mapped in files.files:
        if mapped.flushed_position < mapped.wrote_position:
            mapped.flush()
            stats.commit_log_flushes += 1
            wrote = True
        if release_pages and mapped.flushed_position > 0:
            # keep the newest 1 MiB mapped: tailing consumers read it right away
            mapped.release_flushed_pages(keep_bytes=1 << 20)
        flushed = mapped.file_from_offset + mapped.flushed_position
    if observer is not None and wrote:
        observer(time.perf_counter() - began)
    return flushed


@dataclasses.dataclass(slots=True)
class _FlushRequest:
    end_offset: int
    result: AppendResult
    future: concurrent.futures.Future[AppendResult]
    deadline: float


class GroupCommitService(ServiceThread):
    """SYNC_FLUSH: acknowledges puts once an fsync covers them, one fsync per group of waiting puts."""

    name = "group-commit"

    def __init__(self, commit_log: CommitLog, stats: FlushStats, timeout_ms: int, release_pages: bool) -> None:
        super().__init__(0.01)
        self.commit_log = commit_log
        self.stats = stats
        self.timeout_s = timeout_ms / 1000
        self.release_pages = release_pages
        self._lock = threading.Lock()
        self._pending: list[_FlushRequest] = []

    def submit(self, result: AppendResult) -> concurrent.futures.Future[AppendResult]:
        """A future resolved with `result` once flushed, or with FLUSH_DISK_TIMEOUT after the timeout."""
        future: concurrent.futures.Future[AppendResult] = concurrent.futures.Future()
        request = _FlushRequest(result.end_offset, result, future, time.monotonic() + self.timeout_s)
        with self._lock:
            self._pending.append(request)
            self.stats.group_commit_requests += 1
        self.wakeup()
        return future

    def run_once(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if batch or self.commit_log.files.max_offset > self.commit_log.files.flushed_offset:
            flushed = flush_commit_log(self.commit_log, self.stats, self.release_pages)
        else:
            return
        now = time.monotonic()
        retry: list[_FlushRequest] = []
        for request in batch:
            if flushed >= request.end_offset:
                _resolve(request.future, request.result)
            elif now >= request.deadline:
                _resolve(request.future, dataclasses.replace(request.result,
                                                             status=PutMessageStatus.FLUSH_DISK_TIMEOUT))
            else:
                retry.append(request)
        if retry:
            with self._lock:
                self._pending = retry + self._pending
            self.wakeup()

    def on_shutdown(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        flushed = flush_commit_log(self.commit_log, self.stats)
        for request in batch:
            status = PutMessageStatus.PUT_OK if flushed >= request.end_offset else PutMessageStatus.FLUSH_DISK_TIMEOUT
            _resolve(request.future, dataclasses.replace(request.result, status=status))


def _resolve(future: concurrent.futures.Future[AppendResult], result: AppendResult) -> None:
    if not future.done():
        future.set_result(result)


class ConsumeQueueFlushService(ServiceThread):
    """Flushes consume queues and index every `flush_interval_consume_queue_ms`, then the checkpoint.

    As RocketMQ's: a round flushes the consume-queue files with at least `least_pages` dirty pages, and
    every dirty one once `thorough_interval_ms` has passed since the last such round (and at shutdown).
    ``flush_all(least_pages)`` does the work.
    """

    name = "flush-consumequeue"

    def __init__(self, interval_ms: int, least_pages: int, thorough_interval_ms: int,
                 flush_all: Callable[[int], None]) -> None:
        super().__init__(interval_ms / 1000)
        self.least_pages = least_pages
        self.thorough_interval_s = thorough_interval_ms / 1000
        self._flush_all = flush_all
        self._last_thorough = time.monotonic()

    def run_once(self) -> None:
        least_pages = self.least_pages
        now = time.monotonic()
        if now - self._last_thorough >= self.thorough_interval_s:
            least_pages = 0
            self._last_thorough = now
        self._flush_all(least_pages)

    def on_shutdown(self) -> None:
        self._flush_all(0)
