"""Message ids (docs/design/wire-format.md, "Message ids") and the packed host addresses they are made of.

* The offset msg id, assigned by the broker: store host IP + port + commit log offset, in hex.
* The UNIQ_KEY, assigned by the producer: a per-process prefix, the milliseconds since the start
  of the month and a counter, in hex.
"""

from __future__ import annotations

import calendar
import datetime
import functools
import ipaddress
import os
import random
import struct
import threading
import time
from collections.abc import Callable
from typing import Final

from rocketflow.errors import RocketflowError

_PORT = struct.Struct(">i")
_PORT_OFFSET = struct.Struct(">iq")
_PID_HASH = struct.Struct(">HI")
_SPAN_COUNTER = struct.Struct(">IH")

#: Length of a packed host (IP bytes + i32 port).
HOST_SIZE_V4: Final = 8
HOST_SIZE_V6: Final = 20


class InvalidMessageIdError(RocketflowError, ValueError):
    """A message id that is not of the expected length or not hex."""


# --------------------------------------------------------------------------- hosts


@functools.lru_cache(maxsize=1024)
def _ip_bytes(host: str) -> bytes:
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(text).packed
    except ValueError:
        raise ValueError(f"{host!r} is not an IPv4 or IPv6 address") from None


@functools.lru_cache(maxsize=1024)
def _ip_text(raw: bytes) -> str:
    return str(ipaddress.ip_address(raw))


def pack_host(host: str, port: int) -> bytes:
    """``host:port`` as a record stores it: 4 or 16 IP bytes then an i32 port (8 or 20 bytes).

    Raises ValueError for a host that is not an IP address literal or a port outside 0..65535.
    """
    if not isinstance(host, str):
        raise ValueError(f"host must be an IP address string, not {type(host).__name__}")
    if not isinstance(port, int) or not 0 <= port <= 0xFFFF:
        raise ValueError(f"port must be an int in 0..65535, got {port!r}")
    return pack_decoded_host(host, port)


def pack_decoded_host(host: str, port: int) -> bytes:
    """`pack_host` without its port range check, for a host decoded from a record: there the port is
    any i32 (a damaged record's too), packed back as it was stored."""
    return _ip_bytes(host) + _PORT.pack(port)


def unpack_host(data: bytes | bytearray | memoryview) -> tuple[str, int]:
    """The inverse of `pack_host` for exactly 8 or 20 bytes."""
    size = len(data)
    if size not in (HOST_SIZE_V4, HOST_SIZE_V6):
        raise ValueError(f"a packed host is 8 or 20 bytes long, got {size}")
    raw = bytes(data)
    return _ip_text(raw[:-4]), _PORT.unpack_from(raw, size - 4)[0]


def is_ipv6_host(host: str) -> bool:
    """Whether ``host`` is an IPv6 address literal (ValueError if it is no IP address at all)."""
    return len(_ip_bytes(host)) == 16


# --------------------------------------------------------------------------- offset msg id


def create_offset_msg_id(host: str, port: int, commit_log_offset: int) -> str:
    """The broker's msg id: uppercase hex of IP + i32 port + i64 offset (32 chars IPv4, 56 IPv6)."""
    if not isinstance(commit_log_offset, int) or not 0 <= commit_log_offset <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"commit log offset must be an int in 0..2^63-1, got {commit_log_offset!r}")
    return (pack_host(host, port) + commit_log_offset.to_bytes(8, "big")).hex().upper()


