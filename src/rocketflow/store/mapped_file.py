"""One fixed-size segment file, named by its 20-digit start offset, written and read through mmap."""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import mmap
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from rocketflow.store.errors import StoreCorruptError

log = logging.getLogger(__name__)

PAGE_SIZE = mmap.PAGESIZE
#: how far past the write position a segment's disk blocks are allocated in one step (at most; small
#: segments such as consume queues, of which there may be thousands, step by 1/256 of their size)
RESERVE_AHEAD_BYTES = 1024 * 1024
#: appends at least this big (a page) are written with pwrite(2) rather than copied into the mapping: a
#: batch's bytes are cheaper to hand to the page cache in one call than to fault fresh mapped pages in
#: one by one (bench/README.md, "Store: pwrite"); a single small message is cheaper to copy
_PWRITE_MIN_BYTES = 4096
_CANNOT_RESERVE = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})


def reserve_disk_space(fd: int, offset: int, length: int) -> None:
    """Allocate the disk blocks of `[offset, offset + length)` of a file before writing them through a mapping.

    Segment files are sparse; storing into a hole of a mapping when the disk is full raises SIGBUS,
    which kills the process. Allocating first turns a full disk into `OSError(ENOSPC)` raised here,
    before anything is written. File systems that cannot allocate ahead are written as before.
    """
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno not in _CANNOT_RESERVE:
            raise


def segment_name(start_offset: int) -> str:
    """The file name of a segment starting at `start_offset` (20 digits, zero padded)."""
    return f"{start_offset:020d}"


def drop_empty_last_files(paths: list[Path]) -> None:
    """Delete zero-length files at the end of sorted `paths` (and remove them from it).

    A crash between creating a file and sizing it leaves one; it never held data.
    """
    while paths and paths[-1].stat().st_size == 0:
        path = paths.pop()
        log.warning("%s: empty last file (left by a crash while it was created): deleting it", path)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def parse_segment_name(name: str) -> int:
    if len(name) != 20 or not name.isdigit():
        raise StoreCorruptError(f"not a segment file name: {name!r}")
    return int(name)


