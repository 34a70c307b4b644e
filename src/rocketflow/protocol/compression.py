"""Compressed message bodies: zlib, as Java's ``Deflater`` and ``Inflater`` write and read them."""

from __future__ import annotations

import zlib
from typing import Final

from rocketflow.protocol.record_layout import RecordDecodeError

#: The level producers deflate large bodies with.
DEFAULT_COMPRESS_LEVEL: Final = 5


def compress_body(body: bytes | bytearray | memoryview, level: int = DEFAULT_COMPRESS_LEVEL) -> bytes:
    """Deflate ``body`` in the zlib format (Java's ``Deflater``), as producers do for large bodies."""
    if not -1 <= level <= 9:
        raise ValueError(f"compression level must be in -1..9, got {level}")
    return zlib.compress(body, level)


#: The shortest complete zlib stream: 2 header bytes, an empty final deflate block, the Adler-32.
MIN_ZLIB_BYTES: Final = 8


def has_zlib_header(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` can be a zlib stream (RFC 1950) as Java's ``Inflater`` reads it, by its first two
    bytes and its length only: deflate method, a window of at most 32 KiB, a valid check value, no preset
    dictionary. Cheap proof that a body flagged COMPRESSED is not; not that it inflates."""
    if len(data) < MIN_ZLIB_BYTES:
        return False
    cmf, flg = data[0], data[1]
    return cmf & 0x0F == 8 and cmf >> 4 <= 7 and ((cmf << 8) | flg) % 31 == 0 and not flg & 0x20


def decompress_body(data: bytes | bytearray | memoryview, max_size: int | None = None) -> bytes:
    """Inflate a zlib body.

    Raises `RecordDecodeError` if it is not a complete zlib stream or inflates past ``max_size``.
    """
    try:
        inflater = zlib.decompressobj()
        if max_size is None:
            body = inflater.decompress(data)
        else:
            body = inflater.decompress(data, max_size + 1)
            if len(body) > max_size:
                raise RecordDecodeError(f"compressed body inflates to more than {max_size} bytes")
        body += inflater.flush()
    except zlib.error as exc:
        raise RecordDecodeError(f"compressed body is not valid zlib data: {exc}") from None
    if not inflater.eof:
        raise RecordDecodeError("compressed body is truncated (incomplete zlib stream)")
    return body




__all__ = ["DEFAULT_COMPRESS_LEVEL", "MIN_ZLIB_BYTES", "compress_body", "decompress_body", "has_zlib_header"]
