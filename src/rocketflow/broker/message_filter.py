"""SQL92 filtering of pulls (RocketMQ's ``ExpressionMessageFilter`` for ``MessageSelector.bySql``).

A tag subscription is decided on the consume queue (the tags code); an SQL92 one passes every unit
there and is decided on each record, by evaluating the expression against its properties. Brokers
accept SQL92 subscriptions only with ``enable_property_filter`` (``enablePropertyFilter``, off by
default as in RocketMQ).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from rocketflow.filter import EXPRESSION_TYPE_SQL92, FilterSyntaxError, Sql92Filter, compile_sql92
from rocketflow.protocol.bodies import SubscriptionData
from rocketflow.protocol.codec import RecordDecodeError, decode_record

#: Compiled expressions kept per broker (consumers of a group share one).
FILTER_CACHE_SIZE: Final = 1024


def is_tag_type(expression_type: str | None) -> bool:
    """Whether a subscription's expression type is TAG (RocketMQ's default when none is given)."""
    return not expression_type or expression_type == "TAG"


def filter_codes(subscription: SubscriptionData | None) -> frozenset[int] | None:
    """The tag codes a pull passes (None = everything), as ExpressionMessageFilter matches the consume queue."""
    if subscription is None or subscription.class_filter_mode:
        return None
    sub_string = subscription.sub_string
    if not sub_string or sub_string.strip() in ("*", ""):
        return None
    return frozenset(subscription.code_set)


class Sql92MessageFilter:
    """A store `RecordMessageFilter` passing the records whose properties match an SQL92 expression."""

    __slots__ = ("sql",)

    def __init__(self, sql: Sql92Filter) -> None:
        self.sql = sql

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return True

    def is_matched_by_commit_log(self, record: bytes) -> bool:
        try:
            message, _ = decode_record(record, decompress=False, with_body=False)
        except RecordDecodeError:
            return False
        return self.sql.matches(message.properties)


class FilterCompiler:
    """Compiles (and caches) the filter of a non-TAG subscription; `FilterSyntaxError` names what is wrong."""

    def __init__(self, size: int = FILTER_CACHE_SIZE) -> None:
        self._cache: OrderedDict[str, Sql92MessageFilter] = OrderedDict()
        self._size = size

    def compile(self, expression_type: str, expression: str) -> Sql92MessageFilter:
        if expression_type != EXPRESSION_TYPE_SQL92:
            raise FilterSyntaxError(f"unknown expression type {expression_type!r} (TAG or SQL92)")
        cache = self._cache
        found = cache.get(expression)
        if found is not None:
            cache.move_to_end(expression)
            return found
        compiled = cache[expression] = Sql92MessageFilter(compile_sql92(expression))
        if len(cache) > self._size:
            cache.popitem(last=False)
        return compiled


__all__ = ["FILTER_CACHE_SIZE", "FilterCompiler", "Sql92MessageFilter", "filter_codes", "is_tag_type"]
