"""Hash index of message keys, in RocketMQ's index-file layout.

File `index/<yyyyMMddHHmmssSSS>`: a 40-byte header `[i64 begin timestamp][i64 end timestamp]
[i64 begin phys offset][i64 end phys offset][i32 used slots][i32 index count]`, then `slots` i32 hash
slots (each the number of the newest entry with that hash, 0 = empty), then 20-byte entries
`[i32 key hash][i64 phys offset][i32 seconds since begin timestamp][i32 previous entry]` numbered
from 1. Keys are `topic#key`; the key hash is RocketMQ's: Java's `String.hashCode` of the key made
non-negative (`Math.abs`, with `Integer.MIN_VALUE` as 0), so RocketMQ's tools can read these files.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path

import numpy as np

from rocketflow.store.config import DEFAULT_INDEX_BUILD_BATCH
from rocketflow.store.errors import StoreCorruptError
from rocketflow.store.mapped_file import RESERVE_AHEAD_BYTES, drop_empty_last_files, reserve_disk_space

log = logging.getLogger(__name__)

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = 20
_INT_MAX = 0x7FFFFFFF
_SLOT_DTYPE = np.dtype(">i4")
_ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("seconds", ">i4"), ("previous", ">i4")])
assert _ENTRY_DTYPE.itemsize == ENTRY_SIZE


#: keys longer than this (in bytes) are hashed one by one rather than in the batch matrix
_MATRIX_KEY_MAX = 256
_powers = np.ones(1, dtype=np.uint32)


def _powers_of_31(count: int) -> np.ndarray:
    """31**(count-1), ..., 31, 1 modulo 2**32: the weights of Java's `String.hashCode` polynomial."""
    global _powers
    if len(_powers) < count:
        grown = np.ones(max(count, 2 * len(_powers)), dtype=np.uint32)
        grown[:-1] = np.cumprod(np.full(len(grown) - 1, 31, dtype=np.uint32))[::-1]  # wraps mod 2**32
        _powers = grown
    return _powers[len(_powers) - count:]


def _non_negative(hashes: np.ndarray) -> np.ndarray:
    """RocketMQ's `indexKeyHashMethod` on uint32 `String.hashCode` values: `Math.abs`, and 0 for MIN_VALUE."""
    positive = np.abs(hashes.view(np.int32))  # as in Java, abs(MIN_VALUE) stays negative
    positive[positive < 0] = 0
    return positive


def index_key_hash(key: bytes) -> int:
    """RocketMQ's hash of an index key (`topic#key` as UTF-8): Java's `String.hashCode`, made non-negative."""
    units = np.frombuffer(key.decode("utf-8", "replace").encode("utf-16-be"), dtype=">u2").astype(np.uint32)
    return int(_non_negative(np.array([units @ _powers_of_31(len(units))], dtype=np.uint32))[0])


def index_key_hashes(keys: Sequence[bytes]) -> np.ndarray:
    """`index_key_hash` of each key (an int32 array), computed as one matrix product for ASCII keys.

    Java hashes UTF-16 code units, which for ASCII are the bytes. The keys are right-aligned in a
    zero-padded byte matrix: leading zeros add nothing to a polynomial hash that starts at 0.
    """
    count = len(keys)
    if not count:
        return np.zeros(0, dtype=np.int32)
    lengths = np.fromiter(map(len, keys), dtype=np.intp, count=count)
    joined = np.frombuffer(b"".join(keys), dtype=np.uint8)
    width = int(lengths.max())
    if width <= _MATRIX_KEY_MAX and int(lengths.min()) == width:
        matrix = joined.reshape(count, width)
    else:
        width = min(width, _MATRIX_KEY_MAX)
        blank = bytes(width)
        padded = b"".join([key.rjust(width, b"\0") if len(key) <= width else blank for key in keys])
        matrix = np.frombuffer(padded, dtype=np.uint8).reshape(count, width)
    hashes = _non_negative(matrix.astype(np.uint32) @ _powers_of_31(width))
    # over-long keys, and keys with non-ASCII bytes (Java hashes their UTF-16 units), go one by one
    odd = lengths > width
    if len(joined) and int(joined.max()) >= 0x80:
        odd[np.repeat(np.arange(count), lengths)[joined >= 0x80]] = True
    if odd.any():
        for row in np.flatnonzero(odd).tolist():
            hashes[row] = index_key_hash(keys[row])
    return hashes


