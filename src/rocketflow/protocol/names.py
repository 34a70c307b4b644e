"""Topic and group names, permissions and system topics."""

from __future__ import annotations

import re
from enum import IntFlag
from typing import Final

from rocketflow.errors import RocketflowError


class PermName(IntFlag):
    """Permission bits of a topic or broker (``perm``: 6 = READ|WRITE, 7 adds INHERIT)."""

    INHERIT = 0x1
    WRITE = 0x2
    READ = 0x4
    PRIORITY = 0x8


# plain ints: `int & IntFlag` builds a new IntFlag member, and every send checks its topic's perm
_READ: Final = int(PermName.READ)
_WRITE: Final = int(PermName.WRITE)
_INHERIT: Final = int(PermName.INHERIT)


def is_readable(perm: int) -> bool:
    return perm & _READ != 0


def is_writeable(perm: int) -> bool:
    return perm & _WRITE != 0


def is_inherited(perm: int) -> bool:
    return perm & _INHERIT != 0


def perm_to_string(perm: int) -> str:
    """Java's ``PermName.perm2String``: ``R``/``W``/``X`` (inherit) or ``-`` per position, e.g. ``"RW-"``."""
    return (
        ("R" if is_readable(perm) else "-")
        + ("W" if is_writeable(perm) else "-")
        + ("X" if is_inherited(perm) else "-")
    )


#: The topic whose route producers fall back on, and from which brokers auto-create topics.
DEFAULT_TOPIC: Final = "TBW102"
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC: Final = "BenchmarkTest"
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
#: Every topic starting with this is a system topic.
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"

SYSTEM_TOPICS: Final = frozenset({
    DEFAULT_TOPIC,
    SCHEDULE_TOPIC,
    BENCHMARK_TOPIC,
    TRANS_HALF_TOPIC,
    TRACE_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    SELF_TEST_TOPIC,
    OFFSET_MOVED_EVENT,
})

RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
#: Queues of a dead-letter topic.
DLQ_NUMS_PER_GROUP: Final = 1

TOPIC_MAX_LENGTH: Final = 127
GROUP_MAX_LENGTH: Final = 255
#: Default maximum body size of one message (producer ``maxMessageSize``, store ``maxMessageSize``).
MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024

VALID_NAME_PATTERN: Final = "^[%|a-zA-Z0-9_-]+$"
_VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")


class InvalidNameError(RocketflowError, ValueError):
    """A topic or group name that RocketMQ would reject."""


def _validate_name(kind: str, name: object, max_length: int) -> None:
    if not isinstance(name, str):
        raise InvalidNameError(f"the {kind} name must be a string, not {type(name).__name__}")
    if not name.strip():
        raise InvalidNameError(f"the {kind} name is blank")
    if len(name) > max_length:
        raise InvalidNameError(
            f"the {kind} name is {len(name)} characters long; at most {max_length} are allowed"
        )
    if _VALID_NAME.fullmatch(name) is None:
        bad = sorted({char for char in name if _VALID_NAME.fullmatch(char) is None})
        raise InvalidNameError(
            f"the {kind} name {name!r} contains illegal characters {''.join(bad)!r}; "
            f"allowed: {VALID_NAME_PATTERN}"
        )


def validate_topic(name: str) -> None:
    """Raise `InvalidNameError` unless ``name`` is a legal topic name (charset, at most 127 chars)."""
    _validate_name("topic", name, TOPIC_MAX_LENGTH)


def validate_group(name: str) -> None:
    """Raise `InvalidNameError` unless ``name`` is a legal group name (charset, at most 255 chars)."""
    _validate_name("group", name, GROUP_MAX_LENGTH)


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: where a group's failed messages wait to be consumed again."""
    return RETRY_GROUP_TOPIC_PREFIX + group


#: A cluster's reply topic is ``<cluster>_REPLY_TOPIC`` (MixAll.REPLY_TOPIC_POSTFIX).
REPLY_TOPIC_POSTFIX: Final = "REPLY_TOPIC"
#: ``MSG_TYPE`` of a reply message (MixAll.REPLY_MESSAGE_FLAG): producers send it with SEND_REPLY_MESSAGE.
REPLY_MESSAGE_FLAG: Final = "reply"


def reply_topic(cluster: str) -> str:
    """``<cluster>_REPLY_TOPIC``: where replies to request messages go (one queue on every broker)."""
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: where a group's messages go after too many retries."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def group_of_retry_topic(topic: str) -> str:
    """The group of a retry topic; `InvalidNameError` if ``topic`` is not one."""
    if not is_retry_topic(topic):
        raise InvalidNameError(f"{topic!r} is not a retry topic (no {RETRY_GROUP_TOPIC_PREFIX} prefix)")
    return topic[len(RETRY_GROUP_TOPIC_PREFIX):]


def group_of_dlq_topic(topic: str) -> str:
    """The group of a dead-letter topic; `InvalidNameError` if ``topic`` is not one."""
    if not is_dlq_topic(topic):
        raise InvalidNameError(f"{topic!r} is not a dead-letter topic (no {DLQ_GROUP_TOPIC_PREFIX} prefix)")
    return topic[len(DLQ_GROUP_TOPIC_PREFIX):]


def is_system_topic(name: str, cluster: str | None = None, broker: str | None = None) -> bool:
    """Whether ``name`` is a system topic: a well-known one, ``rmq_sys_*``, a cluster's reply topic, or the
    cluster or broker name."""
    return (
        name in SYSTEM_TOPICS
        or name.startswith(SYSTEM_TOPIC_PREFIX)
        or (cluster is not None and (name == cluster or name == reply_topic(cluster)))
        or name.endswith("_" + REPLY_TOPIC_POSTFIX)
        or (broker is not None and name == broker)
    )


__all__ = [
    "BENCHMARK_TOPIC",
    "DEFAULT_TOPIC",
    "DLQ_GROUP_TOPIC_PREFIX",
    "DLQ_NUMS_PER_GROUP",
    "GROUP_MAX_LENGTH",
    "MAX_MESSAGE_SIZE",
    "OFFSET_MOVED_EVENT",
    "REPLY_MESSAGE_FLAG",
    "REPLY_TOPIC_POSTFIX",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SCHEDULE_TOPIC",
    "SELF_TEST_TOPIC",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "TOPIC_MAX_LENGTH",
    "TRACE_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "VALID_NAME_PATTERN",
    "InvalidNameError",
    "PermName",
    "dlq_topic",
    "group_of_dlq_topic",
    "group_of_retry_topic",
    "is_dlq_topic",
    "is_inherited",
    "is_readable",
    "is_retry_topic",
    "is_system_topic",
    "is_writeable",
    "perm_to_string",
    "reply_topic",
    "retry_topic",
    "validate_group",
    "validate_topic",
]
