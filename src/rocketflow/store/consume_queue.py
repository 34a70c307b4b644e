"""Consume queues: per topic and queue id, 20-byte units `[i64 phys offset][i32 size][i64 tags code]`.

The logical offset of a message is the index of its unit. Units live in segment files of
`consume_queue_segment_units` units under `consumequeue/<topic>/<queueId>/<20-digit start byte>`.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from rocketflow.store.mapped_file import MappedFile, MappedFileQueue

log = logging.getLogger(__name__)

CQ_UNIT_SIZE = 20
UNIT = struct.Struct(">qiq")
_UNIT_STRUCTS: dict[int, struct.Struct] = {}


def units_struct(count: int) -> struct.Struct:
    """``count`` units as one struct (phys, size, tags code, phys, ...); cached up to 256 units."""
    packer = _UNIT_STRUCTS.get(count)
    if packer is None:
        packer = struct.Struct(">" + "qiq" * count)
        if count <= 256:
            _UNIT_STRUCTS[count] = packer
    return packer

#: size field of the filler units written before the first real unit of a queue that starts late
BLANK_UNIT_SIZE = 0x7FFFFFFF
_BLANK_UNIT = UNIT.pack(0, BLANK_UNIT_SIZE, 0)


_NONZERO = bytes([0] + [1] * 255)
_SIGN_CLEAR = bytes([1] * 128 + [0] * 128)


def first_invalid_unit(data: bytes) -> int:
    """Index of the first unit of `data` (whole units) with a negative offset or a size <= 0; -1 if none.

    Works on the columns of the unit array (every 20th byte) so a 6 MB file is checked at C speed.
    """
    count = len(data) // CQ_UNIT_SIZE
    if count == 0:
        return -1
    if len(data) != count * CQ_UNIT_SIZE:
        data = data[: count * CQ_UNIT_SIZE]
    size_bits = 0
    for column in range(8, 12):
        size_bits |= int.from_bytes(data[column::CQ_UNIT_SIZE])
    valid = (int.from_bytes(size_bits.to_bytes(count).translate(_NONZERO))
             & int.from_bytes(data[8::CQ_UNIT_SIZE].translate(_SIGN_CLEAR))
             & int.from_bytes(data[0::CQ_UNIT_SIZE].translate(_SIGN_CLEAR)))
    return valid.to_bytes(count).find(0)


class ConsumeQueue:
    """One topic/queue's index of commit-log positions, in logical-offset order."""

    def __init__(self, topic: str, queue_id: int, directory: Path, units_per_file: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.units_per_file = units_per_file
        self.file_size = units_per_file * CQ_UNIT_SIZE
        self.files = MappedFileQueue(directory, self.file_size)
        #: first valid unit, as a byte position (RocketMQ's `minLogicOffset`)
        self.min_logic_offset = 0
        #: end (offset + size) of the last unit's record in the commit log
        self.max_physic_offset = 0

    # -- load / recovery -------------------------------------------------------------------
    def load(self) -> None:
        self.files.load()

    def recover(self, *, check_units: bool = False) -> None:
        """Find where the units end; files before the last are taken as full.

        After a clean shutdown the last file's units are a prefix, found by binary search. After a crash
        (`check_units`) pages may have reached the disk out of order, leaving zeroed units before written
        ones: every unit of the last three files is checked in order, as RocketMQ does, and the queue is
        cut at the first one that is not `offset >= 0 and size > 0` (recovery re-dispatches the rest).
        """
        files = self.files.files
        if not files:
            return
        for mapped in files[:-1]:
            mapped.set_positions(self.file_size)
        if check_units:
            self._cut_at_first_invalid_unit(files)
        else:
            last = files[-1]
            # binary search for the first empty unit (size 0) in the last file
            low, high = 0, self.units_per_file
            while low < high:
                mid = (low + high) // 2
                size = int.from_bytes(last.read_raw(mid * CQ_UNIT_SIZE + 8, 4), "big", signed=True)
                if size != 0:
                    low = mid + 1
                else:
                    high = mid
            last.set_positions(low * CQ_UNIT_SIZE)
        self.min_logic_offset = max(self.min_logic_offset, self.files.min_offset)
        self._refresh_max_physic_offset()

    def _cut_at_first_invalid_unit(self, files: list[MappedFile]) -> None:
        for index in range(max(0, len(files) - 3), len(files)):
            mapped = files[index]
            data = mapped.read_raw(0, self.file_size)
            bad = first_invalid_unit(data)
            if bad < 0:
                continue
            position = bad * CQ_UNIT_SIZE
            if data[position:].strip(b"\0") or index < len(files) - 1:
                log.warning("consume queue %s/%d: invalid unit at %d followed by data (lost pages?): "
                            "cutting the queue there", self.topic, self.queue_id,
                            (mapped.file_from_offset + position) // CQ_UNIT_SIZE)
            # drops later files, zeroes this one's tail and sets its positions
            self.files.truncate_dirty(mapped.file_from_offset + position)
            return
        files[-1].set_positions(self.file_size)

    def _refresh_max_physic_offset(self) -> None:
        max_offset = self.max_offset
        self.max_physic_offset = 0
        if max_offset > self.min_offset:
            unit = self.unit_at(max_offset - 1)
            if unit is not None and unit[1] != BLANK_UNIT_SIZE:
                self.max_physic_offset = unit[0] + unit[1]

    def correct_min_offset(self, min_phys_offset: int) -> None:
        """Move the min offset to the first unit whose record is still in the commit log."""
        low, high = self.min_offset, self.max_offset
        while low < high:
            mid = (low + high) // 2
            unit = self.unit_at(mid)
            if unit is None or unit[1] == BLANK_UNIT_SIZE or unit[0] < min_phys_offset:
                low = mid + 1
            else:
                high = mid
        self.min_logic_offset = max(self.min_logic_offset, low * CQ_UNIT_SIZE)

    def truncate_dirty(self, phys_offset: int) -> None:
        """Drop units whose record ends past `phys_offset` (the commit log was cut there)."""
        low, high = self.min_offset, self.max_offset
        while low < high:
            mid = (low + high) // 2
            unit = self.unit_at(mid)
            if unit is not None and (unit[1] == BLANK_UNIT_SIZE or unit[0] + unit[1] <= phys_offset):
                low = mid + 1
            else:
                high = mid
        if low < self.max_offset:
            log.info("truncating consume queue %s/%d from %d to %d", self.topic, self.queue_id,
                     self.max_offset, low)
            self.files.truncate_dirty(low * CQ_UNIT_SIZE)
            self.min_logic_offset = min(self.min_logic_offset, low * CQ_UNIT_SIZE)
        self._refresh_max_physic_offset()

    # -- offsets ---------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // CQ_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """Number of units written (the next logical offset)."""
        return self.files.max_offset // CQ_UNIT_SIZE

    # -- writes ----------------------------------------------------------------------------
    def put_units(self, logic_offset: int, packed: bytes, count: int, max_physic_offset: int) -> None:
        """Write `count` packed units starting at logical offset `logic_offset`.

        Units already present (offset below the max, e.g. re-dispatch during recovery) are skipped;
        a queue that starts late is padded with blank units so positions stay unit indexes.
        """
        files = self.files.files
        if files:
            last = files[-1]
            end = last.file_from_offset + last.wrote_position
            if end == logic_offset * CQ_UNIT_SIZE and last.wrote_position + len(packed) <= last.file_size:
                # the common put: the next units, with room for them in the last segment
                last.append(packed)
                self.max_physic_offset = max_physic_offset
                return
        current = self.max_offset
        if logic_offset < current:
            skip = min(count, current - logic_offset)
            if skip == count:
                return
            packed = packed[skip * CQ_UNIT_SIZE :]
            count -= skip
            logic_offset += skip
        elif logic_offset > current:
            self._fill_blank(current, logic_offset)
        position = logic_offset * CQ_UNIT_SIZE
        view = memoryview(packed)
        while view:
            mapped = self.files.last_for_write(position)
            room = mapped.remaining
            chunk = view[:room]
            mapped.append(chunk)
            view = view[len(chunk) :]
            position += len(chunk)
        self.max_physic_offset = max_physic_offset

    def _fill_blank(self, current: int, target: int) -> None:
        if current == 0 and self.files.last is None:
            # first unit of this queue: start the file at the unit's segment, pad up to it
            start = target * CQ_UNIT_SIZE
            mapped = self.files.last_for_write(start)
            pad_units = (start - mapped.file_from_offset) // CQ_UNIT_SIZE
            if pad_units:
                mapped.append(_BLANK_UNIT * pad_units)
            self.min_logic_offset = start
            return
        log.warning("consume queue %s/%d: gap from %d to %d, padding", self.topic, self.queue_id,
                    current, target)
        position = current * CQ_UNIT_SIZE
        remaining = target - current
        while remaining > 0:
            mapped = self.files.last_for_write(position)
            units = min(remaining, mapped.remaining // CQ_UNIT_SIZE)
            mapped.append(_BLANK_UNIT * units)
            remaining -= units
            position += units * CQ_UNIT_SIZE

    # -- reads -----------------------------------------------------------------------------
    def segment_for(self, logic_offset: int) -> tuple[MappedFile, int, int] | None:
        """(segment, byte position of the unit in it, readable end position) or None."""
        position = logic_offset * CQ_UNIT_SIZE
        if position < self.min_logic_offset:
            return None
        mapped = self.files.find(position)
        if mapped is None:
            return None
        return mapped, position - mapped.file_from_offset, mapped.wrote_position

    def unit_at(self, logic_offset: int) -> tuple[int, int, int] | None:
        """(phys offset, size, tags code) of one unit, or None if out of range."""
        found = self.segment_for(logic_offset)
        if found is None:
            return None
        mapped, position, _end = found
        data = mapped.read(position, CQ_UNIT_SIZE)
        if data is None:
            return None
        phys, size, tags_code = UNIT.unpack(data)
        return phys, size, tags_code

    def roll_next_file(self, logic_offset: int) -> int:
        """The first logical offset of the segment after the one holding `logic_offset`."""
        return logic_offset + self.units_per_file - logic_offset % self.units_per_file

    def offset_by_timestamp(
        self, timestamp: int, min_phys_offset: int, store_timestamp_at: Callable[[int, int], int]
    ) -> int:
        """The logical offset whose store time is closest to `timestamp` (binary search).

        An exact match returns the lowest offset with that time; otherwise the nearer neighbour
        (the earlier one on a tie). Before the first message gives the min offset, after the last
        gives the last message's offset (max - 1), as RocketMQ does; an empty queue gives 0.
        """
        low, high = self.min_offset, self.max_offset - 1
        left_offset = right_offset = -1
        left_value = right_value = -1
        target = -1
        while low <= high:
            mid = (low + high) // 2
            unit = self.unit_at(mid)
            if unit is None:
                return 0
            phys, size, _tags = unit
            if size == BLANK_UNIT_SIZE or phys < min_phys_offset:
                low = mid + 1
                left_offset = mid
                continue
            store_time = store_timestamp_at(phys, size)
            if store_time < 0:
                return 0
            if store_time >= timestamp:
                if store_time == timestamp:
                    target = mid
                high = mid - 1
                right_offset, right_value = mid, store_time
            else:
                low = mid + 1
                left_offset, left_value = mid, store_time
        if target >= 0:
            return target
        if left_offset < 0 and right_offset < 0:
            return 0
        if left_value == -1:
            return right_offset if right_offset >= 0 else left_offset + 1
        if right_value == -1:
            return left_offset
        return right_offset if abs(timestamp - left_value) > abs(timestamp - right_value) else left_offset

    # -- retention -------------------------------------------------------------------------
    def delete_expired(self, min_phys_offset: int) -> int:
        """Delete leading segments whose last unit's record starts below `min_phys_offset`."""
        count = 0
        files = self.files.files
        for mapped in files[:-1]:
            data = mapped.read(self.file_size - CQ_UNIT_SIZE, CQ_UNIT_SIZE)
            if data is None:
                break
            phys, size, _ = UNIT.unpack(data)
            if size != BLANK_UNIT_SIZE and phys >= min_phys_offset:
                break
            count += 1
        if count:
            self.files.delete_first(count)
        first = self.files.first
        if first is not None:
            self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset)
        self.correct_min_offset(min_phys_offset)
        return count

    def flush(self, least_pages: int = 0) -> bool:
        """fsync the queue's files (with `least_pages`, those with that many dirty pages); whether all are clean."""
        return self.files.flush(least_pages)

    def close(self) -> None:
        self.files.close()

    def destroy(self) -> None:
        self.files.delete_all()
        self.min_logic_offset = 0
        self.max_physic_offset = 0


class ConsumeQueueTable:
    """All consume queues of a store, created on first use."""

    def __init__(self, directory: Path, units_per_file: int) -> None:
        self.directory = directory
        self.units_per_file = units_per_file
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            with self._lock:
                queue = self.queues.get((topic, queue_id))
                if queue is None:
                    queue = ConsumeQueue(topic, queue_id, self.directory / topic / str(queue_id),
                                         self.units_per_file)
                    self.queues = {**self.queues, (topic, queue_id): queue}
        return queue

    def load(self) -> None:
        """Open every `consumequeue/<topic>/<queueId>` directory found on disk."""
        if not self.directory.is_dir():
            return
        queues: dict[tuple[str, int], ConsumeQueue] = {}
        for topic_dir in sorted(self.directory.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.is_dir() or not queue_dir.name.isdigit():
                    continue
                queue = ConsumeQueue(topic_dir.name, int(queue_dir.name), queue_dir, self.units_per_file)
                queue.load()
                queues[(topic_dir.name, int(queue_dir.name))] = queue
        self.queues = queues

    def remove(self, topic: str) -> None:
        """Delete every queue of `topic` (topic deletion)."""
        with self._lock:
            doomed = [q for key, q in self.queues.items() if key[0] == topic]
            self.queues = {key: q for key, q in self.queues.items() if key[0] != topic}
        for queue in doomed:
            queue.destroy()

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self.queues.values()))

    def __len__(self) -> int:
        return len(self.queues)