def index_file_name(timestamp_ms: int) -> str:
    moment = datetime.fromtimestamp(timestamp_ms / 1000)
    return moment.strftime("%Y%m%d%H%M%S") + f"{timestamp_ms % 1000:03d}"


#: madvise(2) advice that maps a range's pages up front (Linux 5.14+; Python 3.11's mmap module has no name
#: for it). Elsewhere, or on an older kernel, the pages are mapped as the inserts touch them.
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22) if sys.platform == "linux" else None


class IndexFile:
    """One index file mapped in full."""

    def __init__(self, path: Path, slot_num: int, index_num: int, *, create: bool = False,
                 after_crash: bool = False) -> None:
        """Map the file at `path` (made when `create`); `after_crash` repairs slots an insert cut short left."""
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
        if after_crash and not created and not self.is_full:
            self._repair_slots()

    def _repair_slots(self) -> None:
        """Point slots that lie past the entry count back at entries the header counts.

        A process killed inside `put_keys` after it wrote some slots but before the header leaves them
        pointing at entries that are not counted, and the next insert would take them for empty and cut
        the older chains off. Those entries were written before the slots, so each one's chain leads back
        to the slot's value before the run.
        """
        index_count = self.index_count
        slots = np.frombuffer(self.mm, dtype=_SLOT_DTYPE, count=self.slot_num, offset=HEADER_SIZE)
        try:
            stale = np.flatnonzero((slots >= index_count) | (slots < 0)).tolist()
            for slot in stale:
                number = int(slots[slot])
                while index_count <= number < self.index_num:
                    previous = ENTRY.unpack_from(self.mm, self.entries_start + number * ENTRY_SIZE)[3]
                    number = previous if previous < number else 0
                slots[slot] = number if 0 < number < index_count else 0
        finally:
            del slots
        if stale:
            self._dirty = True
            log.warning("%s: %d hash slots pointed past the %d counted entries (an insert cut short); repaired",
                        self.path, len(stale), index_count - 1)

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    @property
    def entry_count(self) -> int:
        return self.index_count - 1

    def map_slots(self) -> None:
        """Map the hash-slot table's pages now, for a file that takes inserts.

        Its keys land on random slots, so the first runs of keys would fault pages in all over the
        20 MB table, on the broker's loop; mapping it here, when the file is opened or created, pays
        that once and off the put path (bench/README.md, "Store: index runs").
        """
        if _MADV_POPULATE_READ is None or self._closed or self.is_full:
            return
        try:
            self.mm.madvise(_MADV_POPULATE_READ, 0, self.entries_start)
        except OSError as exc:  # an older kernel (EINVAL): pages are faulted in by the inserts
            log.debug("%s: cannot map the hash slots up front: %s", self.path, exc)

    def put_keys(self, keys: Sequence[bytes], offsets: Sequence[int], timestamps: Sequence[int]) -> int:
        """Insert parallel (key, phys offset, store timestamp) items in order; returns how many fit.

        Vectorized: hashes, slot reads and writes and the entries are numpy operations over the whole
        run, so it pays off for the hundreds or thousands of keys the service hands over at once.
        """
        index_count = self.index_count
        count = min(len(keys), self.index_num - index_count)
        if count <= 0:
            return 0
        entries_at = self.entries_start + index_count * ENTRY_SIZE
        entries_end = entries_at + count * ENTRY_SIZE
        if entries_end > self._reserved_position:
            self._reserve(entries_end)
        if index_count <= 1:
            self.begin_phy_offset = offsets[0]
            self.begin_timestamp = timestamps[0]
        hashes = index_key_hashes(keys[:count])
        slot_of = hashes % self.slot_num
        slots = np.frombuffer(self.mm, dtype=_SLOT_DTYPE, count=self.slot_num, offset=HEADER_SIZE)
        try:
            previous = slots[slot_of].astype(np.int64)
            empty = (previous <= 0) | (previous >= index_count)  # never set, or stale past the count
            previous[empty] = 0
            used = int(np.count_nonzero(empty))
            touched: np.ndarray
            newest: np.ndarray
            if len(set(slot_of.tolist())) == count:
                # The usual run (hundreds of keys over millions of slots): no two keys share a slot. A set
                # tells so for less than np.unique below, whose numpy calls each cost a fixed overhead.
                touched, newest = slot_of, index_count + np.arange(count)
            else:
                # each slot the run touches ends on the run's last key in it (first in the reversed run)
                distinct, first_reversed, key_counts = np.unique(slot_of[::-1], return_index=True,
                                                                 return_counts=True)
                # the few keys of the run that share a slot are chained to each other in order
                last_of_slot: dict[int, int] = {}
                for key_index in np.flatnonzero(np.isin(slot_of, distinct[key_counts > 1])).tolist():
                    slot = int(slot_of[key_index])
                    earlier = last_of_slot.get(slot)
                    if earlier is not None:
                        previous[key_index] = earlier
                        used -= bool(empty[key_index])  # the slot was counted as taken by the first key
                    last_of_slot[slot] = index_count + key_index
                touched, newest = distinct, index_count + count - 1 - first_reversed
            entries = np.empty(count, dtype=_ENTRY_DTYPE)
            entries["hash"] = hashes
            entries["phys"] = offsets[:count]
            begin_ts = self.begin_timestamp
            if begin_ts > 0:
                seconds = (np.asarray(timestamps[:count], dtype=np.int64) - begin_ts) // 1000
                np.maximum(seconds, 0, out=seconds)  # np.clip's wrapper costs more than its two ufuncs
                np.minimum(seconds, _INT_MAX, out=seconds)
                entries["seconds"] = seconds
            else:
                entries["seconds"] = 0
            entries["previous"] = previous
            # Entries first, then slots, then the header: a process killed between them leaves slots that
            # point only at whole entries past the count, which `_repair_slots` follows back on load.
            self.mm[entries_at:entries_end] = entries.tobytes()
            slots[touched] = newest
        finally:
            del slots  # the mapping cannot be closed while a view of it lives
        self.end_phy_offset = offsets[count - 1]
        self.end_timestamp = timestamps[count - 1]
        self.hash_slot_count += used
        self.index_count = index_count + count
        self._write_header()
        return count

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
        key_hash = index_key_hash(key)
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

    def __init__(self, directory: Path, slot_num: int, index_num: int,
                 build_batch: int = DEFAULT_INDEX_BUILD_BATCH) -> None:
        self.directory = directory
        self.slot_num = slot_num
        self.index_num = index_num
        #: keys handed over are written to the files once this many wait (or on a query, flush or close)
        self.build_batch = max(1, build_batch)
        self.files: list[IndexFile] = []
        self.lock = threading.Lock()
        self._last_name_ms = 0
        #: records starting at or below this commit-log offset are indexed already (`build` skips them)
        self._indexed_end = -1
        # keys handed over but not yet written, in commit-log order (parallel lists)
        self._pending_keys: list[bytes] = []
        self._pending_offsets: list[int] = []
        self._pending_timestamps: list[int] = []
        #: store timestamp of the newest key an fsync covered (the checkpoint's index timestamp)
        self.synced_end_timestamp = 0

    def load(self, *, after_crash: bool = False) -> None:
        """Map the index files; `after_crash` (the store did not shut down cleanly) checks their hash slots."""
        if not self.directory.is_dir():
            return
        paths = sorted(p for p in self.directory.iterdir() if p.is_file() and p.name.isdigit())
        drop_empty_last_files(paths)
        self.files = [IndexFile(p, self.slot_num, self.index_num, after_crash=after_crash) for p in paths]
        self._indexed_end = self.end_phy_offset

    def prepare(self) -> None:
        """Have a file ready for inserts (the last one, or a new one) with its slots mapped, before the
        first keys come; called once recovery is done and only when the store indexes.

        Making one (allocating its 20 MB slot table, then mapping it) takes milliseconds, which the
        first run of keys would otherwise wait for, on the broker's loop.
        """
        with self.lock:
            if self.files and not self.files[-1].is_full:
                self.files[-1].map_slots()
                return
            try:
                self._new_file()
            except OSError as exc:  # a full disk must not keep the store from starting: the first keys retry
                log.warning("cannot make an index file ahead of the first keys: %s", exc)

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
        index_file.map_slots()
        self.files = [*self.files, index_file]
        return index_file

    def build(self, keys: Sequence[bytes], offsets: Sequence[int], timestamps: Sequence[int]) -> None:
        """Index parallel (key, phys offset, store timestamp) items; records already handed over are skipped.

        Like RocketMQ's dispatcher, which indexes behind the commit log, the keys are written in runs of
        `build_batch`: a query, `flush` or `close` writes whatever waits first, so every key handed
        over is found; a crash loses only keys that recovery re-dispatches (they lie past the checkpoint).
        """
        if not keys:
            return
        with self.lock:
            pending_offsets = self._pending_offsets
            handed_over = pending_offsets[-1] if pending_offsets else self._indexed_end
            if offsets[0] <= handed_over:
                kept = [i for i, offset in enumerate(offsets) if offset > handed_over]
                keys = [keys[i] for i in kept]
                offsets = [offsets[i] for i in kept]
                timestamps = [timestamps[i] for i in kept]
            self._pending_keys.extend(keys)
            pending_offsets.extend(offsets)
            self._pending_timestamps.extend(timestamps)
            # A due run is written even when every key was handed over before: a dispatch retried after
            # its run failed to write (a full disk) must fail again, not go on to the consume queues.
            if len(pending_offsets) >= self.build_batch:
                self._write_pending()

    def drain(self) -> None:
        """Write every key handed over to the index files now. Raises OSError (disk full) and keeps them."""
        with self.lock:
            self._write_pending()

    @property
    def pending_count(self) -> int:
        """Keys handed over and not yet written to the files."""
        return len(self._pending_offsets)

    def _write_pending(self) -> None:
        keys, offsets, timestamps = self._pending_keys, self._pending_offsets, self._pending_timestamps
        done = 0
        try:
            while done < len(keys):
                last = self.files[-1] if self.files else None
                if last is None or last.is_full:
                    last = self._new_file()
                written = last.put_keys(keys[done:], offsets[done:], timestamps[done:])
                done += written
                self._indexed_end = offsets[done - 1] if done else self._indexed_end
        finally:
            if done:
                del keys[:done], offsets[:done], timestamps[:done]

    def query(self, keys: Iterable[bytes], max_num: int, begin: int, end: int) -> list[int]:
        """Phys offsets of entries for any of `keys` stored within [begin, end], newest files first."""
        if self._pending_offsets:
            try:
                self.drain()
            except OSError as exc:  # answer from what is written; the keys stay pending for the next try
                log.error("cannot write pending index keys: %s", exc)
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

    def flush(self, *, open_file: bool = True) -> None:
        """Write the pending keys, then fsync the files that changed: all of them, or with
        ``open_file=False`` only those that take no more keys (full, or followed by a newer file),
        as RocketMQ fsyncs an index file once it is full."""
        self.drain()
        files = self.files
        for index_file in files:
            if open_file or index_file is not files[-1] or index_file.is_full:
                index_file.flush()
                self.synced_end_timestamp = max(self.synced_end_timestamp, index_file.end_timestamp)

    def close(self) -> None:
        with self.lock:
            try:
                self._write_pending()
            except OSError as exc:  # only after a failed flush, which keeps the abort marker: recovery re-indexes
                log.error("cannot write pending index keys at close: %s", exc)
            for index_file in self.files:
                index_file.close()

    def destroy(self) -> None:
        with self.lock:
            files, self.files = self.files, []
            self._indexed_end = -1
            self._pending_keys.clear()
            self._pending_offsets.clear()
            self._pending_timestamps.clear()
        for index_file in files:
            index_file.destroy()
