"""Reading a consume queue's records for a pull: `ReadService.get_messages` and its three read paths.

A pull names a queue and a logical offset. The consume queue's units say where each record lies in
the commit log; the read copies the records (a run of back-to-back records as one chunk) up to the
pull's count and the transfer limits. Three paths give the same answer at different costs:
`_read_run` (the usual pull: the next records, all in memory and matching, found without a loop),
`_read_queue_vectorized` (big pulls: the units filtered with numpy) and `_scan_queue` (any pull,
unit by unit, the reference the other two fall back to). docs/design/store.md, "Reads", has the rules.
"""

from __future__ import annotations

import enum
import mmap
import struct
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate, compress, pairwise
from operator import add, le, ne
from typing import Final, Protocol, runtime_checkable

import numpy as np

from rocketflow.store.commit_log import CommitLog
from rocketflow.store.config import BrokerRole, StoreConfig
from rocketflow.store.consume_queue import (
    BLANK_UNIT_SIZE,
    CQ_UNIT_SIZE,
    UNIT,
    ConsumeQueue,
    ConsumeQueueTable,
    units_struct,
)

_I32: Final = struct.Struct(">i")
#: A consume-queue unit (`consume_queue.UNIT`) as numpy reads it: commit-log offset, size, tags code.
_UNIT_DTYPE: Final = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
#: Pulls of at least this many messages scan the consume queue with numpy (see `_read_queue_vectorized`).
VECTORIZED_PULL_MIN: Final = 128
#: a pull's scan window grows with its maxMsgNums up to this many units (the clients' own bound on
#: pullBatchSize), or the transfer counts when they are higher
MAX_SCAN_COUNT: Final = 1024
_INT32_MASK: Final = 0xFFFFFFFF


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
    """What a pull gets: status, next and bounding offsets, and the records (ready to concatenate).

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


class ReadService:
    """The pull reads of a store: consume-queue units to commit-log records, with the transfer limits."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog, consume_queues: ConsumeQueueTable) -> None:
        self.config = config
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        #: records more than this far behind the commit log's end count as on disk (the smaller transfer limits)
        self._memory_limit = config.total_physical_memory * config.access_message_in_memory_max_ratio // 100
        #: pulls of at least this many messages scan the consume queue with numpy
        self.vectorized_pull_min = VECTORIZED_PULL_MIN
        self.found_count = 0
        self.miss_count = 0

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
        """Read up to `max_count` records of a queue from logical `offset` (docs/design/store.md, "Reads").

        The store checks it is running; ``group`` is the puller's (unused by the read itself).
        """
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
        self.miss_count += 1
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
            self.miss_count += 1
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
            self.miss_count += 1
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
        if min(window) <= 0 or max(window) >= BLANK_UNIT_SIZE:
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
        self.found_count += 1
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
        first, size, tags = UNIT.unpack_from(units)
        if max_phys - first > self._memory_limit or size <= 0 or size >= BLANK_UNIT_SIZE:
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
        self.found_count += 1
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
        blank_size = BLANK_UNIT_SIZE
        for phys, size, tags_code in UNIT.iter_unpack(units):
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
                if rel + size <= seg_file.wrote_position and size != blank_size:
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
            self.found_count += 1
        else:
            self.miss_count += 1
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

        A big pull (Spark asks for 1,024 messages a pull) would otherwise pay the loop's cost per unit. Records
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
                    or int(chosen_sizes.max()) == BLANK_UNIT_SIZE:
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
            self.found_count += 1
        else:
            status = GetMessageStatus.NO_MATCHED_MESSAGE
            self.miss_count += 1
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


__all__ = [
    "GetMessageResult",
    "GetMessageStatus",
    "MessageFilter",
    "ReadService",
    "RecordMessageFilter",
    "TagsCodeFilter",
]