class MappedFile:
    """A segment file of `file_size` bytes mapped in full.

    Positions are relative to the file: `wrote_position` is where the next append lands and bounds
    what readers may see; `flushed_position` is how far an fsync has covered. The file is created
    sparse (truncate to full size), so unwritten bytes read as zeros.
    """

    __slots__ = (
        "_closed",
        "_released_position",
        "_reserve_step",
        "_reserved_position",
        "fd",
        "file_from_offset",
        "file_size",
        "flushed_position",
        "last_modified_ms",
        "mm",
        "path",
        "wrote_position",
    )

    def __init__(self, path: Path, file_size: int, *, create: bool = False) -> None:
        self.path = path
        self.file_size = file_size
        self.file_from_offset = parse_segment_name(path.name)
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            actual = os.fstat(fd).st_size
            if actual != file_size:
                if create and actual == 0:
                    os.ftruncate(fd, file_size)
                else:
                    raise StoreCorruptError(f"{path}: size {actual}, expected {file_size}")
            self.mm = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.wrote_position = 0
        self.flushed_position = 0
        self._released_position = 0
        #: disk blocks are allocated up to here (written bytes, plus what `reserve` allocated ahead)
        self._reserved_position = 0
        self._reserve_step = min(RESERVE_AHEAD_BYTES, max(PAGE_SIZE, file_size // 256))
        self._closed = False
        self.last_modified_ms = int(os.stat(path).st_mtime * 1000)

    # -- state -----------------------------------------------------------------------------
    @property
    def file_end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def closed(self) -> bool:
        return self._closed

    def set_positions(self, position: int) -> None:
        """After recovery: everything up to `position` is valid and on disk."""
        self.wrote_position = position
        self.flushed_position = position
        self._released_position = 0
        self._reserved_position = position

    # -- writes ----------------------------------------------------------------------------
    def reserve(self, end_position: int) -> None:
        """Make sure disk blocks exist up to `end_position` (and a step beyond); raises OSError (ENOSPC)."""
        if end_position <= self._reserved_position:
            return
        end = min(self.file_size, max(end_position, self._reserved_position + self._reserve_step))
        reserve_disk_space(self.fd, self._reserved_position, end - self._reserved_position)
        self._reserved_position = end

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Copy `data` at the wrote position (caller checked it fits); returns the start position.

        Raises OSError (nothing written) when the disk has no room for it.
        """
        start = self.wrote_position
        end = start + len(data)
        if end > self._reserved_position:
            self.reserve(end)
        if end - start >= _PWRITE_MIN_BYTES:
            # through the page cache, as the mapping sees it: no page fault per fresh page of the mapping
            written = os.pwrite(self.fd, data, start)
            if written != end - start:
                self.mm[start + written:end] = memoryview(data)[written:]
        else:
            self.mm[start:end] = data
        self.wrote_position = end
        self.last_modified_ms = int(time.time() * 1000)
        return start

    def flush(self) -> int:
        """fsync the file (also covers pages dirtied through the mapping); returns the flushed position."""
        target = self.wrote_position
        if target > self.flushed_position and not self._closed:
            try:
                os.fdatasync(self.fd)
            except (OSError, ValueError):
                if self._closed:
                    return self.flushed_position
                raise
            if target > self.flushed_position:
                self.flushed_position = target
        return self.flushed_position

    def release_flushed_pages(self, keep_bytes: int = 0) -> None:
        """Drop this process's mapping of pages that are flushed (they stay in the page cache).

        Keeps resident memory flat for a long log; later reads fault pages back in from the cache.
        """
        end = (self.flushed_position - keep_bytes) // PAGE_SIZE * PAGE_SIZE
        start = self._released_position
        if end <= start or self._closed:
            return
        try:
            self.mm.madvise(mmap.MADV_DONTNEED, start, end - start)
        except (OSError, ValueError):  # pragma: no cover - closed concurrently
            return
        self._released_position = end

    def truncate_to(self, position: int) -> None:
        """Cut the file's content at `position`: bytes from there on become zeros (sparse again)."""
        self.wrote_position = min(self.wrote_position, position)
        self.flushed_position = min(self.flushed_position, position)
        # Shrinking then re-growing the file zeroes the tail without writing it, so stale records
        # past the cut can never be mistaken for valid ones by a later recovery scan.
        os.ftruncate(self.fd, position)
        os.ftruncate(self.fd, self.file_size)
        self._released_position = min(self._released_position, position // PAGE_SIZE * PAGE_SIZE)
        self._reserved_position = min(self._reserved_position, position)

    # -- reads -----------------------------------------------------------------------------
    def read(self, position: int, size: int) -> bytes | None:
        """A copy of `size` bytes at `position` if they are fully written, else None."""
        if position < 0 or size < 0 or position + size > self.wrote_position or self._closed:
            return None
        try:
            return self.mm[position : position + size]
        except ValueError:  # closed by retention between the check and the slice
            return None

    def read_raw(self, position: int, size: int) -> bytes:
        """Bytes at `position` regardless of the wrote position (recovery scans)."""
        return self.mm[position : position + size]

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.mm.close()
        except BufferError:  # pragma: no cover - a reader still holds a view; the OS unmaps at exit
            log.warning("mapped file %s still has exported views", self.path)
        os.close(self.fd)

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, wrote={self.wrote_position}, flushed={self.flushed_position})"


#: What one write puts in one segment: the segment, the bytes (in pieces), whether they fill it up (the
#: segment then counts as full: its last bytes are a blank record's, the rest of it unused).
Chunk = tuple[MappedFile, list[bytes], bool]


def reserve_chunks(chunks: Sequence[Chunk], last_end: int) -> None:
    """Allocate the disk space of every chunk of a write before writing any: a full disk fails it as a whole.

    `last_end` is where the last chunk ends in its segment (the earlier ones are summed).
    """
    for target, chunk_parts, _end_of_file in chunks[:-1]:
        target.reserve(target.wrote_position + sum(map(len, chunk_parts)))
    chunks[-1][0].reserve(last_end)


def write_chunks(chunks: Sequence[Chunk]) -> None:
    """Write the chunks `reserve_chunks` made room for, each at its segment's wrote position."""
    for target, chunk_parts, end_of_file in chunks:
        if chunk_parts:
            target.append(chunk_parts[0] if len(chunk_parts) == 1 else b"".join(chunk_parts))
        if end_of_file:
            target.wrote_position = target.file_size


class MappedFileQueue:
    """The ordered segments of one log (commit log or one consume queue) in one directory.

    The list of files is replaced, never mutated in place, so readers can use a snapshot without a
    lock; writers (append, delete, truncate) serialise on `lock`.
    """

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self.lock = threading.RLock()

    def load(self) -> None:
        """Open the existing segments (sorted by start offset); positions are set by recovery."""
        if not self.directory.is_dir():
            return
        paths = sorted(p for p in self.directory.iterdir() if p.is_file() and len(p.name) == 20 and p.name.isdigit())
        drop_empty_last_files(paths)
        files: list[MappedFile] = []
        for path in paths:
            if path.stat().st_size != self.file_size:
                raise StoreCorruptError(f"{path}: size {path.stat().st_size}, expected {self.file_size}")
            mapped = MappedFile(path, self.file_size)
            mapped.set_positions(self.file_size)
            files.append(mapped)
        for prev, cur in itertools.pairwise(files):
            if cur.file_from_offset != prev.file_from_offset + self.file_size:
                log.warning("gap between segments %s and %s", prev.path.name, cur.path.name)
        self.files = files

    # -- lookup ----------------------------------------------------------------------------
    @property
    def first(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    @property
    def last(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    @property
    def min_offset(self) -> int:
        files = self.files
        return files[0].file_from_offset if files else 0

    @property
    def max_offset(self) -> int:
        """End of the written data (start of the last segment plus its wrote position)."""
        files = self.files
        if not files:
            return 0
        last = files[-1]
        return last.file_from_offset + last.wrote_position

    @property
    def flushed_offset(self) -> int:
        files = self.files
        for mapped in reversed(files):
            if mapped.flushed_position > 0:
                return mapped.file_from_offset + mapped.flushed_position
        return files[0].file_from_offset if files else 0

    def find(self, offset: int, *, first_if_not_found: bool = False) -> MappedFile | None:
        """The segment holding `offset` (O(1): segments are contiguous)."""
        files = self.files
        if not files:
            return None
        first = files[0]
        index = (offset - first.file_from_offset) // self.file_size
        if 0 <= index < len(files):
            mapped = files[index]
            if mapped.file_from_offset <= offset < mapped.file_from_offset + self.file_size:
                return mapped
            for mapped in files:  # a gap (should not happen): fall back to a scan
                if mapped.file_from_offset <= offset < mapped.file_from_offset + self.file_size:
                    return mapped
        return first if first_if_not_found else None

    # -- writes ----------------------------------------------------------------------------
    def last_for_write(self, start_offset: int = 0) -> MappedFile:
        """The last segment if it has room, else a new one (first one starts at `start_offset`'s segment)."""
        last = self.last
        if last is not None and not last.is_full:
            return last
        with self.lock:
            last = self.last
            if last is not None and not last.is_full:
                return last
            if last is None:
                start = start_offset - start_offset % self.file_size
            else:
                start = last.file_from_offset + self.file_size
            self.directory.mkdir(parents=True, exist_ok=True)
            mapped = MappedFile(self.directory / segment_name(start), self.file_size, create=True)
            self.files = [*self.files, mapped]
            return mapped

    def next_for_write(self, current: MappedFile) -> MappedFile:
        """The segment after `current`, created if needed (`current` is about to be filled up)."""
        with self.lock:
            last = self.files[-1]
            if last is not current:
                return last
            start = current.file_from_offset + self.file_size
            mapped = MappedFile(self.directory / segment_name(start), self.file_size, create=True)
            self.files = [*self.files, mapped]
            return mapped

    def discard_unused_after(self, keep: MappedFile) -> None:
        """Delete segments after `keep` that hold no data (created for a write that then failed)."""
        with self.lock:
            files = self.files
            if keep not in files:
                return
            position = files.index(keep) + 1
            doomed = [mapped for mapped in files[position:] if mapped.wrote_position == 0]
            if len(doomed) != len(files) - position:
                return
            self.files = files[:position]
        for mapped in doomed:
            mapped.destroy()

    def flush(self, least_pages: int = 0) -> bool:
        """fsync every segment with unflushed bytes; with `least_pages`, only a full segment or one with at
        least that many dirty pages (RocketMQ's ``isAbleToFlush``). Returns whether nothing is left unflushed."""
        clean = True
        for mapped in self.files:
            wrote, flushed = mapped.wrote_position, mapped.flushed_position
            if flushed >= wrote:
                continue
            if (least_pages <= 0 or wrote >= mapped.file_size
                    or wrote // PAGE_SIZE - flushed // PAGE_SIZE >= least_pages):
                mapped.flush()
            else:
                clean = False
        return clean

    def truncate_dirty(self, offset: int) -> None:
        """Drop everything at or after `offset`: later segments are deleted, the one holding it is cut."""
        with self.lock:
            keep: list[MappedFile] = []
            for mapped in self.files:
                if mapped.file_from_offset + self.file_size <= offset:
                    keep.append(mapped)
                elif mapped.file_from_offset <= offset:
                    mapped.truncate_to(offset - mapped.file_from_offset)
                    keep.append(mapped)
                else:
                    mapped.destroy()
            self.files = keep

    def delete_first(self, count: int) -> list[MappedFile]:
        """Remove the `count` oldest segments (never the last one); returns them (already destroyed)."""
        with self.lock:
            count = min(count, len(self.files) - 1)
            if count <= 0:
                return []
            removed, self.files = self.files[:count], self.files[count:]
        for mapped in removed:
            mapped.destroy()
        return removed

    def delete_all(self) -> None:
        with self.lock:
            files, self.files = self.files, []
        for mapped in files:
            mapped.destroy()

    def close(self) -> None:
        with self.lock:
            for mapped in self.files:
                mapped.close()
