"""The commit log: every message of every topic, appended as records to fixed-size segment files.

`CommitLog` keeps the segments (`MappedFileQueue`), the next queue offset of every (topic, queue)
and the reads of records by offset. How records are packed and where they land is the append paths'
work: `message_append` for `PutMessageRequest`s, `batch_append` for encoded batches; `scan` walks the
records for recovery and dispatch. docs/design/store.md describes the whole.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from typing import Final

from rocketflow.protocol.codec import RecordDecodeError, decode_record
from rocketflow.protocol.ids import pack_host
from rocketflow.protocol.message import MessageExt
from rocketflow.protocol.record_layout import (
    MAGIC_CODE,
    MIN_HEAD_SIZE,
    RECORD_FIXED_SIZE_V4,
    SIZE_AND_MAGIC,
    SYS_FLAG_POSITION,
    field_position,
    hosts_variant,
)
from rocketflow.store.batch_append import append_encoded_batch, append_encoded_batches
from rocketflow.store.config import StoreConfig
from rocketflow.store.dispatcher import DispatchBatch
from rocketflow.store.mapped_file import MappedFileQueue
from rocketflow.store.message_append import append_messages
from rocketflow.store.put_request import (
    AppendResult,
    EncodedBatchRequest,
    IllegalMessageError,
    PutMessageRequest,
    PutMessageStatus,
    waits_for_store,
)
from rocketflow.store.scan import SCAN_BATCH_RECORDS, scan_records

_I32: Final = struct.Struct(">i")
#: where the store timestamp sits, for an IPv4 and an IPv6 born host (the field after the born host)
_STORE_TIMESTAMP_POSITIONS: Final = (field_position("store_timestamp"), field_position("store_timestamp", True))


class CommitLog:
    """Segments of records plus the per-(topic, queue) next queue offsets.

    Appends must be serialised by the caller (the store's put lock); reads need no lock.
    """

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.segment_size = config.commit_log_segment_size
        self.files = MappedFileQueue(config.commit_log_dir, self.segment_size)
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.default_store_host = pack_host(*config.store_host)

    # -- offsets ---------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """Offset of the first record still stored (RocketMQ's `getMinOffset`)."""
        first = self.files.first
        return first.file_from_offset if first is not None else 0

    @property
    def max_offset(self) -> int:
        return self.files.max_offset

    # -- append ----------------------------------------------------------------------------
    def append(
        self, requests: Sequence[PutMessageRequest], now_ms: int | None = None
    ) -> tuple[AppendResult, DispatchBatch]:
        """Append messages: one contiguous write per segment, all or nothing (see `append_messages`).

        Raises `IllegalMessageError` (nothing written) for a request that cannot be stored.
        """
        return append_messages(self, requests, int(time.time() * 1000) if now_ms is None else now_ms)

    def append_encoded_batch(self, batch: EncodedBatchRequest,
                             now_ms: int | None = None) -> tuple[AppendResult, DispatchBatch]:
        """Append an `EncodedBatchRequest`: what `append` stores for the same messages one by one, in one pass.

        Raises `IllegalMessageError` (nothing written) for a malformed or oversized message, naming it by
        its index in the batch.
        """
        return append_encoded_batch(self, batch, int(time.time() * 1000) if now_ms is None else now_ms)

    def append_encoded_batches(self, batches: Sequence[EncodedBatchRequest],
                               now_ms: int | None = None) -> tuple[list[AppendResult], DispatchBatch]:
        """Append the leading batches of `batches` that can be written at once, at least the first one
        (see `batch_append.append_encoded_batches`): their results and one dispatch for all."""
        return append_encoded_batches(self, batches, int(time.time() * 1000) if now_ms is None else now_ms)

    # -- reads -----------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes | None:
        """The `size` bytes at commit-log `offset`, or None if they are not (or no longer) stored."""
        mapped = self.files.find(offset, first_if_not_found=offset == 0)
        if mapped is None:
            return None
        return mapped.read(offset - mapped.file_from_offset, size)

    def read_record(self, offset: int) -> bytes | None:
        """The whole record at `offset` (its size read from the record), or None."""
        head = self.read(offset, 8)
        if head is None:
            return None
        size, magic = SIZE_AND_MAGIC.unpack(head)
        if magic != MAGIC_CODE or size <= 0:
            return None
        return self.read(offset, size)

    def decode_at(self, offset: int, size: int | None = None) -> MessageExt | None:
        """Decode the message at `offset` (None if absent or not a valid record)."""
        data = self.read(offset, size) if size is not None else self.read_record(offset)
        if data is None:
            return None
        try:
            msg, _ = decode_record(data)
        except RecordDecodeError:
            return None
        return msg

    def store_timestamp_at(self, offset: int, size: int) -> int:
        """STORETIMESTAMP of the record at `offset` (-1 if it cannot be read)."""
        head = self.read(offset, MIN_HEAD_SIZE)
        if head is None or size < RECORD_FIXED_SIZE_V4:
            return -1
        sys_flag = _I32.unpack_from(head, SYS_FLAG_POSITION)[0]
        data = self.read(offset + _STORE_TIMESTAMP_POSITIONS[hosts_variant(sys_flag) & 1], 8)
        if data is None:
            return -1
        return int.from_bytes(data, "big", signed=True)

    def data_from(self, offset: int, max_size: int | None = None) -> bytes | None:
        """Raw bytes from `offset` to the end of its segment's written data, at most `max_size` of them
        (a master's HA transfers, admin reads); None when the segment is gone or not written that far."""
        mapped = self.files.find(offset, first_if_not_found=offset == 0)
        if mapped is None:
            return None
        position = offset - mapped.file_from_offset
        size = mapped.wrote_position - position
        return mapped.read(position, size if max_size is None else min(size, max_size))

    # -- recovery --------------------------------------------------------------------------
    def scan(self, start_offset: int, verify_crc: bool, on_batch: Callable[[DispatchBatch], None] | None,
             after_crash: bool = False, end_offset: int | None = None, *, dispatch_from: int = 0,
             batch_records: int = SCAN_BATCH_RECORDS) -> int:
        """Walk records from `start_offset` while they are valid; returns the offset where they end
        (see `scan.scan_records`)."""
        return scan_records(self.files, self.config.delay_levels_ms, start_offset, verify_crc, on_batch,
                            after_crash, end_offset, dispatch_from=dispatch_from, batch_records=batch_records)

    def append_data(self, offset: int, data: bytes) -> None:
        """Write replicated commit-log bytes at `offset` (a slave's HA client); the caller holds the put lock.

        `offset` must be the end of the log, or, in an empty log, a segment start: the master sends
        raw bytes of one segment at a time, record boundaries wherever they fall. Raises ValueError
        when the bytes do not fit there (another position, or another segment size than the master's)
        and OSError when the disk refuses them.
        """
        segment_size = self.segment_size
        files = self.files
        if files.files:
            if offset != files.max_offset:
                raise ValueError(f"replicated data at {offset}, but the commit log ends at {files.max_offset}")
        elif offset % segment_size:
            raise ValueError(f"replicated data at {offset} for an empty commit log is not at a segment start "
                             f"(segment size {segment_size}: is it the master's mappedFileSizeCommitLog?)")
        mapped = files.last_for_write(offset)
        position = offset - mapped.file_from_offset
        if position + len(data) > segment_size:
            raise ValueError(f"{len(data)} replicated bytes at {offset} cross the end of the segment at "
                             f"{mapped.file_from_offset + segment_size}: the master's segment size differs")
        if data:
            mapped.append(data)

    def set_max_offset(self, offset: int) -> None:
        """Cut the log at `offset` (end of the last valid record) and fix every segment's positions."""
        self.files.truncate_dirty(offset)
        for mapped in self.files.files:
            end = mapped.file_from_offset + mapped.file_size
            position = mapped.file_size if end <= offset else offset - mapped.file_from_offset
            mapped.set_positions(position)

    def flush(self) -> int:
        """fsync every dirty segment; returns the flushed offset."""
        self.files.flush()
        return self.files.flushed_offset

    def close(self) -> None:
        self.files.close()


__all__ = [
    "AppendResult",
    "CommitLog",
    "EncodedBatchRequest",
    "IllegalMessageError",
    "PutMessageRequest",
    "PutMessageStatus",
    "waits_for_store",
]
