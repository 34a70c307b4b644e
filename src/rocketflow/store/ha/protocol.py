"""RocketMQ 4.x master/slave replication (the store's HA service) on the wire, without I/O.

One TCP connection per slave, to the master's HA port (listen port + 1 by default), carrying no
remoting frames:

- slave -> master: 8-byte big-endian commit-log offsets. The first is where the slave's log ends
  (0 when empty: the master then starts at the start of its own last segment); each later one
  acknowledges that everything below it is stored. Only the newest complete report counts.
- master -> slave: transfers, ``[8-byte offset][4-byte size][size bytes]``: raw commit-log bytes of
  one segment starting at that offset, cut wherever the batch size falls (records are not kept
  whole). A transfer of size 0 is a heartbeat.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from rocketflow.errors import RocketflowError

OFFSET_REPORT = struct.Struct(">q")
TRANSFER_HEADER = struct.Struct(">qi")


class HAProtocolError(RocketflowError, ValueError):
    """Bytes that cannot be a replication stream (the connection is closed)."""


def encode_offset_report(offset: int) -> bytes:
    """A slave's report: its commit log ends at `offset`."""
    return OFFSET_REPORT.pack(offset)


def encode_transfer_header(offset: int, size: int) -> bytes:
    """The header of a transfer of `size` bytes at `offset` (size 0: a heartbeat)."""
    return TRANSFER_HEADER.pack(offset, size)


class OffsetReportReader:
    """The master's side: bytes in, the newest complete offset report out."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> int | None:
        """Add received bytes; returns the newest offset they complete, or None if they complete none.

        Raises `HAProtocolError` for a negative offset.
        """
        buffer = self._buffer + data
        whole = len(buffer) - len(buffer) % OFFSET_REPORT.size
        self._buffer = buffer[whole:]
        if not whole:
            return None
        (offset,) = OFFSET_REPORT.unpack_from(buffer, whole - OFFSET_REPORT.size)
        if offset < 0:
            raise HAProtocolError(f"slave reported a negative commit-log offset {offset}")
        return int(offset)


@dataclass(frozen=True, slots=True)
class Transfer:
    """Commit-log bytes the master sent, to be stored at `offset` (empty: a heartbeat)."""

    offset: int
    data: bytes


class TransferReader:
    """The slave's side: bytes in, whole transfers out."""

    def __init__(self, max_size: int) -> None:
        #: the largest transfer accepted (a bigger size is taken for a corrupt stream)
        self.max_size = max_size
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Transfer]:
        """Add received bytes; returns the transfers they complete, in order.

        Raises `HAProtocolError` for a negative offset or a size outside 0..max_size.
        """
        buffer = self._buffer
        buffer += data
        transfers: list[Transfer] = []
        position = 0
        header_size = TRANSFER_HEADER.size
        while len(buffer) - position >= header_size:
            offset, size = TRANSFER_HEADER.unpack_from(buffer, position)
            if offset < 0:
                raise HAProtocolError(f"master sent a transfer at a negative offset {offset}")
            if not 0 <= size <= self.max_size:
                raise HAProtocolError(f"master sent a transfer of {size} bytes (at most {self.max_size} accepted)")
            end = position + header_size + size
            if end > len(buffer):
                break
            transfers.append(Transfer(offset, bytes(buffer[position + header_size:end])))
            position = end
        if position:
            del buffer[:position]
        return transfers

    @property
    def buffered(self) -> int:
        """Bytes received that do not make a whole transfer yet."""
        return len(self._buffer)


__all__ = [
    "OFFSET_REPORT",
    "TRANSFER_HEADER",
    "HAProtocolError",
    "OffsetReportReader",
    "Transfer",
    "TransferReader",
    "encode_offset_report",
    "encode_transfer_header",
]
