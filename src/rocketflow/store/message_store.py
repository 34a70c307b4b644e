"""`MessageStore`: the broker's disk store (RocketMQ's DefaultMessageStore) as a thread-safe library.

The store is a facade over its parts: the commit log, consume queues and index (the files), the
`PutService` (puts), the `ReadService` (pull reads), `recovery` (start), the flush services and
retention. Appends serialise on one put lock; reads run lock-free against positions that only move
forward after the bytes behind them are written. Flushing, retention and checkpoints run on daemon
threads. Nothing here knows about asyncio: sync-flush puts return a `concurrent.futures.Future`
that an event loop can `asyncio.wrap_future`. docs/design/store.md describes the whole.
"""

from __future__ import annotations

import concurrent.futures
import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.store.checkpoint import (
    Checkpoint,
    StoreLock,
    create_abort_marker,
    remove_abort_marker,
)
from rocketflow.store.clean_service import CleanService, DiskUsage, disk_usage_percent
from rocketflow.store.commit_log import CommitLog
from rocketflow.store.config import StoreConfig
from rocketflow.store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueueTable
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
from rocketflow.store.put_request import AppendResult, EncodedBatchRequest, PutMessageRequest, PutRequests
from rocketflow.store.put_service import PutService
from rocketflow.store.read_service import (
    GetMessageResult,
    GetMessageStatus,
    MessageFilter,
    ReadService,
    RecordMessageFilter,
    TagsCodeFilter,
)
from rocketflow.store.recovery import recover

log = logging.getLogger(__name__)


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
        self.put_service = PutService(config, self.commit_log, self.dispatcher, self.clean_service, clock_ms)
        self.read_service = ReadService(config, self.commit_log, self.consume_queues)
        self._lock_file = StoreLock(config.lock_path)
        self._flush_service: AsyncFlushService | GroupCommitService | None = None
        self._cq_flush_service: ConsumeQueueFlushService | None = None
        self._running = False
        self._checkpoint_lock = threading.Lock()
        #: whether the previous run shut down cleanly (known after `start`)
        self.last_exit_ok = True
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
            recover(self.config, self.commit_log, self.consume_queues, self.index, self.dispatcher,
                    self.checkpoint.recover_from_offset, self.last_exit_ok)
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
        self.put_service.start(self._flush_service)
        self._running = True

    def shutdown(self) -> None:
        """Stop services, flush everything, write the checkpoint, remove the abort marker, unlock."""
        if not self._running:
            return
        self.put_service.stop()
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

    # ------------------------------------------------------------------ flush / checkpoint
    def _flush_logics_and_checkpoint(self, *, sync_index: bool | None = None, least_pages: int = 0) -> None:
        """fsync the consume queues (with `least_pages`, only files with that many dirty pages) and the index
        (all of it with ``sync_index``, by default when `message_index_safe`; else only its full files), then
        save the checkpoint. Its consume-queue offset advances only when no queue was left dirty."""
        if sync_index is None:
            sync_index = self.config.message_index_safe
        with self._checkpoint_lock:
            dispatched = self.dispatcher.dispatched_offset
            logics_ts = self.put_service.last_store_timestamp
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
        self.put_service.add_append_listener(listener)

    def append_to_commit_log(self, offset: int, data: bytes) -> int:
        """A slave stores commit-log bytes replicated from its master at `offset`; returns the new end
        (see `PutService.append_to_commit_log`)."""
        return self.put_service.append_to_commit_log(offset, data)

    def put_message(self, request: PutMessageRequest) -> AppendResult:
        """Store one message; under SYNC_FLUSH, blocks until flushed (or FLUSH_DISK_TIMEOUT)."""
        return self.put_service.put_messages((request,))

    def put_messages(self, requests: PutRequests) -> AppendResult:
        """Store a batch (one contiguous write per segment); blocks for the flush under SYNC_FLUSH."""
        return self.put_service.put_messages(requests)

    def put_message_async(self, request: PutMessageRequest) -> concurrent.futures.Future[AppendResult]:
        return self.put_service.put_messages_async((request,))

    def put_messages_async(self, requests: PutRequests) -> concurrent.futures.Future[AppendResult]:
        """Store a batch; the future resolves once durable enough to acknowledge (at once under ASYNC_FLUSH)."""
        return self.put_service.put_messages_async(requests)

    def put_messages_or_wait(self, requests: PutRequests) -> AppendResult | concurrent.futures.Future[AppendResult]:
        """`put_messages_async` without a future when there is nothing to wait for: the result itself unless a
        SYNC_FLUSH put waits for its group commit."""
        return self.put_service.put_messages_or_wait(requests)

    def put_encoded_batches(
        self, batches: Sequence[EncodedBatchRequest]
    ) -> list[AppendResult | concurrent.futures.Future[AppendResult]]:
        """`put_messages_or_wait` for each of several batches that arrived together, in their order (see
        `PutService.put_encoded_batches`)."""
        return self.put_service.put_encoded_batches(batches)

    # ------------------------------------------------------------------ gets
    def get_messages(self, group: str, topic: str, queue_id: int, offset: int, max_count: int,
                     message_filter: MessageFilter | None = None, max_bytes: int | None = None) -> GetMessageResult:
        """Read up to `max_count` records of a queue from logical `offset` (see `ReadService.get_messages`)."""
        if not self._running:
            raise StoreNotRunningError("message store is not running")
        return self.read_service.get_messages(group, topic, queue_id, offset, max_count, message_filter, max_bytes)

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
        if unit is None or unit[1] == BLANK_UNIT_SIZE:
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

    def topic_queues(self) -> dict[tuple[str, int], int]:
        """Snapshot of (topic, queue id) -> next queue offset."""
        return dict(self.commit_log.topic_queue_table)

    def delete_topics(self, topics: Sequence[str]) -> None:
        """Drop the consume queues of `topics` (their records age out of the commit log normally)."""
        with self.put_service.lock:
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
            "putMessageTimesTotal": str(self.put_service.put_count),
            "putMessageFailedTimes": str(self.put_service.fail_count),
            "getFoundTimesTotal": str(self.read_service.found_count),
            "getMissTimesTotal": str(self.read_service.miss_count),
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


__all__ = [
    "GetMessageResult",
    "GetMessageStatus",
    "MessageFilter",
    "MessageStore",
    "QueryMessageResult",
    "RecordMessageFilter",
    "TagsCodeFilter",
    "human_readable_bytes",
]
