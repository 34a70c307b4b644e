"""Hash index of message keys, in RocketMQ's index-file layout.

File `index/<yyyyMMddHHmmssSSS>`: a 40-byte header `[i64 begin timestamp][i64 end timestamp]
[i64 begin phys offset][i64 end phys offset][i32 used slots][i32 index count]`, then `slots` i32 hash
slots (each the number of the newest entry with that hash, 0 = empty), then 20-byte entries
`[i32 key hash][i64 phys offset][i32 seconds since begin timestamp][i32 previous entry]` numbered
from 1. Keys are `topic#key`. The key hash is CRC32 of the UTF-8 key (RocketMQ uses Java's
`String.hashCode`, which is too slow in Python); everything else matches.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from rocketflow.store.errors import StoreCorruptError
from rocketflow.store.mapped_file import RESERVE_AHEAD_BYTES, drop_empty_last_files, reserve_disk_space

log = logging.getLogger(__name__)

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = 20
_INT_MAX = 0x7FFFFFFF


_ENTRY_STRUCTS: dict[int, struct.Struct] = {}


def _entries_struct(count: int) -> struct.Struct:
    """A struct packing `count` consecutive entries at once (cached for batch-sized counts)."""
    packer = _ENTRY_STRUCTS.get(count)
    if packer is None:
        packer = struct.Struct(">" + "iqii" * count)
        if count <= 1024:
            _ENTRY_STRUCTS[count] = packer
    return packer


def index_key_hash(key: bytes) -> int:
    """Non-negative hash of an index key (`topic#key` as UTF-8)."""
    return zlib.crc32(key) & _INT_MAX


def index_file_name(timestamp_ms: int) -> str:
    moment = datetime.fromtimestamp(timestamp_ms / 1000)
    return moment.strftime("%Y%m%d%H%M%S") + f"{timestamp_ms % 1000:03d}"


class IndexFile:
    """One index file mapped in full."""

    def __init__(self, path: Path, slot_num: int, index_num: int, *, create: bool = False) -> None:
        self.path = path
        self.slot_num = slot_num
        self.index_num = index_num
        self.file_size = HEADER_SIZE + slot_num * 4 + index_num * ENTRY_SIZE
        self.entries_start = HEADER_SIZE + slot_num * 4
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        created = False
        try:
            size = os.fstat(fd).st_size
            if create and size == 0:
                created = True
                os.ftruncate(fd, self.file_size)
                # header and hash slots are written at random places: allocate them now (see `reserve_disk_space`)
                reserve_disk_space(fd, 0, self.entries_start)
            elif size != self.file_size:
                raise StoreCorruptError(f"{path}: size {size}, expected {self.file_size}")
            self.mm = mmap.mmap(fd, self.file_size)
        except BaseException:
            os.close(fd)
            if created:
                with contextlib.suppress(OSError):
                    path.unlink()
            raise
        self.fd = fd
        header = [int(v) for v in HEADER.unpack_from(self.mm, 0)]
        self.begin_timestamp: int = header[0]
        self.end_timestamp: int = header[1]
        self.begin_phy_offset: int = header[2]
        self.end_phy_offset: int = header[3]
        self.hash_slot_count: int = header[4]
        self.index_count: int = header[5]
        if self.index_count < 1:
            self.index_count = 1
        if self.index_count > index_num:
            raise StoreCorruptError(f"{path}: index count {self.index_count} > {index_num}")
        self._closed = False
        self._dirty = False
        #: disk blocks are allocated up to here; files loaded from disk are checked on their first write
        self._reserved_position = self.entries_start if created else 0

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    @property
    def entry_count(self) -> int:
        return self.index_count - 1

    def put_keys(self, items: list[tuple[bytes, int, int]]) -> int:
        """Insert (key, phys offset, store timestamp) items in order; returns how many fit."""
        mm = self.mm
        slot_num = self.slot_num
        index_count = self.index_count
        room = self.index_num - index_count
        if room <= 0:
            return 0
        if len(items) > room:
            items = items[:room]
        needed = self.entries_start + (index_count + len(items)) * ENTRY_SIZE
        if needed > self._reserved_position:
            self._reserve(needed)
        if index_count <= 1 and items:
            self.begin_phy_offset = items[0][1]
            self.begin_timestamp = items[0][2]
        begin_ts = self.begin_timestamp
        unpack_slot = SLOT.unpack_from
        pack_slot = SLOT.pack_into
        crc32 = zlib.crc32
        values: list[int] = []
        add = values.append
        used = 0
        last_ts = -1
        time_diff = 0
        for key, phys, store_ts in items:
            key_hash = crc32(key) & _INT_MAX
            slot_pos = HEADER_SIZE + (key_hash % slot_num) * 4
            prev = unpack_slot(mm, slot_pos)[0]
            if prev <= 0 or prev > index_count:
                prev = 0
                used += 1
            if store_ts != last_ts:  # a batch's items share one store time
                last_ts = store_ts
                time_diff = (store_ts - begin_ts) // 1000 if begin_ts > 0 else 0
                if time_diff < 0:
                    time_diff = 0
                elif time_diff > _INT_MAX:
                    time_diff = _INT_MAX
            add(key_hash)
            add(phys)
            add(time_diff)
            add(prev)
            pack_slot(mm, slot_pos, index_count)
            index_count += 1
        _entries_struct(len(items)).pack_into(mm, self.entries_start + self.index_count * ENTRY_SIZE, *values)
        last = items[-1]
        self.end_phy_offset = last[1]
        self.end_timestamp = last[2]
        self.hash_slot_count += used
        self.index_count = index_count
        self._write_header()
        return len(items)

    def _reserve(self, end_position: int) -> None:
        """Allocate disk blocks up to `end_position` (a step beyond); raises OSError (ENOSPC) before any write."""
        end = min(self.file_size, max(end_position, self._reserved_position + RESERVE_AHEAD_BYTES))
        reserve_disk_space(self.fd, self._reserved_position, end - self._reserved_position)
        self._reserved_position = end

    def _write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                         self.end_phy_offset, self.hash_slot_count, self.index_count)
        self._dirty = True

    def is_time_matched(self, begin: int, end: int) -> bool:
        return self.begin_timestamp <= end and self.end_timestamp >= begin

    def select_phy_offsets(self, key: bytes, max_num: int, begin: int, end: int, out: list[int]) -> None:
        """Append phys offsets of entries with `key`'s hash stored within [begin, end], newest first."""
        if self._closed:
            return
        key_hash = zlib.crc32(key) & _INT_MAX
        mm = self.mm
        index_count = self.index_count
        try:
            current = SLOT.unpack_from(mm, HEADER_SIZE + (key_hash % self.slot_num) * 4)[0]
            seen = 0
            while 0 < current < index_count and len(out) < max_num and seen < index_count:
                seen += 1
                hash_read, phys, time_diff, prev = ENTRY.unpack_from(mm, self.entries_start + current * ENTRY_SIZE)
                time_read = self.begin_timestamp + time_diff * 1000
                if hash_read == key_hash and begin <= time_read <= end:
                    out.append(phys)
                if prev <= 0 or prev >= current or time_read < begin:
                    break
                current = prev
        except ValueError:  # closed concurrently by retention
            return

    def flush(self) -> None:
        if self._dirty and not self._closed:
            self._dirty = False
            os.fsync(self.fd)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.mm.close()
            os.close(self.fd)

    def destroy(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class IndexService:
    """The index files of a store: builds entries for dispatched messages and answers key queries."""

    def __init__(self, directory: Path, slot_num: int, index_num: int) -> None:
        self.directory = directory
        self.slot_num = slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        self.lock = threading.Lock()
        self._last_name_ms = 0
        #: records starting at or below this commit-log offset are indexed already (`build` skips them)
        self._indexed_end = -1

    def load(self) -> None:
        if not self.directory.is_dir():
            return
        paths = sorted(p for p in self.directory.iterdir() if p.is_file() and p.name.isdigit())
        drop_empty_last_files(paths)
        self.files = [IndexFile(p, self.slot_num, self.index_num) for p in paths]
        self._indexed_end = self.end_phy_offset

    @property
    def end_phy_offset(self) -> int:
        """Commit-log offset of the newest indexed record (-1 when nothing is indexed)."""
        for index_file in reversed(self.files):
            if index_file.entry_count > 0:
                return index_file.end_phy_offset
        return -1

    @property
    def end_timestamp(self) -> int:
        files = self.files
        return files[-1].end_timestamp if files else 0

    def recovered(self, end_offset: int) -> None:
        """Recovery cut the commit log at `end_offset`: records from there on are new, whatever was indexed.

        Entries pointing at or past the cut belong to records that are gone; new entries go to a fresh file.
        """
        with self.lock:
            if self.end_phy_offset >= end_offset and self.files and self.files[-1].entry_count > 0:
                self._new_file()
            self._indexed_end = min(self._indexed_end, end_offset - 1)

    def _new_file(self) -> IndexFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        now = max(int(time.time() * 1000), self._last_name_ms + 1)
        path = self.directory / index_file_name(now)
        while path.exists() or (self.files and path.name <= self.files[-1].path.name):
            now += 1
            path = self.directory / index_file_name(now)
        self._last_name_ms = now
        index_file = IndexFile(path, self.slot_num, self.index_num, create=True)
        self.files = [*self.files, index_file]
        return index_file

    def build(self, items: list[tuple[bytes, int, int]]) -> None:
        """Index (key, phys offset, store timestamp) items; records already indexed are skipped."""
        if not items:
            return
        with self.lock:
            indexed_end = self._indexed_end
            if items[0][1] <= indexed_end:
                items = [item for item in items if item[1] > indexed_end]
                if not items:
                    return
            while items:
                last = self.files[-1] if self.files else None
                if last is None or last.is_full:
                    last = self._new_file()
                done = last.put_keys(items)
                if done:
                    self._indexed_end = items[done - 1][1]
                items = items[done:]

    def query(self, keys: Iterable[bytes], max_num: int, begin: int, end: int) -> list[int]:
        """Phys offsets of entries for any of `keys` stored within [begin, end], newest files first."""
        out: list[int] = []
        for index_file in reversed(self.files):
            if len(out) >= max_num:
                break
            if index_file.entry_count > 0 and index_file.is_time_matched(begin, end):
                for key in keys:
                    index_file.select_phy_offsets(key, max_num, begin, end, out)
            if index_file.begin_timestamp < begin:
                break
        return out

    def delete_expired(self, min_phys_offset: int) -> int:
        """Delete files (never the last) whose newest entry points below `min_phys_offset`."""
        with self.lock:
            doomed = [f for f in self.files[:-1] if f.end_phy_offset < min_phys_offset]
            if not doomed:
                return 0
            self.files = [f for f in self.files if f not in doomed]
        for index_file in doomed:
            index_file.destroy()
        return len(doomed)

    def flush(self) -> None:
        for index_file in self.files:
            index_file.flush()

    def close(self) -> None:
        with self.lock:
            for index_file in self.files:
                index_file.close()

    def destroy(self) -> None:
        with self.lock:
            files, self.files = self.files, []
            self._indexed_end = -1
        for index_file in files:
            index_file.destroy()
