"""The consumer-model enums the bodies carry, declared in Java's order (their ordinals are on the wire).

Ordinals follow the 4.9.3 Java declarations (and the C++ client's enums): ``ConsumeType``:
CONSUME_ACTIVELY 0, CONSUME_PASSIVELY 1; ``MessageModel``: BROADCASTING 0, CLUSTERING 1;
``ConsumeFromWhere``: CONSUME_FROM_LAST_OFFSET 0, CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST 1,
CONSUME_FROM_MIN_OFFSET 2, CONSUME_FROM_MAX_OFFSET 3, CONSUME_FROM_FIRST_OFFSET 4, CONSUME_FROM_TIMESTAMP 5.
"""

from __future__ import annotations

from enum import Enum


class ConsumeType(Enum):
    """How a consumer gets messages (pull/lite-pull consumers are ACTIVELY, push is PASSIVELY)."""

    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"


class MessageModel(Enum):
    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(Enum):
    """Where a new consumer group starts. Declaration order = Java ordinals (the C++ client sends those)."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class TopicFilterType(Enum):
    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


__all__ = ["ConsumeFromWhere", "ConsumeType", "MessageModel", "TopicFilterType"]
