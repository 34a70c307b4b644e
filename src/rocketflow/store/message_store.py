"""`MessageStore`: the broker's disk store (RocketMQ's DefaultMessageStore) as a thread-safe library.

Appends serialise on one put lock; reads run lock-free against positions that only move forward
after the bytes behind them are written. Flushing, retention and checkpoints run on daemon
threads. Nothing here knows about asyncio: sync-flush puts return a `concurrent.futures.Future`
that an event loop can `asyncio.wrap_future`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import errno
import logging
import mmap
import shutil
import struct
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, compress, pairwise
from operator import add, le, ne
from typing import Protocol, runtime_checkable

import numpy as np

from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.store.checkpoint import (
    Checkpoint,
    StoreLock,
    create_abort_marker,
    remove_abort_marker,
)
from rocketflow.store.clean_service import CleanService, DiskUsage, disk_usage_percent
from rocketflow.store.commit_log import (
    AppendResult,
    CommitLog,
    DispatchBatch,
    EncodedBatchRequest,
    IllegalMessageError,
    PutMessageRequest,
    PutMessageStatus,
    PutRequests,
    waits_for_store,
)
from rocketflow.store.config import BrokerRole, StoreConfig
from rocketflow.store.consume_queue import CQ_UNIT_SIZE, ConsumeQueue, ConsumeQueueTable, units_struct
from rocketflow.store.dispatcher import Dispatcher, DispatchListener, DispatchRunListener
from rocketflow.store.errors import StoreNotRunningError
from rocketflow.store.flush import (
    AsyncFlushService,
    ConsumeQueueFlushService,
    FlushStats,
    GroupCommitService,
    flush_commit_log,
)
from rocketflow.store.index import IndexService

log = logging.getLogger(__name__)

_UNITS = struct.Struct(">qiq")
_I32 = struct.Struct(">i")
#: A consume-queue unit as numpy reads it: commit-log offset, size, tags code (big-endian).
_UNIT_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
#: Pulls of at least this many messages scan the consume queue with numpy (see `_read_queue_vectorized`).
VECTORIZED_PULL_MIN = 128
#: a pull's scan window grows with its maxMsgNums up to this many units (the clients' own bound on
#: pullBatchSize), or the transfer counts when they are higher
MAX_SCAN_COUNT = 1024
_INT32_MASK = 0xFFFFFFFF
_DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class GetMessageStatus(enum.Enum):
    """Outcome of `get_messages` (RocketMQ's `GetMessageStatus`)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class MessageFilter(Protocol):
    """Consume-queue level filter of a pull (by tags code)."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...


@runtime_checkable
class RecordMessageFilter(MessageFilter, Protocol):
    """A filter that also looks at each record that passed the consume queue (e.g. its properties)."""

    def is_matched_by_commit_log(self, record: bytes) -> bool: ...


def _to_int32(value: int) -> int:
    value &= _INT32_MASK
    return value - 0x100000000 if value & 0x80000000 else value


@dataclass(frozen=True, slots=True)
class TagsCodeFilter:
    """Pass messages whose (int-cast) tags code is in `codes`; `codes=None` passes everything."""

    codes: frozenset[int] | None = None

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.codes is None or _to_int32(tags_code) in self.codes


class _SegmentClosed(Exception):
    """A commit-log segment was closed (deleted by retention) while a read still had to copy from it."""


def _copy_run(mm: mmap.mmap, start: int, end: int) -> bytes:
    try:
        return mm[start:end]
    except ValueError:
        raise _SegmentClosed from None


@dataclass(slots=True)
class GetMessageResult:
    """What a pull gets: status, offsets per PROTOCOL.md 4.1, and the records (ready to concatenate).

    ``chunks`` hold the records in queue order, each chunk one or more whole records that lie back to
    back in the commit log; ``queue_offsets`` has the logical offset of every record.
    """

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    chunks: list[bytes] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False

    @property
    def message_count(self) -> int:
        return len(self.queue_offsets)

    @property
    def buffers(self) -> list[bytes]:
        """Every record on its own, in queue order (split from the chunks)."""
        records: list[bytes] = []
        for chunk in self.chunks:
            pos, end = 0, len(chunk)
            while pos < end:
                size = _I32.unpack_from(chunk, pos)[0]
                records.append(chunk if size == end else chunk[pos:pos + size])
                pos += size
        return records

    def body(self) -> bytes:
        """The pull response body: the records back to back."""
        chunks = self.chunks
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


@dataclass(slots=True)
class QueryMessageResult:
    """Records found by key, plus the index's high-water marks (QUERY_MESSAGE response header)."""

    buffers: list[bytes]
    commit_log_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int

    def body(self) -> bytes:
        return b"".join(self.buffers)


class MessageStore:
    """Commit log + consume queues + index + flush + recovery + retention under one root directory."""

    def __init__(
        self,
        config: StoreConfig,
        *,
        disk_usage: DiskUsage = disk_usage_percent,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        """`disk_usage` and `clock_ms` (store timestamps) are injectable for tests."""
        self.config = config
        self._clock_ms = clock_ms
        self.commit_log = CommitLog(config)
        self.consume_queues = ConsumeQueueTable(config.consume_queue_dir, config.consume_queue_segment_units)
        self.index = IndexService(config.index_dir, config.max_hash_slot_num, config.max_index_num,
                                  config.index_build_batch)
        self.dispatcher = Dispatcher(self.consume_queues, self.index if config.message_index_enable else None)
        self.flush_stats = FlushStats()
        self.checkpoint = Checkpoint()
        #: the checkpoint values this store last saved: an idle flush round skips the write and its fsync
        self._saved_checkpoint: tuple[int, ...] | None = None
        self.clean_service = CleanService(config, self.commit_log, self.consume_queues, self.index, disk_usage)
        self._put_lock = threading.Lock()
        #: a stored batch whose consume-queue / index writes failed (disk full); retried before the next put
        self._pending_dispatch: DispatchBatch | None = None
        self._dispatch_error = ""
        self._lock_file = StoreLock(config.lock_path)
        self._flush_service: AsyncFlushService | GroupCommitService | None = None
        self._cq_flush_service: ConsumeQueueFlushService | None = None
        self._running = False
        self._last_store_timestamp = 0
        self._checkpoint_lock = threading.Lock()
        #: whether the previous run shut down cleanly (known after `start`)
        self.last_exit_ok = True
        self._memory_limit = config.total_physical_memory * config.access_message_in_memory_max_ratio // 100
        #: pulls of at least this many messages scan the consume queue with numpy
        self.vectorized_pull_min = VECTORIZED_PULL_MIN
        self._put_count = 0
        self._put_fail_count = 0
        #: called with the commit log's new end after every stored put (the HA service wakes its senders)
        self._append_listeners: list[Callable[[int], None]] = []
        self._get_found = 0
        self._get_miss = 0
        self._started_ms = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Lock the directory, load and recover the files, start the background services."""
        if self._running:
            return
        root = self.config.store_root
        root.mkdir(parents=True, exist_ok=True)
        self._lock_file.acquire()
        try:
            self.last_exit_ok = not create_abort_marker(self.config.abort_path)
            self.checkpoint = Checkpoint.load(self.config.checkpoint_path)
            self._saved_checkpoint = None
            self.commit_log.files.load()
            self.consume_queues.load()
            self.index.load(after_crash=not self.last_exit_ok)
            self._recover()
            if self.config.message_index_enable:
                self.index.prepare()
        except BaseException:
            self._close_files()
            self._lock_file.release()
            raise
        config = self.config
        if config.is_sync_flush:
            self._flush_service = GroupCommitService(self.commit_log, self.flush_stats, config.sync_flush_timeout_ms,
                                                     config.release_flushed_pages)
        else:
            self._flush_service = AsyncFlushService(
                self.commit_log, self.flush_stats, config.flush_interval_commit_log_ms,
                config.flush_commit_log_least_pages, config.flush_commit_log_thorough_interval_ms,
                config.release_flushed_pages)
        self._cq_flush_service = ConsumeQueueFlushService(
            config.flush_interval_consume_queue_ms, config.flush_consume_queue_least_pages,
            config.flush_consume_queue_thorough_interval_ms,
            lambda least_pages: self._flush_logics_and_checkpoint(least_pages=least_pages))
        self._flush_service.start()
        self._cq_flush_service.start()
        self.clean_service.start()
        self._started_ms = int(time.time() * 1000)
        self._running = True

    def shutdown(self) -> None:
        """Stop services, flush everything, write the checkpoint, remove the abort marker, unlock."""
        if not self._running:
            return
        with self._put_lock:
            self._running = False
        self.clean_service.shutdown()
        if self._flush_service is not None:
            self._flush_service.shutdown()
        if self._cq_flush_service is not None:
            self._cq_flush_service.shutdown()
        flush_commit_log(self.commit_log, self.flush_stats)
        self._flush_logics_and_checkpoint(sync_index=True)
        self._close_files()
        remove_abort_marker(self.config.abort_path)
        self._lock_file.release()

    def __enter__(self) -> MessageStore:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        return self._running

    def _close_files(self) -> None:
        self.commit_log.close()
        for queue in self.consume_queues:
            queue.close()
        self.index.close()

    # ------------------------------------------------------------------ recovery
    def _recover(self) -> None:
        config = self.config
        commit_log = self.commit_log
        for queue in self.consume_queues:
            queue.recover(check_units=not self.last_exit_ok)
        files = commit_log.files.files
        if not files:
            end = 0
            start = 0
        elif self.last_exit_ok:
            # clean shutdown: verify the last few segments only
            first_checked = files[max(0, len(files) - config.recover_normally_last_segments)]
            start = first_checked.file_from_offset
            end = commit_log.scan(start, config.check_crc_on_recover, None)
        else:
            start = self._abnormal_recovery_start()
            log.warning("store %s did not shut down cleanly: recovering from commit-log offset %d",
                        config.store_root, start)
            for queue in self.consume_queues:
                queue.truncate_dirty(start)
            end = commit_log.scan(start, config.check_crc_on_recover, self._dispatch_recovered, after_crash=True)
        commit_log.set_max_offset(end)
        for queue in self.consume_queues:
            queue.truncate_dirty(end)
        self.index.recovered(end)
        # rebuild consume queues that lag the commit log (e.g. consumequeue/ was deleted)
        dispatch_from = max((q.max_physic_offset for q in self.consume_queues), default=0)
        dispatch_from = max(dispatch_from, commit_log.min_offset)
        if dispatch_from < end:
            log.info("re-dispatching commit log from %d to %d", dispatch_from, end)
            self._redispatch(dispatch_from, end)
        self.dispatcher.dispatched_offset = end
        self._rebuild_topic_queue_table()

    def _abnormal_recovery_start(self) -> int:
        files = self.commit_log.files.files
        checkpoint_offset = self.checkpoint.recover_from_offset
        segment_size = self.commit_log.segment_size
        start = checkpoint_offset - checkpoint_offset % segment_size
        start = max(start, files[0].file_from_offset)
        return min(start, files[-1].file_from_offset)

    def _redispatch(self, start: int, end: int) -> None:
        # `start` may be mid-segment (a consume queue's end): walk from the segment start, dispatching
        # only records at or after `start`; units already present are skipped by the queues.
        segment_start = start - start % self.commit_log.segment_size
        segment_start = max(segment_start, self.commit_log.min_offset)
        self.commit_log.scan(segment_start, False, self._dispatch_recovered, end_offset=end, dispatch_from=start)

    def _dispatch_recovered(self, batch: DispatchBatch) -> None:
        """Dispatch records recovery walked (no listeners: no pull waits for them yet)."""
        self.dispatcher.dispatch(batch, notify=False)

    def _rebuild_topic_queue_table(self) -> None:
        min_phys = self.commit_log.min_offset
        table: dict[tuple[str, int], int] = {}
        for queue in self.consume_queues:
            table[(queue.topic, queue.queue_id)] = queue.max_offset
            queue.correct_min_offset(min_phys)
        self.commit_log.topic_queue_table = table

    # ------------------------------------------------------------------ flush / checkpoint
    def _flush_logics_and_checkpoint(self, *, sync_index: bool | None = None, least_pages: int = 0) -> None:
        """fsync the consume queues (with `least_pages`, only files with that many dirty pages) and the index
        (all of it with ``sync_index``, by default when `message_index_safe`; else only its full files), then
        save the checkpoint. Its consume-queue offset advances only when no queue was left dirty."""
        if sync_index is None:
            sync_index = self.config.message_index_safe
        with self._checkpoint_lock:
            dispatched = self.dispatcher.dispatched_offset
            logics_ts = self._last_store_timestamp
            logics_clean = True
            for queue in self.consume_queues:
                if not queue.flush(least_pages):
                    logics_clean = False
                self.flush_stats.consume_queue_flushes += 1
            self.index.flush(open_file=sync_index)
            checkpoint = self.checkpoint
            flushed = self.commit_log.files.flushed_offset
            if flushed > checkpoint.physic_offset:
                checkpoint.physic_offset = flushed
                checkpoint.physic_msg_timestamp = logics_ts
            if logics_clean:
                checkpoint.logics_phys_offset = max(checkpoint.logics_phys_offset, dispatched)
                checkpoint.logics_msg_timestamp = max(checkpoint.logics_msg_timestamp, logics_ts)
            checkpoint.index_msg_timestamp = max(checkpoint.index_msg_timestamp, self.index.synced_end_timestamp)
            values = (checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp,
                      checkpoint.index_msg_timestamp, checkpoint.physic_offset, checkpoint.logics_phys_offset)
            if values == self._saved_checkpoint:
                return
            try:
                checkpoint.save(self.config.checkpoint_path)
            except OSError:
                log.exception("could not save checkpoint")
            else:
                self._saved_checkpoint = values

    def flush(self) -> None:
        """fsync the commit log, consume queues, index and checkpoint now."""
        flush_commit_log(self.commit_log, self.flush_stats)
        self._flush_logics_and_checkpoint(sync_index=True)

    # ------------------------------------------------------------------ puts
    def add_dispatch_listener(self, listener: DispatchListener) -> None:
        """Call `listener(topic, queue_id, queue_offset, tags_code, store_timestamp)` for each stored message.

        Listeners run on the putting thread inside the put lock: keep them short, never put from them.
        """
        self.dispatcher.add_listener(listener)

    def add_dispatch_run_listener(self, listener: DispatchRunListener) -> None:
        """Call `listener(topic, queue_id, first_queue_offset, tags_codes, store_timestamp)` for each run of
        consecutive messages a put (or recovery) stored in one queue: cheaper than a call per message.

        Same rules as `add_dispatch_listener`.
        """
        self.dispatcher.add_run_listener(listener)

    def add_append_listener(self, listener: Callable[[int], None]) -> None:
        """Call `listener(commit-log end offset)` after each stored put, on the putting thread, outside the lock."""
        self._append_listeners = [*self._append_listeners, listener]

    def append_to_commit_log(self, offset: int, data: bytes) -> int:
        """A slave stores commit-log bytes replicated from its master at `offset`; returns the new end.

        Whole records among them are dispatched to consume queues and the index at once (held pulls
        wake as on a put); a record cut by the transfer's size is dispatched when its rest arrives.
        Raises ValueError when `offset` is not where this log ends (see `CommitLog.append_data`),
        StoreNotRunningError after shutdown and OSError when the disk refuses the bytes.
        """
        with self._put_lock:
            if not self._running:
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
        self._last_store_timestamp = batch.store_timestamp
        self._put_count += batch.record_count

    def put_message(self, request: PutMessageRequest) -> AppendResult:
        """Store one message; under SYNC_FLUSH, blocks until flushed (or FLUSH_DISK_TIMEOUT)."""
        return self.put_messages((request,))

    def put_messages(self, requests: PutRequests) -> AppendResult:
        """Store a batch (one contiguous write per segment); blocks for the flush under SYNC_FLUSH."""
        result, wait = self._put(requests)
        if not wait:
            return result
        assert isinstance(self._flush_service, GroupCommitService)
        future = self._flush_service.submit(result)
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
        unless a SYNC_FLUSH put waits for its group commit (a future per put is ~2 us of a single send)."""
        result, wait = self._put(requests)
        if wait:
            assert isinstance(self._flush_service, GroupCommitService)
            return self._flush_service.submit(result)
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
        with self._put_lock:
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
                    self._put_fail_count += len(batches) - len(results) - 1  # each refused batch, as one by one
                    results += [refused] * len(taken)
                    results += [AppendResult.failed(PutMessageStatus.SERVICE_NOT_AVAILABLE, self._dispatch_error)
                                for _ in batches[len(results):]]
                    break
                self._last_store_timestamp = taken[-1].store_timestamp
                self._put_count += sum(result.message_count for result in taken)
                results += taken
                last_end = taken[-1].end_offset
        if last_end >= 0:
            self._notify_appended(last_end)
        outcomes: list[AppendResult | concurrent.futures.Future[AppendResult]] = list(results)
        if self.config.is_sync_flush:
            for i, (batch, result) in enumerate(zip(batches, results, strict=True)):
                if result.status is PutMessageStatus.PUT_OK and batch.wait_store_msg_ok:
                    assert isinstance(self._flush_service, GroupCommitService)
                    outcomes[i] = self._flush_service.submit(result)
            if self._flush_service is not None:
                self._flush_service.wakeup()
        return outcomes

    def _refusal(self, puts: int = 1) -> tuple[PutMessageStatus, str] | None:
        """Why none of `puts` puts can be taken now (checked before taking the put lock), or None."""
        if not self._running:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is not running"
        if self.config.broker_role is BrokerRole.SLAVE:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is a slave"
        clean = self.clean_service
        if clean.disk_full:
            self._put_fail_count += puts
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, (
                f"the broker's disk is full: {clean.disk_used_percent:.1f}% used, above "
                f"diskSpaceWarningLevelRatio {self.config.disk_space_warning_level_ratio}%")
        return None

    def _refusal_under_lock(self, puts: int = 1) -> tuple[PutMessageStatus, str] | None:
        if not self._running:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is shut down"
        if self._pending_dispatch is not None and not self._retry_pending_dispatch():
            self._put_fail_count += puts
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, self._dispatch_error
        return None

    def _append_failed(self, exc: IllegalMessageError | OSError) -> AppendResult:
        """The result of an append that raised (nothing written)."""
        self._put_fail_count += 1
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
            self._put_fail_count += 1
            self._pending_dispatch = dispatch
            self._dispatch_error = f"cannot write consume queue or index files: {exc}"
            log.error("dispatch failed, refusing puts until it succeeds: %s", exc)
            return AppendResult.failed(PutMessageStatus.SERVICE_NOT_AVAILABLE, self._dispatch_error)
        return None

    def _notify_appended(self, end_offset: int) -> None:
        for listener in self._append_listeners:
            try:
                listener(end_offset)
            except Exception:  # a listener's bug must not fail a stored put
                log.exception("append listener failed")

    def _put(self, requests: PutRequests) -> tuple[AppendResult, bool]:
        refusal = self._refusal()
        if refusal is not None:
            return AppendResult.failed(*refusal), False
        with self._put_lock:
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
            self._last_store_timestamp = result.store_timestamp
            self._put_count += result.message_count
        self._notify_appended(result.end_offset)
        if self.config.is_sync_flush:
            if waits_for_store(requests):
                return result, True
            if self._flush_service is not None:
                self._flush_service.wakeup()
        return result, False

    def _retry_pending_dispatch(self) -> bool:
        """Dispatch the batch whose dispatch failed (units and index entries already written are skipped)."""
        pending = self._pending_dispatch
        if pending is None:
            return True
        try:
            self.dispatcher.dispatch(pending)
        except OSError as exc:
            self._dispatch_error = f"cannot write consume queue or index files: {exc}"
            return False
        self._pending_dispatch = None
        self._last_store_timestamp = pending.store_timestamp
        log.warning("dispatch works again: accepting puts")
        return True

    # ------------------------------------------------------------------ gets
    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        message_filter: MessageFilter | None = None,
        max_bytes: int | None = None,
    ) -> GetMessageResult:
        """Read up to `max_count` records of a queue from logical `offset` (PROTOCOL.md 4.1 semantics)."""
        if not self._running:
            raise StoreNotRunningError("message store is not running")
        queue = self.consume_queues.find(topic, queue_id)
        if queue is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, self._correct(offset, 0), 0, 0)
        min_offset = queue.min_offset
        max_offset = queue.max_offset
        if max_offset == 0:
            status = GetMessageStatus.NO_MESSAGE_IN_QUEUE
            next_offset = self._correct(offset, 0)
        elif offset < min_offset:
            status = GetMessageStatus.OFFSET_TOO_SMALL
            next_offset = self._correct(offset, min_offset)
        elif offset == max_offset:
            status = GetMessageStatus.OFFSET_OVERFLOW_ONE
            next_offset = self._correct(offset, offset)
        elif offset > max_offset:
            status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
            next_offset = self._correct(offset, min_offset if min_offset == 0 else max_offset)
        else:
            return self._read_queue(queue, offset, max_count, message_filter, max_bytes, min_offset, max_offset)
        self._get_miss += 1
        return GetMessageResult(status, next_offset, min_offset, max_offset)

    def _correct(self, old_offset: int, new_offset: int) -> int:
        if self.config.broker_role is not BrokerRole.SLAVE or self.config.offset_check_in_slave:
            return new_offset
        return old_offset

    def _read_queue(
        self,
        queue: ConsumeQueue,
        offset: int,
        max_count: int,
        message_filter: MessageFilter | None,
        max_bytes: int | None,
        min_offset: int,
        max_offset: int,
    ) -> GetMessageResult:
        found = queue.segment_for(offset)
        if found is None:
            self._get_miss += 1
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL,
                                    self._correct(offset, queue.roll_next_file(offset)), min_offset, max_offset)
        cq_file, position, readable_end = found
        max_phys = self.commit_log.files.max_offset
        byte_cap = max_bytes if max_bytes is not None and max_bytes > 0 else None
        codes: frozenset[int] | None = None
        generic_filter: MessageFilter | None = None
        record_filter: RecordMessageFilter | None = None
        if isinstance(message_filter, TagsCodeFilter):
            codes = message_filter.codes
        elif message_filter is not None:
            generic_filter = message_filter
            if isinstance(message_filter, RecordMessageFilter):
                record_filter = message_filter
        if generic_filter is None and 0 < max_count < self.vectorized_pull_min:
            # the common pull: the next records, in commit-log order and in memory, all matching
            run_units = cq_file.read(position, min(readable_end - position, (max_count + 1) * CQ_UNIT_SIZE))
            if run_units:
                run = self._read_run(run_units, offset, max_count, codes, byte_cap, min_offset, max_offset, max_phys)
                if run is not None:
                    return run
        # RocketMQ's window: 16000 bytes of units, more for a bigger batch; a maxMsgNums past what a pull may
        # return must not make one pull scan (and filter) a whole queue segment
        config = self.config
        scan_count = min(max_count, max(MAX_SCAN_COUNT, config.max_transfer_count_on_message_in_memory,
                                        config.max_transfer_count_on_message_in_disk))
        scan_bytes = min(readable_end - position, max(16000, scan_count * CQ_UNIT_SIZE))
        units = cq_file.read(position, scan_bytes) if scan_bytes > 0 else None
        if units is None:
            self._get_miss += 1
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL,
                                    self._correct(offset, queue.roll_next_file(offset)), min_offset, max_offset)
        if generic_filter is None and max_count >= self.vectorized_pull_min:
            vectorized = self._read_queue_vectorized(units, offset, max_count, codes, byte_cap, min_offset,
                                                     max_offset, max_phys)
            if vectorized is not None:
                return vectorized
        try:
            return self._scan_queue(units, offset, max_count, codes, generic_filter, record_filter, byte_cap,
                                    min_offset, max_offset, max_phys, merge=record_filter is None)
        except _SegmentClosed:  # retention deleted a segment under the scan: read record by record
            return self._scan_queue(units, offset, max_count, codes, generic_filter, record_filter, byte_cap,
                                    min_offset, max_offset, max_phys, merge=False)

    def _read_run(self, units: bytes, offset: int, max_count: int, codes: frozenset[int] | None,
                  byte_cap: int | None, min_offset: int, max_offset: int, max_phys: int) -> GetMessageResult | None:
        """`_scan_queue`'s result for a pull whose records follow one another in one segment, in memory,
        and all pass the filter: found without a loop over the units, each run of back-to-back records
        copied as one chunk.

        ``units`` holds up to ``max_count + 1`` units (the walk looks at the unit after the last it
        takes). Returns None, for the walk to decide, whenever any of that does not hold.
        """
        available = len(units) // CQ_UNIT_SIZE
        if available == 1:
            return self._read_one(units, offset, codes, min_offset, max_offset, max_phys)
        values = units_struct(available).unpack_from(units)
        phys = values[0::3]
        sizes = values[1::3]
        first = phys[0]
        memory_limit = self._memory_limit
        if max_phys - first > memory_limit:
            return None  # on disk: the walk applies the disk limits
        config = self.config
        limit_count = min(max_count, max(config.max_transfer_count_on_message_in_memory, 1), available)
        limit_bytes = config.max_transfer_bytes_on_message_in_memory
        if byte_cap is not None and byte_cap < limit_bytes:
            limit_bytes = byte_cap
        window = sizes[:limit_count]
        if min(window) <= 0 or max(window) >= 0x7FFFFFFF:
            return None  # blank or damaged units (and the running sizes must grow for the bisect)
        totals = list(accumulate(window))
        # the first record is taken whatever its size; the walk stops at the first that passes a limit
        count = max(bisect_right(totals, limit_bytes), 1)
        if codes is not None and not codes.issuperset(values[2:count * 3:3]):
            return None  # int32-cast matching and skipping are the walk's
        record_ends = list(map(add, phys[:count], sizes[:count]))
        starts = phys[1:count]
        if not all(map(le, record_ends, starts)):
            return None  # not in commit-log order
        segment = self.commit_log.files.find(first)
        if segment is None:
            return None
        base = segment.file_from_offset
        if record_ends[-1] - base > segment.wrote_position:
            return None  # not all written, or not all in this segment
        mm = segment.mm
        # one chunk a run of back-to-back records: runs end where a record does not start at the last one's end
        bounds = [0, *compress(range(1, count), map(ne, record_ends, starts)), count]
        try:
            chunks = [_copy_run(mm, phys[low] - base, record_ends[high - 1] - base) for low, high in pairwise(bounds)]
        except _SegmentClosed:
            return None
        self._get_found += 1
        last_looked_at = phys[count] if count < available else phys[count - 1]
        return GetMessageResult(
            status=GetMessageStatus.FOUND,
            next_begin_offset=offset + count,
            min_offset=min_offset,
            max_offset=max_offset,
            chunks=chunks,
            queue_offsets=list(range(offset, offset + count)),
            buffer_total_size=totals[count - 1],
            suggest_pulling_from_slave=max_phys - last_looked_at > memory_limit,
        )

    def _read_one(self, units: bytes, offset: int, codes: frozenset[int] | None, min_offset: int,
                  max_offset: int, max_phys: int) -> GetMessageResult | None:
        """`_read_run` of the last unit of a queue (a long-polled pull woken by one message): the same
        answer in a few steps, or None for the walk to decide."""
        first, size, tags = _UNITS.unpack_from(units)
        if max_phys - first > self._memory_limit or size <= 0 or size >= 0x7FFFFFFF:
            return None
        if codes is not None and tags not in codes:
            return None
        segment = self.commit_log.files.find(first)
        if segment is None:
            return None
        start = first - segment.file_from_offset
        if start + size > segment.wrote_position:
            return None
        try:
            chunk = _copy_run(segment.mm, start, start + size)
        except _SegmentClosed:
            return None
        self._get_found += 1
        return GetMessageResult(status=GetMessageStatus.FOUND, next_begin_offset=offset + 1, min_offset=min_offset,
                                max_offset=max_offset, chunks=[chunk], queue_offsets=[offset], buffer_total_size=size,
                                suggest_pulling_from_slave=False)

    def _scan_queue(self, units: bytes, offset: int, max_count: int, codes: frozenset[int] | None,
                    generic_filter: MessageFilter | None, record_filter: RecordMessageFilter | None,
                    byte_cap: int | None, min_offset: int, max_offset: int, max_phys: int, *,
                    merge: bool) -> GetMessageResult:
        """`_read_queue`'s walk of the units, one record after the other.

        With ``merge``, records that lie back to back in one segment are copied out as one chunk
        when the run ends (a copy per record costs twice as much for 4 KiB messages); a segment
        closed by retention before then raises `_SegmentClosed`, and the caller walks again without.
        """
        config = self.config
        commit_files = self.commit_log.files
        memory_limit = self._memory_limit
        mem_bytes = config.max_transfer_bytes_on_message_in_memory
        mem_count = config.max_transfer_count_on_message_in_memory
        disk_bytes = config.max_transfer_bytes_on_message_in_disk
        disk_count = config.max_transfer_count_on_message_in_disk
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        buffers: list[bytes] = []
        queue_offsets: list[int] = []
        total = 0
        count = 0
        next_file_start = -1
        max_phys_pulling = 0
        segment_size = commit_files.file_size
        seg_from = seg_end = -1
        seg_mm = None
        seg_file = None
        scanned = 0
        run_mm: mmap.mmap | None = None  # the pending run of back-to-back records (merge)
        run_start = run_end = 0
        for phys, size, tags_code in _UNITS.iter_unpack(units):
            max_phys_pulling = phys
            if next_file_start >= 0 and phys < next_file_start:
                scanned += 1
                continue
            if count:
                if max_count <= count:
                    break
                if max_phys - phys > memory_limit:
                    if total + size > disk_bytes or count > disk_count - 1:
                        break
                elif total + size > mem_bytes or count > mem_count - 1:
                    break
                if byte_cap is not None and total + size > byte_cap:
                    break
            scanned += 1
            if codes is not None:
                if _to_int32(tags_code) not in codes:
                    continue
            elif generic_filter is not None and not generic_filter.is_matched_by_consume_queue(tags_code):
                continue
            if not seg_from <= phys < seg_end:
                seg_file = commit_files.find(phys)
                if seg_file is None:
                    seg_from = seg_end = -1
                else:
                    seg_from = seg_file.file_from_offset
                    seg_end = seg_from + segment_size
                    seg_mm = seg_file.mm
            data = None
            readable = False
            if seg_file is not None and seg_mm is not None:
                rel = phys - seg_from
                if rel + size <= seg_file.wrote_position and size != 0x7FFFFFFF:
                    if merge:
                        readable = True
                    else:
                        try:
                            data = seg_mm[rel : rel + size]
                            readable = True
                        except ValueError:  # segment deleted by retention meanwhile
                            pass
            if not readable:
                if total == 0:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_file_start = phys + segment_size - phys % segment_size
                seg_from = seg_end = -1
                continue
            if data is None:
                if run_mm is seg_mm and rel == run_end:
                    run_end += size
                else:
                    if run_mm is not None:
                        buffers.append(_copy_run(run_mm, run_start, run_end))
                    run_mm, run_start, run_end = seg_mm, rel, rel + size
            elif record_filter is not None and not record_filter.is_matched_by_commit_log(data):
                next_file_start = -1
                continue
            else:
                buffers.append(data)
            queue_offsets.append(offset + scanned - 1)
            total += size
            count += 1
            status = GetMessageStatus.FOUND
            next_file_start = -1
        if run_mm is not None:
            buffers.append(_copy_run(run_mm, run_start, run_end))
        if status is GetMessageStatus.FOUND:
            self._get_found += 1
        else:
            self._get_miss += 1
        return GetMessageResult(
            status=status,
            next_begin_offset=offset + scanned,
            min_offset=min_offset,
            max_offset=max_offset,
            chunks=buffers,
            queue_offsets=queue_offsets,
            buffer_total_size=total,
            suggest_pulling_from_slave=max_phys - max_phys_pulling > memory_limit,
        )

    def _read_queue_vectorized(self, units: bytes, offset: int, max_count: int, codes: frozenset[int] | None,
                               byte_cap: int | None, min_offset: int, max_offset: int,
                               max_phys: int) -> GetMessageResult | None:
        """`_read_queue`'s scan of the units done with numpy: the same records, offsets and status.

        A big pull (Spark's 1,024 a pull) would otherwise spend ~1 us a message in the loop. Records
        that lie back to back in the commit log are read as one chunk. Returns None, for the loop to
        decide, when a chosen record is not readable in one segment (retention, a segment boundary).
        """
        table = np.frombuffer(units, dtype=_UNIT_DTYPE)
        unit_count = len(table)
        if not unit_count:
            return None
        phys = table["phys"].astype(np.int64)
        sizes = table["size"].astype(np.int64)
        if codes is None:
            matched = np.ones(unit_count, dtype=bool)
        else:
            # the int32 cast wraps like `_to_int32`
            tags = table["tags"].astype(np.int64).astype(np.int32)
            matched = np.isin(tags, np.fromiter(codes, dtype=np.int64, count=len(codes)))
        config = self.config
        taken_sizes = np.where(matched, sizes, 0)
        total_before = np.cumsum(taken_sizes) - taken_sizes
        count_before = np.cumsum(matched, dtype=np.int64) - matched
        on_disk = max_phys - phys > self._memory_limit
        byte_caps = np.where(on_disk, config.max_transfer_bytes_on_message_in_disk,
                             config.max_transfer_bytes_on_message_in_memory)
        count_caps = np.where(on_disk, config.max_transfer_count_on_message_in_disk,
                              config.max_transfer_count_on_message_in_memory)
        ends_here = ((count_before >= max_count) | (total_before + sizes > byte_caps)
                     | (count_before > count_caps - 1))
        if byte_cap is not None:
            ends_here |= total_before + sizes > byte_cap
        ends_here &= count_before > 0
        stops = np.flatnonzero(ends_here)
        scanned = int(stops[0]) if len(stops) else unit_count
        chosen = np.flatnonzero(matched[:scanned])
        chunks: list[bytes] = []
        total = 0
        if len(chosen):
            chosen_phys = phys[chosen]
            chosen_sizes = sizes[chosen]
            chosen_ends = chosen_phys + chosen_sizes
            segment = self.commit_log.files.find(int(chosen_phys[0]))
            if segment is None or segment.mm is None or int(chosen_sizes.min()) <= 0 \
                    or int(chosen_sizes.max()) == 0x7FFFFFFF:
                return None
            base = segment.file_from_offset
            if int(chosen_phys.min()) < base or int(chosen_ends.max()) - base > segment.wrote_position:
                return None
            breaks = np.flatnonzero(chosen_phys[1:] != chosen_ends[:-1]) + 1
            run_starts = np.concatenate(([0], breaks)).tolist()
            run_stops = np.concatenate((breaks, [len(chosen)])).tolist()
            mm = segment.mm
            try:
                for first, stop in zip(run_starts, run_stops, strict=True):
                    chunks.append(mm[int(chosen_phys[first]) - base:int(chosen_ends[stop - 1]) - base])
            except ValueError:  # segment deleted by retention meanwhile
                return None
            total = int(chosen_sizes.sum())
            status = GetMessageStatus.FOUND
            self._get_found += 1
        else:
            status = GetMessageStatus.NO_MATCHED_MESSAGE
            self._get_miss += 1
        max_phys_pulling = int(phys[scanned] if scanned < unit_count else phys[-1])
        return GetMessageResult(
            status=status,
            next_begin_offset=offset + scanned,
            min_offset=min_offset,
            max_offset=max_offset,
            chunks=chunks,
            queue_offsets=(chosen + offset).tolist(),
            buffer_total_size=total,
            suggest_pulling_from_slave=max_phys - max_phys_pulling > self._memory_limit,
        )

    # ------------------------------------------------------------------ offsets & lookups
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.consume_queues.find(topic, queue_id)
        return queue.max_offset if queue is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The queue's min offset, or -1 if the queue does not exist (as RocketMQ)."""
        queue = self.consume_queues.find(topic, queue_id)
        return queue.min_offset if queue is not None else -1

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        """Commit-log offset of the message at logical `offset` (0 if absent)."""
        queue = self.consume_queues.find(topic, queue_id)
        unit = queue.unit_at(offset) if queue is not None else None
        return unit[0] if unit is not None else 0

    def get_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        queue = self.consume_queues.find(topic, queue_id)
        if queue is None:
            return 0
        return queue.offset_by_timestamp(timestamp, self.commit_log.min_offset, self.commit_log.store_timestamp_at)

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at logical `offset`, -1 if absent."""
        queue = self.consume_queues.find(topic, queue_id)
        unit = queue.unit_at(offset) if queue is not None else None
        if unit is None or unit[1] == 0x7FFFFFFF:
            return -1
        return self.commit_log.store_timestamp_at(unit[0], unit[1])

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        """Store time of a queue's first message (or of the commit log's first record); -1 if none."""
        if topic is None:
            first = self.commit_log.min_offset
            return self.commit_log.store_timestamp_at(first, 1 << 20)
        queue = self.consume_queues.find(topic, queue_id)
        if queue is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, queue.min_offset)

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> MessageExt | None:
        """Decode the message stored at a commit-log offset (e.g. from an offset msg id)."""
        return self.commit_log.decode_at(commit_log_offset, size)

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> bytes | None:
        """The raw record at a commit-log offset."""
        if size is None:
            return self.commit_log.read_record(commit_log_offset)
        return self.commit_log.read(commit_log_offset, size)

    def query_message(self, topic: str, key: str, max_num: int, begin_timestamp: int,
                      end_timestamp: int) -> QueryMessageResult:
        """Records of `topic` with `key` among their KEYS or as UNIQ_KEY, stored within the time range."""
        max_num = max(0, min(max_num, self.config.max_msgs_num_batch))
        index_key = f"{topic}#{key}".encode("utf-8", "replace")
        offsets = self.index.query([index_key], max_num * 4 if max_num else 0, begin_timestamp, end_timestamp)
        buffers: list[bytes] = []
        found_offsets: list[int] = []
        seen: set[int] = set()
        for phys in offsets:
            if len(buffers) >= max_num:
                break
            if phys in seen:
                continue
            seen.add(phys)
            record = self.commit_log.read_record(phys)
            msg = self.commit_log.decode_at(phys, len(record)) if record is not None else None
            if record is None or msg is None or msg.topic != topic:
                continue  # removed by retention, cut by recovery, or a hash collision
            keys = msg.properties.get(MessageConst.KEYS, "")
            if key != msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) and \
                    key not in keys.split(MessageConst.KEY_SEPARATOR):
                continue
            buffers.append(record)
            found_offsets.append(phys)
        last = self.index.files[-1] if self.index.files else None
        return QueryMessageResult(
            buffers=buffers,
            commit_log_offsets=found_offsets,
            index_last_update_timestamp=last.end_timestamp if last is not None else 0,
            index_last_update_phy_offset=last.end_phy_offset if last is not None else 0,
        )

    def get_commit_log_data(self, offset: int) -> bytes | None:
        """Raw commit-log bytes from `offset` to the end of its segment's data."""
        return self.commit_log.data_from(offset)

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.consume_queues.find(topic, queue_id)
        return queue.max_offset - queue.min_offset if queue is not None else -1

    def topic_queues(self) -> dict[tuple[str, int], int]:
        """Snapshot of (topic, queue id) -> next queue offset."""
        return dict(self.commit_log.topic_queue_table)

    def delete_topics(self, topics: Sequence[str]) -> None:
        """Drop the consume queues of `topics` (their records age out of the commit log normally)."""
        with self._put_lock:
            for topic in topics:
                self.consume_queues.remove(topic)
                self.commit_log.topic_queue_table = {
                    key: value for key, value in self.commit_log.topic_queue_table.items() if key[0] != topic
                }

    def clean_expired(self, now_ms: int | None = None, *, manual: bool = False) -> int:
        """Run one retention pass now; returns segments deleted.

        `manual` deletes expired segments whatever the hour (admin `deleteExpiredCommitLog`).
        """
        if manual:
            self.clean_service.manual_delete_requested = True
        return self.clean_service.clean(now_ms)

    def runtime_info(self) -> dict[str, str]:
        """Counters for admin tools (GET_BROKER_RUNTIME_INFO)."""
        commit_log = self.commit_log
        return {
            "commitLogMinOffset": str(commit_log.min_offset),
            "commitLogMaxOffset": str(commit_log.max_offset),
            "commitLogFlushedOffset": str(commit_log.files.flushed_offset),
            "commitLogSegments": str(len(commit_log.files.files)),
            "consumeQueueCount": str(len(self.consume_queues)),
            "indexFiles": str(len(self.index.files)),
            "putMessageTimesTotal": str(self._put_count),
            "putMessageFailedTimes": str(self._put_fail_count),
            "getFoundTimesTotal": str(self._get_found),
            "getMissTimesTotal": str(self._get_miss),
            "commitLogFlushes": str(self.flush_stats.commit_log_flushes),
            "dispatchBehindBytes": str(commit_log.max_offset - self.dispatcher.dispatched_offset),
            "earliestMessageTimeStamp": str(self.get_earliest_message_time()),
            "bootTimestamp": str(self._started_ms),
            **self._disk_info(),
        }

    def _disk_info(self) -> dict[str, str]:
        """RocketMQ's disk keys: the used share (0..1) of the file systems holding the commit log and the
        consume queues, and the store root's total and free space (``-1`` / absent when unreadable)."""
        config = self.config
        info: dict[str, str] = {}
        for key, path in (("commitLogDiskRatio", config.commit_log_dir), ("consumeQueueDiskRatio",
                                                                          config.consume_queue_dir)):
            try:
                info[key] = str(round(self.clean_service.disk_usage(path) / 100.0, 4))
            except OSError:
                info[key] = "-1"
        try:
            usage = shutil.disk_usage(config.store_root)
        except OSError:
            return info
        info["commitLogDirCapacity"] = (f"Total : {human_readable_bytes(usage.total)}, "
                                        f"Free : {human_readable_bytes(usage.free)}.")
        return info


def human_readable_bytes(count: int) -> str:
    """``count`` bytes in binary units with one decimal, as RocketMQ prints disk sizes (``93.1 GiB``)."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in "KMGTPE":
        value /= 1024
        if value < 1024 or unit == "E":
            return f"{value:.1f} {unit}iB"
    raise AssertionError("unreachable")
