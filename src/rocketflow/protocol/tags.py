"""Tag hash codes and tag subscriptions.

The consume queue stores, per message, Java's ``String.hashCode()`` of the TAGS property; a
subscription ``"TagA || TagB"`` matches on those codes on the broker and on the tag strings
again on the client.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from rocketflow.errors import RocketflowError

#: The subscription expression that matches every message.
SUB_ALL: Final = "*"
#: Separator of tags in a subscription expression.
TAG_SEPARATOR: Final = "||"


class SubscriptionParseError(RocketflowError, ValueError):
    """A subscription expression that names no tag (e.g. ``"||"``)."""


class SubscriptionTooLargeError(SubscriptionParseError):
    """A subscription expression past a bound (characters or tags) its reader sets."""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``: 31-polynomial over UTF-16 code units, wrapped to a signed int32.

    Characters outside the BMP count as their two surrogates; lone surrogates count as themselves.
    """
    units: Iterable[int]
    if text.isascii():
        units = text.encode("ascii")
    else:
        raw = text.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(raw) // 2}H", raw)
    value = 0
    for unit in units:
        value = (value * 31 + unit) & 0xFFFFFFFF
    return value - 0x100000000 if value & 0x80000000 else value


@functools.lru_cache(maxsize=4096)
def _cached_tags_code(tags: str) -> int:
    return java_string_hash(tags)


def tags_code(tags: str | None) -> int:
    """The consume-queue tags code of a TAGS property value: 0 when empty or absent."""
    if not tags:
        return 0
    return _cached_tags_code(tags)


def _to_int32(value: int) -> int:
    """Java's ``(int)`` cast of a long."""
    if -0x80000000 <= value <= 0x7FFFFFFF:
        return value
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value & 0x80000000 else value


@dataclass(frozen=True)
class Subscription:
    """A parsed tag subscription expression.

    ``tags_set`` keeps the tags in expression order without duplicates, ``code_set`` their hash
    codes likewise; both are empty for `SUB_ALL`.
    """

    sub_string: str
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    _tags_lookup: frozenset[str] = field(init=False, repr=False, compare=False)
    _codes_lookup: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_tags_lookup", frozenset(self.tags_set))
        object.__setattr__(self, "_codes_lookup", frozenset(self.code_set))

    @property
    def is_sub_all(self) -> bool:
        return self.sub_string == SUB_ALL

    def matches_tags_code(self, code: int) -> bool:
        """The broker-side filter: SUB_ALL, or the (int-cast) tags code is one of the subscribed codes."""
        return self.is_sub_all or _to_int32(code) in self._codes_lookup

    def matches_tags(self, tags: str | None) -> bool:
        """The client-side re-filter: with tags subscribed, only messages whose TAGS is one of them pass.

        Messages without tags are dropped unless the subscription has no tags (SUB_ALL).
        """
        if not self.tags_set:
            return True
        return tags is not None and tags in self._tags_lookup


def parse_subscription(expression: str | None, *, max_tags: int | None = None,
                       max_length: int | None = None) -> Subscription:
    """Parse ``"TagA || TagB"``: split on ``||``, trim each tag, drop empty and repeated ones.

    None, an empty or blank expression and ``"*"`` give SUB_ALL. An expression with separators but
    no tag raises `SubscriptionParseError`, and so does one longer than ``max_length`` characters or
    naming more than ``max_tags`` distinct tags (None: no bound). Linear in the expression's length.
    """
    if expression is None:
        return Subscription(SUB_ALL)
    if not isinstance(expression, str):
        raise SubscriptionParseError(
            f"subscription expression must be a string, not {type(expression).__name__}"
        )
    if max_length is not None and len(expression) > max_length:
        raise SubscriptionTooLargeError(
            f"subscription expression is {len(expression)} characters long, more than {max_length}"
        )
    stripped = expression.strip()
    if not stripped or stripped == SUB_ALL:
        return Subscription(SUB_ALL)
    # dicts keep the first occurrence's order and look up in O(1)
    tags = list(dict.fromkeys(tag for tag in (part.strip() for part in stripped.split(TAG_SEPARATOR)) if tag))
    if not tags:
        raise SubscriptionParseError(f"subscription expression {expression!r} names no tag")
    if max_tags is not None and len(tags) > max_tags:
        raise SubscriptionTooLargeError(f"subscription expression names {len(tags)} tags, more than {max_tags}")
    codes = list(dict.fromkeys(java_string_hash(tag) for tag in tags))
    return Subscription(expression, tags, codes)


__all__ = [
    "SUB_ALL",
    "TAG_SEPARATOR",
    "Subscription",
    "SubscriptionParseError",
    "SubscriptionTooLargeError",
    "java_string_hash",
    "parse_subscription",
    "tags_code",
]
