"""Storing messages: `PutService` takes a put from the caller to the commit log, the dispatch and the flush.

Puts serialise on one lock. A put is refused before the lock when the store cannot take any (not
running, a slave, a full disk) and under it when an earlier put's dispatch is still held back; the
append itself is the commit log's. The records are dispatched to their consume queues and the index
right after, under the same lock, and a SYNC_FLUSH put waits for its group commit outside it. A
slave's replicated bytes come in through `append_to_commit_log`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import errno
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Final

from rocketflow.store.clean_service import CleanService
from rocketflow.store.commit_log import CommitLog
from rocketflow.store.config import BrokerRole, StoreConfig
from rocketflow.store.dispatcher import DispatchBatch, Dispatcher
from rocketflow.store.errors import StoreNotRunningError
from rocketflow.store.flush import AsyncFlushService, GroupCommitService
from rocketflow.store.put_request import (
    AppendResult,
    EncodedBatchRequest,
    IllegalMessageError,
    PutMessageRequest,
    PutMessageStatus,
    PutRequests,
    waits_for_store,
)

log = logging.getLogger(__name__)

_DISK_FULL_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


class PutService:
    """The put path of a store: refusals, the commit-log append, dispatch, append listeners, flush waits."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog, dispatcher: Dispatcher,
                 clean_service: CleanService, clock_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self.commit_log = commit_log
        self.dispatcher = dispatcher
        self.clean_service = clean_service
        self._clock_ms = clock_ms
        self.lock = threading.Lock()
        #: whether puts are taken (the store is running); changed under `lock`
        self.accepting = False
        #: set when the store starts: the group commit a SYNC_FLUSH put waits for, or the async flush
        self.flush_service: AsyncFlushService | GroupCommitService | None = None
        #: a stored batch whose consume-queue / index writes failed (disk full); retried before the next put
        self.pending_dispatch: DispatchBatch | None = None
        self.dispatch_error = ""
        #: store time of the last record put or replicated (the checkpoint's logics time)
        self.last_store_timestamp = 0
        self.put_count = 0
        self.fail_count = 0
        #: called with the commit log's new end after every stored put (the HA service wakes its senders)
        self.append_listeners: list[Callable[[int], None]] = []

    def start(self, flush_service: AsyncFlushService | GroupCommitService) -> None:
        self.flush_service = flush_service
        self.accepting = True

    def stop(self) -> None:
        """Refuse puts from now on (a put under way finishes first)."""
        with self.lock:
            self.accepting = False

    def add_append_listener(self, listener: Callable[[int], None]) -> None:
        """Call `listener(commit-log end offset)` after each stored put, on the putting thread, outside the lock."""
        self.append_listeners = [*self.append_listeners, listener]

    def append_to_commit_log(self, offset: int, data: bytes) -> int:
        """A slave stores commit-log bytes replicated from its master at `offset`; returns the new end.

        Whole records among them are dispatched to consume queues and the index at once (held pulls
        wake as on a put); a record cut by the transfer's size is dispatched when its rest arrives.
        Raises ValueError when `offset` is not where this log ends (see `CommitLog.append_data`),
        StoreNotRunningError after shutdown and OSError when the disk refuses the bytes.
        """
        with self.lock:
            if not self.accepting:
                raise StoreNotRunningError("message store is not running")
            self.commit_log.append_data(offset, data)
            self._reput()
            return self.commit_log.max_offset

    def _reput(self) -> None:
        """Dispatch the whole records between the dispatched offset and the commit log's end (a slave)."""
        dispatcher = self.dispatcher
        end = self.commit_log.scan(dispatcher.dispatched_offset, False, self._dispatch_replicated,
                                   end_offset=self.commit_log.max_offset)
        if end > dispatcher.dispatched_offset:
            dispatcher.dispatched_offset = end

    def _dispatch_replicated(self, batch: DispatchBatch) -> None:
        self.dispatcher.dispatch(batch)
        table = self.commit_log.topic_queue_table  # next queue offsets, as a master's puts keep them
        for key, (first_offset, units) in batch.runs.items():
            table[key] = max(table.get(key, 0), first_offset + len(units) // 3)
        self.last_store_timestamp = batch.store_timestamp
        self.put_count += batch.record_count

    def put_message(self, request: PutMessageRequest) -> AppendResult:
        """Store one message; under SYNC_FLUSH, blocks until flushed (or FLUSH_DISK_TIMEOUT)."""
        return self.put_messages((request,))

    def put_messages(self, requests: PutRequests) -> AppendResult:
        """Store a batch (one contiguous write per segment); blocks for the flush under SYNC_FLUSH."""
        result, wait = self._put(requests)
        if not wait:
            return result
        assert isinstance(self.flush_service, GroupCommitService)
        future = self.flush_service.submit(result)
        try:
            return future.result(timeout=self.config.sync_flush_timeout_ms / 1000 + 1)
        except concurrent.futures.TimeoutError:
            return dataclasses.replace(result, status=PutMessageStatus.FLUSH_DISK_TIMEOUT)

    def put_message_async(self, request: PutMessageRequest) -> concurrent.futures.Future[AppendResult]:
        return self.put_messages_async((request,))

    def put_messages_async(
        self, requests: PutRequests
    ) -> concurrent.futures.Future[AppendResult]:
        """Store a batch; the future resolves once durable enough to acknowledge (at once under ASYNC_FLUSH)."""
        outcome = self.put_messages_or_wait(requests)
        if isinstance(outcome, AppendResult):
            future: concurrent.futures.Future[AppendResult] = concurrent.futures.Future()
            future.set_result(outcome)
            return future
        return outcome

    def put_messages_or_wait(
        self, requests: PutRequests
    ) -> AppendResult | concurrent.futures.Future[AppendResult]:
        """`put_messages_async` without a future when there is nothing to wait for: the result itself
        unless a SYNC_FLUSH put waits for its group commit (a future per put is a noticeable share of
        a single send's cost)."""
        result, wait = self._put(requests)
        if wait:
            assert isinstance(self.flush_service, GroupCommitService)
            return self.flush_service.submit(result)
        return result

    def put_encoded_batches(
        self, batches: Sequence[EncodedBatchRequest]
    ) -> list[AppendResult | concurrent.futures.Future[AppendResult]]:
        """`put_messages_or_wait` for each of several batches that arrived together, in their order.

        A run of them that the commit log can write at once (one-size batches that fit the last
        segment) takes one write and one dispatch; each batch still gets its own result, and a
        rejected batch fails alone.
        """
        refusal = self._refusal(len(batches))
        if refusal is not None:
            return [AppendResult.failed(*refusal) for _ in batches]
        results: list[AppendResult] = []
        last_end = -1
        with self.lock:
            refusal = self._refusal_under_lock(len(batches))
            if refusal is not None:
                return [AppendResult.failed(*refusal) for _ in batches]
            now = self._clock_ms() if self._clock_ms is not None else None
            while len(results) < len(batches):
                try:
                    taken, dispatch = self.commit_log.append_encoded_batches(batches[len(results):], now)
                except (IllegalMessageError, OSError) as exc:
                    results.append(self._append_failed(exc))
                    if isinstance(exc, OSError):  # nothing more can be written now
                        results += [self._append_failed(exc) for _ in batches[len(results):]]
                    continue
                refused = self._dispatched(dispatch)
                if refused is not None:
                    self.fail_count += len(batches) - len(results) - 1  # each refused batch, as one by one
                    results += [refused] * len(taken)
                    results += [AppendResult.failed(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.dispatch_error)
                                for _ in batches[len(results):]]
                    break
                self.last_store_timestamp = taken[-1].store_timestamp
                self.put_count += sum(result.message_count for result in taken)
                results += taken
                last_end = taken[-1].end_offset
        if last_end >= 0:
            self._notify_appended(last_end)
        outcomes: list[AppendResult | concurrent.futures.Future[AppendResult]] = list(results)
        if self.config.is_sync_flush:
            for i, (batch, result) in enumerate(zip(batches, results, strict=True)):
                if result.status is PutMessageStatus.PUT_OK and batch.wait_store_msg_ok:
                    assert isinstance(self.flush_service, GroupCommitService)
                    outcomes[i] = self.flush_service.submit(result)
            if self.flush_service is not None:
                self.flush_service.wakeup()
        return outcomes

    def _refusal(self, puts: int = 1) -> tuple[PutMessageStatus, str] | None:
        """Why none of `puts` puts can be taken now (checked before taking the put lock), or None."""
        if not self.accepting:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is not running"
        if self.config.broker_role is BrokerRole.SLAVE:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is a slave"
        clean = self.clean_service
        if clean.disk_full:
            self.fail_count += puts
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, (
                f"the broker's disk is full: {clean.disk_used_percent:.1f}% used, above "
                f"diskSpaceWarningLevelRatio {self.config.disk_space_warning_level_ratio}%")
        return None

    def _refusal_under_lock(self, puts: int = 1) -> tuple[PutMessageStatus, str] | None:
        if not self.accepting:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is shut down"
        if self.pending_dispatch is not None and not self._retry_pending_dispatch():
            self.fail_count += puts
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, self.dispatch_error
        return None

    def _append_failed(self, exc: IllegalMessageError | OSError) -> AppendResult:
        """The result of an append that raised (nothing written)."""
        self.fail_count += 1
        if isinstance(exc, IllegalMessageError):
            return AppendResult.failed(exc.status, str(exc))
        log.error("commit-log append failed (nothing written): %s", exc)
        # a full disk is RocketMQ's SERVICE_NOT_AVAILABLE ("the broker's disk is full")
        status = PutMessageStatus.SERVICE_NOT_AVAILABLE if exc.errno in _DISK_FULL_ERRNOS else \
            PutMessageStatus.CREATE_MAPPED_FILE_FAILED
        return AppendResult.failed(status, f"cannot write the commit log: {exc}")

    def _dispatched(self, dispatch: DispatchBatch) -> AppendResult | None:
        """Dispatch appended records; on failure hold them back (puts are refused until a retry succeeds)
        and return the failed result."""
        try:
            self.dispatcher.dispatch(dispatch)
        except OSError as exc:
            # The records are in the commit log but not yet in their consume queues: refuse puts until
            # a retry dispatches them (recovery would too). Not acknowledged, so a producer may resend.
            self.fail_count += 1
            self.pending_dispatch = dispatch
            self.dispatch_error = f"cannot write consume queue or index files: {exc}"
            log.error("dispatch failed, refusing puts until it succeeds: %s", exc)
            return AppendResult.failed(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.dispatch_error)
        return None

    def _notify_appended(self, end_offset: int) -> None:
        for listener in self.append_listeners:
            try:
                listener(end_offset)
            except Exception:  # a listener's bug must not fail a stored put
                log.exception("append listener failed")

    def _put(self, requests: PutRequests) -> tuple[AppendResult, bool]:
        refusal = self._refusal()
        if refusal is not None:
            return AppendResult.failed(*refusal), False
        with self.lock:
            refusal = self._refusal_under_lock()
            if refusal is not None:
                return AppendResult.failed(*refusal), False
            try:
                now = self._clock_ms() if self._clock_ms is not None else None
                if isinstance(requests, EncodedBatchRequest):
                    result, dispatch = self.commit_log.append_encoded_batch(requests, now)
                else:
                    result, dispatch = self.commit_log.append(requests, now)
            except (IllegalMessageError, OSError) as exc:
                return self._append_failed(exc), False
            refused = self._dispatched(dispatch)
            if refused is not None:
                return refused, False
            self.last_store_timestamp = result.store_timestamp
            self.put_count += result.message_count
        self._notify_appended(result.end_offset)
        if self.config.is_sync_flush:
            if waits_for_store(requests):
                return result, True
            if self.flush_service is not None:
                self.flush_service.wakeup()
        return result, False

    def _retry_pending_dispatch(self) -> bool:
        """Dispatch the batch whose dispatch failed (units and index entries already written are skipped)."""
        pending = self.pending_dispatch
        if pending is None:
            return True
        try:
            self.dispatcher.dispatch(pending)
        except OSError as exc:
            self.dispatch_error = f"cannot write consume queue or index files: {exc}"
            return False
        self.pending_dispatch = None
        self.last_store_timestamp = pending.store_timestamp
        log.warning("dispatch works again: accepting puts")
        return True


__all__ = ["PutService"]
