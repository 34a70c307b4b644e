"""Recovery bookkeeping: the `checkpoint` file, the `abort` marker and the `lock` file."""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from rocketflow.store.errors import StoreLockedError

# RocketMQ's StoreCheckpoint: physic, logics and index message timestamps at 0, 8 and 16 of a
# 4 KiB file. We add the flushed commit-log and consume-queue offsets at 24 and 32 so recovery
# can start from an exact segment.
_LAYOUT = struct.Struct(">qqqqq")
CHECKPOINT_FILE_SIZE = 4096


@dataclass(slots=True)
class Checkpoint:
    """What is known to be on disk: newest flushed store timestamps and offsets."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    physic_offset: int = 0
    logics_phys_offset: int = 0

    @property
    def min_timestamp(self) -> int:
        """Like RocketMQ's `getMinTimestamp`: the older of commit log and consume queues, less 3 s."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    @property
    def recover_from_offset(self) -> int:
        """Commit-log offset up to which both the log and the consume queues are known flushed."""
        return min(self.physic_offset, self.logics_phys_offset)

    @classmethod
    def load(cls, path: Path) -> Checkpoint:
        """Read the checkpoint; a missing or short file reads as all zeros (scan everything)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls()
        if len(data) < _LAYOUT.size:
            return cls()
        values = _LAYOUT.unpack_from(data, 0)
        if any(v < 0 for v in values):
            return cls()
        return cls(*values)

    def save(self, path: Path) -> None:
        """Write in place and fsync (a fixed-size file, so no torn rename dance is needed)."""
        data = _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
                            self.physic_offset, self.logics_phys_offset)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != CHECKPOINT_FILE_SIZE:
                os.ftruncate(fd, CHECKPOINT_FILE_SIZE)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)


class StoreLock:
    """An exclusive `fcntl` lock on `<root>/lock`, held while a store is open."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StoreLockedError(f"store directory {self.path.parent} is in use by another store") from exc
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def create_abort_marker(path: Path) -> bool:
    """Create the abort file; returns True if it already existed (the last run did not shut down cleanly)."""
    existed = path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)
    return existed


def remove_abort_marker(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable (best effort: not every file system can)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