def offset_msg_id_from_packed(store_host: bytes, commit_log_offset: int) -> str:
    """`create_offset_msg_id` from an already packed host (8 or 20 bytes)."""
    return (store_host + (commit_log_offset & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")).hex().upper()


def _hex_bytes(text: str, kind: str, lengths: tuple[int, int]) -> bytes:
    if not isinstance(text, str):
        raise InvalidMessageIdError(f"{kind} must be a string, not {type(text).__name__}")
    if len(text) not in lengths:
        raise InvalidMessageIdError(
            f"{kind} {text!r} has {len(text)} characters; expected {lengths[0]} (IPv4) or {lengths[1]} (IPv6)"
        )
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise InvalidMessageIdError(f"{kind} {text!r} is not hexadecimal") from None


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """``(host, port, commit_log_offset)`` of an offset msg id (32 hex chars = IPv4, 56 = IPv6)."""
    raw = _hex_bytes(msg_id, "offset msg id", (32, 56))
    ip_length = len(raw) - 12
    port, offset = _PORT_OFFSET.unpack_from(raw, ip_length)
    return _ip_text(raw[:ip_length]), port, offset


# --------------------------------------------------------------------------- UNIQ_KEY


def _local_month_start_ms(epoch_ms: int) -> int:
    """Start (local time, as Java's Calendar) of the month containing ``epoch_ms``."""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000)
    start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


def _next_month_start_ms(month_start_ms: int) -> int:
    moment = datetime.datetime.fromtimestamp(month_start_ms / 1000)
    days = calendar.monthrange(moment.year, moment.month)[1]
    following = (moment.replace(day=1) + datetime.timedelta(days=days)).replace(day=1)
    return int(following.timestamp() * 1000)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class UniqueIdGenerator:
    """Producer-side UNIQ_KEY ids, as RocketMQ's ``MessageClientIDSetter`` makes them.

    Layout: IP (4 or 16 bytes) + i16 pid + i32 random per generator (Java: the class loader's
    hash) + i32 milliseconds since the start of the current month + i16 counter. Thread-safe.

    The counter wraps every 65536 ids; the generator never reuses a (milliseconds, counter) pair
    within a month: after a wrap, and if the clock steps back, it keeps counting from its own last
    millisecond instead of the wall clock's.

    The address defaults to 127.0.0.1: pass the client's own IP (this layer does no network look-ups).
    """

    def __init__(
        self,
        ip: str = "127.0.0.1",
        pid: int | None = None,
        *,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        seed: int | None = None,
    ) -> None:
        pid = os.getpid() if pid is None else pid
        instance_hash = random.Random(seed).getrandbits(32)
        prefix = _ip_bytes(ip) + _PID_HASH.pack(pid & 0xFFFF, instance_hash)
        self._prefix_hex = prefix.hex().upper()
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._counter = 0
        self._floor_ms = -1
        self._month_start_ms = 0
        self._next_month_start_ms = 0

    @property
    def prefix(self) -> str:
        """The fixed hex prefix (IP, pid, instance hash) shared by all ids of this generator."""
        return self._prefix_hex

    def next_id(self) -> str:
        """A new id: 32 hex characters with an IPv4 prefix, 56 with IPv6."""
        with self._lock:
            now = self._clock_ms()
            if now < self._floor_ms:
                now = self._floor_ms
            if now >= self._next_month_start_ms:
                self._month_start_ms = _local_month_start_ms(now)
                self._next_month_start_ms = _next_month_start_ms(self._month_start_ms)
            counter = self._counter
            if counter == 0xFFFF:
                # A new counter cycle must start strictly after every millisecond of this one.
                self._counter = 0
                self._floor_ms = now + 1
            else:
                self._counter = counter + 1
                self._floor_ms = now
            span = (now - self._month_start_ms) & 0xFFFFFFFF
        return self._prefix_hex + _SPAN_COUNTER.pack(span, counter).hex().upper()


def parse_unique_id(unique_id: str, *, now_ms: int | None = None) -> tuple[str, int, int]:
    """``(ip, pid, timestamp_ms)`` of a UNIQ_KEY, for display.

    The id holds only milliseconds since a month start: the month is taken as the current one
    (``now_ms``, default now), or the previous one if that would put the id in the future. The pid
    is the low 16 bits of the producer's pid.
    """
    raw = _hex_bytes(unique_id, "unique id", (32, 56))
    ip_length = len(raw) - 12
    pid = int.from_bytes(raw[ip_length:ip_length + 2], "big")
    span = int.from_bytes(raw[ip_length + 6:ip_length + 10], "big")
    now = _wall_clock_ms() if now_ms is None else now_ms
    month_start = _local_month_start_ms(now)
    if month_start + span > now:
        month_start = _local_month_start_ms(month_start - 1)
    return _ip_text(raw[:ip_length]), pid, month_start + span


__all__ = [
    "HOST_SIZE_V4",
    "HOST_SIZE_V6",
    "InvalidMessageIdError",
    "UniqueIdGenerator",
    "create_offset_msg_id",
    "decode_offset_msg_id",
    "is_ipv6_host",
    "offset_msg_id_from_packed",
    "pack_decoded_host",
    "pack_host",
    "parse_unique_id",
    "unpack_host",
]
