"""System flags: of a stored message (`MessageSysFlag`) and of a pull request (`PullSysFlag`)."""

from __future__ import annotations

from enum import IntFlag
from typing import Final


class MessageSysFlag(IntFlag):
    """Bits of a message's ``sysFlag`` (the record's SYSFLAG field and the send header's ``sysFlag``).

    Bits 2-3 hold one transaction type rather than two flags: read them with `transaction_value`.
    """

    TRANSACTION_NOT_TYPE = 0x0
    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20


#: The two bits that hold the transaction type.
TRANSACTION_TYPE_MASK: Final = 0xC
#: Every `MessageSysFlag` bit (RocketMQ 4.x's whole set).
KNOWN_MESSAGE_SYS_FLAGS: Final = 0x3F
#: RocketMQ 5.x's compression type, bits 8-10 beside COMPRESSED: 1 LZ4, 2 ZSTD, 3 zlib (4.x's only kind).
COMPRESSION_TYPE_MASK: Final = 0x700
COMPRESSION_ZLIB_TYPE: Final = 0x300


def transaction_value(flag: int) -> int:
    """The transaction type of ``flag``: 0 (not transactional), 0x4, 0x8 or 0xC."""
    return int(flag) & TRANSACTION_TYPE_MASK


def reset_transaction_value(flag: int, transaction_type: int) -> int:
    """``flag`` with its transaction bits replaced by ``transaction_type``."""
    return (int(flag) & ~TRANSACTION_TYPE_MASK) | (int(transaction_type) & TRANSACTION_TYPE_MASK)


def clear_compressed_flag(flag: int) -> int:
    """``flag`` without the COMPRESSED bit."""
    # Plain ints on purpose: ``~`` of an IntFlag member only inverts within the members' bits.
    return int(flag) & ~int(MessageSysFlag.COMPRESSED)


class PullSysFlag(IntFlag):
    """Bits of a PULL_MESSAGE request's ``sysFlag`` header field."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL = 0x10


_COMMIT_OFFSET: Final = int(PullSysFlag.COMMIT_OFFSET)
_SUSPEND: Final = int(PullSysFlag.SUSPEND)
_SUBSCRIPTION: Final = int(PullSysFlag.SUBSCRIPTION)
_CLASS_FILTER: Final = int(PullSysFlag.CLASS_FILTER)
_LITE_PULL: Final = int(PullSysFlag.LITE_PULL)


def build_pull_sys_flag(
    commit_offset: bool, suspend: bool, subscription: bool, class_filter: bool, lite_pull: bool = False
) -> int:
    """The pull ``sysFlag`` value for these options (a plain int, ready for a header field)."""
    # plain ints: an IntFlag ``|`` goes through enum's Python code, and this runs once per pull
    return ((_COMMIT_OFFSET if commit_offset else 0) | (_SUSPEND if suspend else 0)
            | (_SUBSCRIPTION if subscription else 0) | (_CLASS_FILTER if class_filter else 0)
            | (_LITE_PULL if lite_pull else 0))


def clear_commit_offset_flag(flag: int) -> int:
    """``flag`` without COMMIT_OFFSET (what a consumer does when it pulls from a slave)."""
    return int(flag) & ~int(PullSysFlag.COMMIT_OFFSET)


__all__ = [
    "COMPRESSION_TYPE_MASK",
    "COMPRESSION_ZLIB_TYPE",
    "KNOWN_MESSAGE_SYS_FLAGS",
    "TRANSACTION_TYPE_MASK",
    "MessageSysFlag",
    "PullSysFlag",
    "build_pull_sys_flag",
    "clear_commit_offset_flag",
    "clear_compressed_flag",
    "reset_transaction_value",
    "transaction_value",
]
